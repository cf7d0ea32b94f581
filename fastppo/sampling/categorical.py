"""Categorical and multi-discrete sampling (masked), with log-probs: ``sample_categorical``,
``sample_multi_categorical``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import as_array, fail, int_vector
from fastppo._fastpath import fast as _fast
from fastppo._jit import by_size
from fastppo.kernels import categorical as _k
from fastppo.sampling._common import (
    _BOOL,
    _F32,
    _F64,
    _I64,
    _OFFS,
    _P32,
    _P64,
    _U8,
    _canon,
    _logits2d,
    _mask2d,
    _offs1,
    _outs,
    stream,
)


def _bad_categorical(
    fn: str,
    x: np.ndarray,
    mask: np.ndarray | None,
    offs: np.ndarray,
    row: int,
    env_offset: int,
    logits_name: str = "logits",
    mask_name: str = "mask",
) -> None:
    """Raise the ValueError for row ``row`` that the kernel reported."""
    where = f"env {row}" if env_offset == 0 else f"row {row} (env {env_offset + row})"
    r = np.asarray(x[row], dtype=np.float64)
    bad = np.isnan(r) | (r == np.inf)
    if bad.any():
        j = int(np.argmax(bad))
        fail(
            fn,
            logits_name,
            "free of NaN and +inf (use -inf to mask)",
            f"{float(r[j])!r} at {where}, action {j}",
        )
    allowed = r != -np.inf
    if mask is not None:
        allowed &= np.asarray(mask[row]) != 0
    for d in range(offs.shape[0] - 1):
        if not allowed[offs[d] : offs[d + 1]].any():
            dim = "" if offs.shape[0] == 2 else f" in dimension {d}"
            if mask is not None:
                fail(
                    fn,
                    mask_name,
                    "nonzero for at least one action with a finite logit in each env",
                    f"no allowed action at {where}{dim}",
                )
            fail(
                fn,
                logits_name,
                "finite for at least one action in each env (-inf = masked)",
                f"all -inf at {where}{dim}",
            )
    raise AssertionError(f"{fn}: kernel reported row {row} but it looks valid")  # pragma: no cover


def sample_categorical(
    logits: Any,
    mask: Any = None,
    *,
    seed: int,
    counter: int,
    env_offset: int = 0,
    deterministic: bool = False,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sample one action per env from softmax(logits), optionally masked.

    Parameters
    ----------
    logits : float32 or float64 array [N, A]
        Unnormalised log-probabilities. ``-inf`` marks an action as not
        allowed; NaN and ``+inf`` are errors.
    mask : bool or uint8 array [N, A], optional
        Nonzero = allowed. A masked action is never sampled.
    seed, counter : int in [0, 2**64)
        Key and step of the counter-based generator; env ``n`` uses the
        stream ``(seed, counter, env_offset + n)``.
    env_offset : int, default 0
        Global index of row 0 (for slices of a larger batch).
    deterministic : bool, default False
        Return the mode: the first allowed action of largest logit.
    out : (int64 [N], float32 [N]), optional
        C-contiguous buffers for (actions, logp); nothing is written to them
        if the call raises.

    Returns
    -------
    actions : int64 [N]
    logp : float32 [N]
        Log-probability of the action under the masked distribution.

    Raises
    ------
    ValueError
        A NaN/+inf logit or a row without an allowed action (naming the
        env), shapes, ranges. ``TypeError`` for dtypes.

    Notes
    -----
    Inverse CDF with one uniform ``u`` per env: ``a = min{j : u * s <
    sum_{k<=j} e_k}``, ``e_k = exp(l_k - max l)`` over allowed ``k``, ``s =
    sum_k e_k``; ``log p = (l_a - max l) - log s``. The float32 ``exp`` used is
    within 2 ulp (see :mod:`fastppo.kernels.categorical`); sums are float64.
    """
    # The N = 1 actor loop pays this layer on every step: the Cython fast path
    # takes plain numpy calls (C-level header checks, C entry of the serial
    # kernel); anything else comes back as None and is validated below.
    res = _fast.sample_categorical(logits, mask, seed, counter, env_offset, deterministic, out)
    if res is not None:
        return res
    fn = "sample_categorical"
    x = logits if type(logits) is np.ndarray else as_array(fn, "logits", logits)
    dt = x.dtype
    if dt is not _F32 and dt is not _F64:
        x = _logits2d(fn, "logits", x)
        dt = x.dtype
    if x.ndim != 2 or not x.flags.c_contiguous:
        x = _logits2d(fn, "logits", x)
    n, a = x.shape
    if a == 0:
        fail(fn, "logits", "[N, A] with A >= 1", f"shape {x.shape}")
    m = None
    if mask is not None:
        m = mask
        if type(m) is not np.ndarray or m.shape != x.shape or not m.flags.c_contiguous:
            m = _mask2d(fn, mask, x.shape)
        elif m.dtype is _BOOL:
            m = m.view(_U8)  # same bytes, nonzero = allowed
        elif m.dtype is not _U8:
            m = _mask2d(fn, m, x.shape)  # int8 -> uint8 view, or a TypeError
    key, det = stream(fn, seed, counter, env_offset, n, deterministic)
    if out is None:
        act = np.empty(n, dtype=np.int64)
        logp = np.empty(n, dtype=np.float32)
    else:
        act, logp = _outs(
            fn, out, ((n,), (n,)), (_I64, _F32), ("actions", "logp"), {"logits": x, "mask": m}
        )
    offs = _OFFS.get(a)
    if offs is None:
        offs = _offs1(a)
    xk, mk = _canon(x, m)
    kern = by_size(_k.categorical, n * a, _dispatch.PARALLEL_MIN_LOGITS)
    f32 = dt is _F32 or dt == _F32
    st = kern(
        xk,
        0 if f32 else 1,
        mk,
        m is not None,
        offs,
        key,
        det,
        out is not None,
        _P32 if f32 else _P64,
        act,
        logp,
    )
    if st >= 0:
        _bad_categorical(fn, x, m, offs, st, key[4])
    return act, logp


def _nvec(fn: str, nvec: Any, width: int) -> np.ndarray:
    # Each count within [1, width] before anything is summed: the int64 sum of
    # counts like [2**63 - 1, 2**63 - 1, 7] would wrap to the width and send
    # the kernel past the end of the logits.
    v = int_vector(fn, "nvec", nvec, 1, max(width, 1))
    if int(v.sum()) != width:
        fail(fn, "nvec", f"to sum to logits.shape[1] = {width}", f"sum {int(v.sum())}")
    offs = np.zeros(v.size + 1, dtype=np.int64)
    np.cumsum(v, out=offs[1:])
    return offs


def sample_multi_categorical(
    logits: Any,
    nvec: Any,
    mask: Any = None,
    *,
    seed: int,
    counter: int,
    env_offset: int = 0,
    deterministic: bool = False,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sample a gymnasium ``MultiDiscrete(nvec)`` action per env.

    Parameters
    ----------
    logits : float32 or float64 array [N, sum(nvec)]
        Dimension ``d``'s logits are columns ``sum(nvec[:d]) : sum(nvec[:d+1])``.
    nvec : sequence of int [D]
        Number of choices per dimension.
    mask : bool or uint8 array [N, sum(nvec)], optional
        Nonzero = allowed; every dimension needs an allowed action.
    seed, counter, env_offset, deterministic
        As :func:`sample_categorical`; dimension ``d`` uses uniform ``d`` of
        the env's stream, so ``nvec=[A]`` equals ``sample_categorical``.
    out : (int64 [N, D], float32 [N]), optional

    Returns
    -------
    actions : int64 [N, D]
        Action within each dimension (0-based).
    logp : float32 [N]
        Sum over dimensions of the log-probabilities (dimensions are
        independent given the logits).
    """
    fn = "sample_multi_categorical"
    x = _logits2d(fn, "logits", logits)
    n, w = x.shape
    offs = _nvec(fn, nvec, w)
    d = offs.shape[0] - 1
    m = None if mask is None else _mask2d(fn, mask, x.shape)
    key, det = stream(fn, seed, counter, env_offset, n, deterministic)
    if out is None:
        act = np.empty((n, d), dtype=np.int64)
        logp = np.empty(n, dtype=np.float32)
    else:
        act, logp = _outs(
            fn, out, ((n, d), (n,)), (_I64, _F32), ("actions", "logp"), {"logits": x, "mask": m}
        )
    x, mk = _canon(x, m)
    kern = by_size(_k.multi_categorical, n * w, _dispatch.PARALLEL_MIN_LOGITS)
    st = kern(
        x,
        0 if x.dtype == _F32 else 1,
        mk,
        m is not None,
        offs,
        key,
        det,
        out is not None,
        _P32 if x.dtype == _F32 else _P64,
        act.reshape(-1),
        logp,
    )
    if st >= 0:
        _bad_categorical(fn, x, m, offs, st, key[4])
    return act, logp
