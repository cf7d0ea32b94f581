"""Batched action sampling for PPO actors, and the matching training-side log-probs.

Randomness is counter-based (Philox4x32-10, :mod:`fastppo.kernels.rng`): env
``n`` of a call draws from the stream keyed by ``(seed, counter, n)``, so the
same ``(seed, counter)`` gives the same actions whatever the thread count and
however the batch is split (``env_offset=k`` makes row ``i`` of a slice use
stream ``k + i``). Callers bump ``counter`` every step.

All samplers validate in Python what is cheap (types, shapes, ranges) and let
the kernel find bad values (NaN or +inf logits, rows with no allowed action,
non-finite Gaussian parameters): the kernel returns the first bad env and this
layer raises ``ValueError`` naming it. When ``out=`` is given the kernel
validates every row before it writes anything, so a failed call leaves the
caller's buffers untouched; without ``out=`` the check rides along the
sampling pass and the partial fresh outputs are dropped.

References
----------
Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC11 (2011).
Schulman et al., "Proximal Policy Optimization Algorithms", arXiv:1707.06347.
Haarnoja et al., "Soft Actor-Critic", arXiv:1801.01290 (tanh squashing, App. C).
Huang & Ontanon, "A Closer Look at Invalid Action Masking in Policy Gradient
Algorithms", arXiv:2006.14171 (masked logits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo import codec as _codec
from fastppo._checks import as_array, describe, fail, int_vector
from fastppo._fastpath import CATEGORICAL
from fastppo._fastpath import fast as _fast
from fastppo.kernels import sampling as _k

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_U8 = np.dtype(np.uint8)
_BOOL = np.dtype(np.bool_)
_I8 = np.dtype(np.int8)
_U64_END = 1 << 64
_ENV_END = 1 << 32
_MASK32 = 0xFFFFFFFF

# Working-precision prototypes handed to the kernels (dtype only).
_P32 = np.empty(0, dtype=np.float32)
_P64 = np.empty(0, dtype=np.float64)
# The "no mask" placeholder: read-only like every kernel input (see _canon).
_NOMASK_RO = np.zeros((1, 1), dtype=np.uint8)
_NOMASK_RO.flags.writeable = False

# Above this many logits (Gaussian: a quarter of it, as each value costs ~4x
# more) the parallel build runs. Measured on the 2-core CI-class machine under
# load: for [4096 x 18] the serial build took 0.8 ms while the parallel one
# took 0.4 ms at best but 7-15 ms at the median, because a parallel region
# that must wait for a descheduled worker stalls the whole call. Below ~256k
# logits the serial build is the robust choice; above it the work per thread
# dwarfs such stalls. Results are bit-identical either way.

_OFFS: dict[int, np.ndarray] = {}
# Below the parallel size, plain numpy calls take the Cython fast path.
_fast.set_limit(CATEGORICAL, _dispatch.PARALLEL_MIN_LOGITS)


def _offs1(a: int) -> np.ndarray:
    o = _OFFS.get(a)
    if o is None:
        o = np.array([0, a], dtype=np.int64)
        if len(_OFFS) < 256:
            _OFFS[a] = o
    return o


def _u64(fn: str, name: str, v: Any) -> int:
    if type(v) is int and 0 <= v < _U64_END:
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        if 0 <= int(v) < _U64_END:
            return int(v)
        fail(fn, name, "an int in [0, 2**64)", repr(v))
    fail(fn, name, "an int in [0, 2**64)", repr(v), exc=TypeError)


def _env_offset(fn: str, v: Any, n: int) -> int:
    if type(v) is not int:
        if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
            fail(fn, "env_offset", "a non-negative int", repr(v), exc=TypeError)
        v = int(v)
    if v < 0 or v + n > _ENV_END:
        fail(fn, "env_offset", f"in [0, 2**32 - n_envs] (n_envs={n})", repr(v))
    return v


def _flag(fn: str, name: str, v: Any) -> bool:
    if v is True or v is False:
        return v
    if isinstance(v, np.bool_):
        return bool(v)
    fail(fn, name, "a bool", repr(v), exc=TypeError)


def _logits2d(fn: str, name: str, x: Any) -> np.ndarray:
    a = x if type(x) is np.ndarray else as_array(fn, name, x)
    dt = a.dtype
    if dt is not _F32 and dt is not _F64 and dt != _F32 and dt != _F64:
        fail(fn, name, "float32 or float64", f"dtype {dt}", "use .astype(np.float32)", TypeError)
    if a.ndim != 2:
        fail(fn, name, "2-D [n_envs, n_actions]", f"shape {a.shape}")
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def _mask2d(fn: str, mask: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 view of a bool/uint8/int8 mask of ``shape`` (nonzero = allowed)."""
    m = mask if type(mask) is np.ndarray else as_array(fn, "mask", mask)
    dt = m.dtype
    if dt is not _U8 and dt != _U8:
        if dt != _BOOL and dt != _I8:
            fail(fn, "mask", "bool, uint8 or int8", f"dtype {dt}", "use .astype(bool)", TypeError)
        m = m.view(_U8)  # same bytes, nonzero = allowed
    if m.shape != shape:
        fail(fn, "mask", f"shape {shape} like logits", f"shape {m.shape}")
    if not m.flags.c_contiguous:
        m = np.ascontiguousarray(m)
    return m


def _outs(
    fn: str,
    out: Any,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    dtypes: tuple[np.dtype, np.dtype],
    names: tuple[str, str],
    inputs: dict[str, np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(
            fn,
            "out",
            f"a tuple ({names[0]}, {names[1]}) of two arrays",
            describe(out),
            exc=TypeError,
        )
    res = []
    for k in range(2):
        o = as_array(fn, f"out[{k}] ({names[k]})", out[k])
        if o.dtype != dtypes[k]:
            fail(
                fn,
                f"out[{k}] ({names[k]})",
                f"dtype {dtypes[k]}",
                f"dtype {o.dtype}",
                exc=TypeError,
            )
        if o.shape != shapes[k]:
            fail(fn, f"out[{k}] ({names[k]})", f"shape {shapes[k]}", f"shape {o.shape}")
        if not o.flags.writeable:
            fail(fn, f"out[{k}] ({names[k]})", "writeable", "a read-only array")
        if not o.flags.c_contiguous:
            fail(fn, f"out[{k}] ({names[k]})", "C-contiguous", "a strided array")
        res.append(o)
    if np.may_share_memory(res[0], res[1]):
        fail(fn, "out", "two non-overlapping arrays", "arrays that share memory")
    for o in res:
        for name, a in inputs.items():
            if a is not None and np.may_share_memory(o, a):
                fail(fn, "out", f"not to overlap the input {name!r}", "a buffer that shares memory")
    return res[0], res[1]


def _ro(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (``a`` itself when already read-only)."""
    if a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a


def _canon(x: np.ndarray, m: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Kernel inputs as read-only views (the mask placeholder when ``m`` is None).

    Numba compiles one variant per combination of read-only flags, and a
    sampler variant takes 10-50 s to compile: passing every input read-only
    keeps it to one per dtype, shared by the array and byte samplers, for a
    view (~0.3 us) per call.
    """
    return _ro(x), (_NOMASK_RO if m is None else _ro(m))


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
    within 2 ulp (see :mod:`fastppo.kernels.sampling`); sums are float64.
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
    if type(seed) is not int or not 0 <= seed < _U64_END:
        seed = _u64(fn, "seed", seed)
    if type(counter) is not int or not 0 <= counter < _U64_END:
        counter = _u64(fn, "counter", counter)
    if type(env_offset) is not int or env_offset < 0 or env_offset + n > _ENV_END:
        env_offset = _env_offset(fn, env_offset, n)
    if deterministic is not False and deterministic is not True:
        deterministic = _flag(fn, "deterministic", deterministic)
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
    kern = (
        _k.categorical_parallel if n * a >= _dispatch.PARALLEL_MIN_LOGITS else _k.categorical_serial
    )
    f32 = dt is _F32 or dt == _F32
    st = kern(
        xk,
        0 if f32 else 1,
        mk,
        m is not None,
        offs,
        seed & _MASK32,
        seed >> 32,
        counter & _MASK32,
        counter >> 32,
        env_offset,
        deterministic,
        out is not None,
        _P32 if f32 else _P64,
        act,
        logp,
    )
    if st >= 0:
        _bad_categorical(fn, x, m, offs, st, env_offset)
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
    s = _u64(fn, "seed", seed)
    c = _u64(fn, "counter", counter)
    eo = _env_offset(fn, env_offset, n)
    det = _flag(fn, "deterministic", deterministic)
    if out is None:
        act = np.empty((n, d), dtype=np.int64)
        logp = np.empty(n, dtype=np.float32)
    else:
        act, logp = _outs(
            fn, out, ((n, d), (n,)), (_I64, _F32), ("actions", "logp"), {"logits": x, "mask": m}
        )
    x, mk = _canon(x, m)
    kern = (
        _k.multi_categorical_parallel
        if n * w >= _dispatch.PARALLEL_MIN_LOGITS
        else _k.multi_categorical_serial
    )
    st = kern(
        x,
        0 if x.dtype == _F32 else 1,
        mk,
        m is not None,
        offs,
        s & _MASK32,
        s >> 32,
        c & _MASK32,
        c >> 32,
        eo,
        det,
        out is not None,
        _P32 if x.dtype == _F32 else _P64,
        act.reshape(-1),
        logp,
    )
    if st >= 0:
        _bad_categorical(fn, x, m, offs, st, eo)
    return act, logp


def _bad_gaussian(
    fn: str,
    mean: np.ndarray,
    ls: np.ndarray,
    row: int,
    env_offset: int,
    names: tuple[str, str] = ("mean", "log_std"),
) -> None:
    where = f"env {row}" if env_offset == 0 else f"row {row} (env {env_offset + row})"
    for name, arr in ((names[0], mean[row]), (names[1], ls[0] if ls.shape[0] == 1 else ls[row])):
        v = np.asarray(arr, dtype=np.float64)
        bad = ~np.isfinite(v)
        if bad.any():
            j = int(np.argmax(bad))
            fail(fn, name, "finite", f"{float(v[j])!r} at {where}, dimension {j}")
    raise AssertionError(f"{fn}: kernel reported row {row} but it looks valid")  # pragma: no cover


def sample_gaussian(
    mean: Any,
    log_std: Any,
    *,
    seed: int,
    counter: int,
    env_offset: int = 0,
    squash: bool = False,
    deterministic: bool = False,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sample diagonal-Gaussian actions, optionally tanh-squashed.

    Parameters
    ----------
    mean : float32 or float64 array [N, A]
    log_std : array [N, A] or [A] (state-independent), same dtype as ``mean``
    seed, counter, env_offset
        As :func:`sample_categorical`.
    squash : bool, default False
        Return ``tanh(u)`` and correct the log-density for the change of
        variables.
    deterministic : bool, default False
        Return the mean (``tanh(mean)`` when squashed).
    out : (float32 [N, A], float32 [N]), optional

    Returns
    -------
    actions : float32 [N, A]
    logp : float32 [N]
        ``sum_j log N(u_j; mean_j, std_j)`` minus ``sum_j log(1 - tanh(u_j)^2)``
        when squashed.

    Notes
    -----
    ``u = mean + exp(log_std) * z`` with ``z`` standard normal from the env's
    stream by Box-Muller (pair ``j // 2`` of uniforms; cosine for even ``j``,
    sine for odd). ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``,
    finite even where ``tanh(u)`` rounds to 1 (Haarnoja et al. 2018).
    Box & Muller, Ann. Math. Statist. 29 (1958) 610-611.
    """
    fn = "sample_gaussian"
    mu = _logits2d(fn, "mean", mean)
    n, a_dim = mu.shape
    ls = log_std if type(log_std) is np.ndarray else as_array(fn, "log_std", log_std)
    if ls.dtype != mu.dtype:
        fail(
            fn,
            "log_std",
            f"{mu.dtype} like mean",
            f"dtype {ls.dtype}",
            f"use .astype(np.{mu.dtype})",
            TypeError,
        )
    if ls.shape == (a_dim,):
        ls2 = ls.reshape(1, a_dim)
    elif ls.shape == mu.shape:
        ls2 = ls
    else:
        fail(fn, "log_std", f"shape {mu.shape} or ({a_dim},)", f"shape {ls.shape}")
    if not ls2.flags.c_contiguous:
        ls2 = np.ascontiguousarray(ls2)
    s = _u64(fn, "seed", seed)
    c = _u64(fn, "counter", counter)
    eo = _env_offset(fn, env_offset, n)
    sq = _flag(fn, "squash", squash)
    det = _flag(fn, "deterministic", deterministic)
    if out is None:
        act = np.empty((n, a_dim), dtype=np.float32)
        logp = np.empty(n, dtype=np.float32)
    else:
        act, logp = _outs(
            fn,
            out,
            ((n, a_dim), (n,)),
            (_F32, _F32),
            ("actions", "logp"),
            {"mean": mu, "log_std": ls2},
        )
    mu, ls2 = _ro(mu), _ro(ls2)  # one variant per dtype (see _canon)
    kern = (
        _k.gaussian_parallel if n * a_dim >= _dispatch.PARALLEL_MIN_GAUSSIAN else _k.gaussian_serial
    )
    st = kern(
        mu,
        0,
        ls2,
        0,
        a_dim,
        0 if mu.dtype == _F32 else 1,
        ls2.shape[0] == 1 and n != 1,
        s & _MASK32,
        s >> 32,
        c & _MASK32,
        c >> 32,
        eo,
        sq,
        det,
        act,
        logp,
    )
    if st >= 0:
        _bad_gaussian(fn, mu, ls2, st, eo)
    return act, logp


def categorical_logp_entropy(
    logits: Any, actions: Any, mask: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """Log-probability of stored actions and entropy of the (masked) categorical.

    Parameters
    ----------
    logits : float32 or float64 array [N, A]
    actions : integer array [N]
        Actions taken, each in ``[0, A)`` and allowed.
    mask : bool or uint8 array [N, A], optional

    Returns
    -------
    logp, entropy : arrays [N] of the logits' dtype
        ``logp = l_a - logsumexp(l)`` and ``H = -sum_j p_j log p_j`` over the
        allowed actions (masked or ``-inf`` logits contribute 0, never NaN),
        computed in float64.
    """
    fn = "categorical_logp_entropy"
    x = _logits2d(fn, "logits", logits)
    n, a = x.shape
    act = actions if type(actions) is np.ndarray else as_array(fn, "actions", actions)
    if act.dtype.kind not in "iu":
        fail(
            fn,
            "actions",
            "an integer array",
            f"dtype {act.dtype}",
            "use .astype(np.int64)",
            TypeError,
        )
    if act.shape != (n,):
        fail(fn, "actions", f"shape ({n},)", f"shape {act.shape}")
    act = np.ascontiguousarray(act, dtype=np.int64)
    m = None if mask is None else _mask2d(fn, mask, x.shape)
    logp = np.empty(n, dtype=x.dtype)
    ent = np.empty(n, dtype=x.dtype)
    kern = (
        _k.categorical_logp_entropy_parallel
        if n * a >= _dispatch.PARALLEL_MIN_LOGITS
        else _k.categorical_logp_entropy_serial
    )
    x, mk = _canon(x, m)
    st = kern(x, mk, m is not None, act, logp, ent)
    if st >= 0:
        a_i = int(act[st])
        if not 0 <= a_i < a:
            fail(fn, "actions", f"in [0, {a})", f"{a_i} at env {st}")
        r = np.asarray(x[st], dtype=np.float64)
        if np.isnan(r).any() or (r == np.inf).any():
            _bad_categorical(fn, x, m, _offs1(a), st, 0)
        fail(fn, "actions", "allowed by the mask and of finite logit", f"action {a_i} at env {st}")
    return logp, ent


def gaussian_logp_entropy(
    mean: Any, log_std: Any, actions: Any, squash: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Log-density of stored actions and entropy of the diagonal Gaussian.

    Parameters
    ----------
    mean : float32 or float64 array [N, A]
    log_std : array [N, A] or [A], same dtype
    actions : float32 or float64 array [N, A]
        With ``squash``, values in [-1, 1]; ``u = atanh(a)`` with ``a`` clipped
        to ``+-(1 - 2**-24)`` (float32 ``tanh`` saturates at 1 for ``|u| > 9``,
        so the exact pre-image is lost there).
    squash : bool, default False

    Returns
    -------
    logp : [N], the mean's dtype
        As :func:`sample_gaussian` computes it.
    entropy : [N], the mean's dtype
        ``sum_j (log_std_j + (1 + log 2 pi) / 2)``: the entropy of the
        Gaussian before squashing. The squashed entropy has no closed form;
        like Stable-Baselines3's SAC/PPO (which return None and fall back to
        ``-logp``) we do not estimate it, and this pre-squash value is the
        usual bonus term.
    """
    fn = "gaussian_logp_entropy"
    mu = _logits2d(fn, "mean", mean)
    n, a_dim = mu.shape
    ls = as_array(fn, "log_std", log_std)
    if ls.dtype != mu.dtype:
        fail(
            fn,
            "log_std",
            f"{mu.dtype} like mean",
            f"dtype {ls.dtype}",
            f"use .astype(np.{mu.dtype})",
            TypeError,
        )
    if ls.shape == (a_dim,):
        ls2 = ls.reshape(1, a_dim)
    elif ls.shape == mu.shape:
        ls2 = ls
    else:
        fail(fn, "log_std", f"shape {mu.shape} or ({a_dim},)", f"shape {ls.shape}")
    act = as_array(fn, "actions", actions)
    if act.dtype != _F32 and act.dtype != _F64:
        fail(
            fn,
            "actions",
            "float32 or float64",
            f"dtype {act.dtype}",
            "use .astype(np.float32)",
            TypeError,
        )
    if act.shape != mu.shape:
        fail(fn, "actions", f"shape {mu.shape}", f"shape {act.shape}")
    sq = _flag(fn, "squash", squash)
    for name, arr in (("mean", mu), ("log_std", ls2), ("actions", act)):
        fin = np.isfinite(arr)
        if not fin.all():
            idx = np.argwhere(~fin)[0]
            fail(
                fn,
                name,
                "finite",
                f"{arr[tuple(idx)]!r} at env {int(idx[0])}"
                if arr.ndim == 2 and arr.shape[0] == n
                else f"{arr[tuple(idx)]!r} at index {tuple(int(i) for i in idx)}",
            )
    if sq and ((act < -1) | (act > 1)).any():
        idx = np.argwhere((act < -1) | (act > 1))[0]
        fail(
            fn,
            "actions",
            "in [-1, 1] with squash=True",
            f"{act[tuple(idx)]!r} at env {int(idx[0])}",
        )
    act = np.ascontiguousarray(act, dtype=mu.dtype)
    logp = np.empty(n, dtype=mu.dtype)
    ent = np.empty(n, dtype=mu.dtype)
    kern = (
        _k.gaussian_logp_entropy_parallel
        if n * a_dim >= _dispatch.PARALLEL_MIN_LOGITS
        else _k.gaussian_logp_entropy_serial
    )
    kern(mu, np.ascontiguousarray(ls2), ls2.shape[0] == 1 and n != 1, act, sq, logp, ent)
    return logp, ent


_KIND = {
    "float32": _k.KIND_F32,
    "float64": _k.KIND_F64,
    "float16": _k.KIND_F16,
    "bfloat16": _k.KIND_BF16,
}


def _count(fn: str, name: str, v: Any, lo: int) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        fail(fn, name, f"an int >= {lo}", repr(v), exc=TypeError)
    if v < lo:
        fail(fn, name, f"an int >= {lo}", repr(v))
    return int(v)


# Largest action index each wire dtype holds exactly.
_ACTION_MAX = {
    "int8": 2**7 - 1,
    "int16": 2**15 - 1,
    "int32": 2**31 - 1,
    "int64": 2**63 - 1,
    "uint8": 255,
    "bool": 1,
    "float16": 2048,
    "bfloat16": 256,
    "float32": 2**24,
    "float64": 2**53,
}


def sample_categorical_bytes(
    logits_buf: Any,
    *,
    n_envs: int,
    n_actions: int,
    dtype: str = "float32",
    mask_buf: Any = None,
    action_dtype: str = "int64",
    seed: int,
    counter: int,
    env_offset: int = 0,
    deterministic: bool = False,
) -> tuple[bytes, bytes]:
    """:func:`sample_categorical` on raw buffers: decode fused into the sampling pass.

    Parameters
    ----------
    logits_buf : buffer-protocol object
        ``n_envs * n_actions`` logits of ``dtype`` (float16, bfloat16,
        float32 or float64), little-endian, row-major. Read in place: no
        float32 copy is made.
    n_envs, n_actions : int
    mask_buf : buffer-protocol object, optional
        One byte per (env, action), 0 = masked.
    action_dtype : str
        Wire dtype of the returned actions; must hold ``n_actions - 1``
        exactly (e.g. at most 128 actions for int8, 2 for bool).
    seed, counter, env_offset, deterministic
        As :func:`sample_categorical`; same inputs give the same actions.

    Returns
    -------
    act_bytes : bytes
        ``n_envs`` actions of ``action_dtype``.
    logp_bytes : bytes
        ``n_envs`` float32 log-probabilities.
    """
    fn = "sample_categorical_bytes"
    n = _count(fn, "n_envs", n_envs, 0)
    a = _count(fn, "n_actions", n_actions, 1)
    dt = _codec.check_dtype(fn, "dtype", dtype, _codec.FLOAT_DTYPES)
    adt = _codec.check_dtype(fn, "action_dtype", action_dtype)
    if a - 1 > _ACTION_MAX[adt]:
        fail(fn, "action_dtype", f"able to hold action {a - 1} exactly", repr(adt))
    x = _ro(
        _codec.typed_view(
            fn, "logits_buf", logits_buf, dt, n * a, f"{n} envs x {a} actions"
        ).reshape(n, a)
    )
    m = None
    if mask_buf is not None:
        m = _ro(
            _codec.typed_view(
                fn, "mask_buf", mask_buf, "uint8", n * a, f"{n} envs x {a} actions"
            ).reshape(n, a)
        )
    s = _u64(fn, "seed", seed)
    c = _u64(fn, "counter", counter)
    eo = _env_offset(fn, env_offset, n)
    det = _flag(fn, "deterministic", deterministic)
    act = np.empty(n, dtype=np.int64)
    logp = np.empty(n, dtype=np.float32)
    kern = (
        _k.categorical_parallel if n * a >= _dispatch.PARALLEL_MIN_LOGITS else _k.categorical_serial
    )
    st = kern(
        x,
        _KIND[dt],
        _NOMASK_RO if m is None else m,
        m is not None,
        _offs1(a),
        s & _MASK32,
        s >> 32,
        c & _MASK32,
        c >> 32,
        eo,
        det,
        False,
        _P64 if dt == "float64" else _P32,
        act,
        logp,
    )
    if st >= 0:
        dec = _codec.decode(logits_buf, dt, (n, a), out_dtype="float64")
        _bad_categorical(fn, dec, m, _offs1(a), st, eo, "logits_buf", "mask_buf")
    ab = act.tobytes() if adt == "int64" else _codec.encode_into(fn, "actions", act, adt).tobytes()
    return ab, logp.tobytes()


def sample_gaussian_bytes(
    params_buf: Any,
    *,
    n_envs: int,
    action_dim: int,
    dtype: str = "float32",
    action_dtype: str = "float32",
    seed: int,
    counter: int,
    env_offset: int = 0,
    squash: bool = False,
    deterministic: bool = False,
) -> tuple[bytes, bytes]:
    """:func:`sample_gaussian` on a raw ``[mean | log_std]`` parameter buffer.

    Parameters
    ----------
    params_buf : buffer-protocol object
        Per env ``[mean_0..mean_{A-1}, log_std_0..log_std_{A-1}]`` of
        ``dtype`` (float16, bfloat16, float32, float64): ``n_envs * 2 *
        action_dim`` values, decoded inside the sampling pass.
    n_envs, action_dim : int
    action_dtype : str
        Wire dtype of the returned actions (float dtypes round to nearest;
        integer dtypes truncate toward zero and are range-checked).
    seed, counter, env_offset, squash, deterministic
        As :func:`sample_gaussian`.

    Returns
    -------
    act_bytes : bytes
        ``n_envs * action_dim`` actions of ``action_dtype``.
    logp_bytes : bytes
        ``n_envs`` float32 log-densities.
    """
    fn = "sample_gaussian_bytes"
    n = _count(fn, "n_envs", n_envs, 0)
    a_dim = _count(fn, "action_dim", action_dim, 1)
    dt = _codec.check_dtype(fn, "dtype", dtype, _codec.FLOAT_DTYPES)
    adt = _codec.check_dtype(fn, "action_dtype", action_dtype)
    p = _ro(
        _codec.typed_view(
            fn,
            "params_buf",
            params_buf,
            dt,
            n * 2 * a_dim,
            f"{n} envs x [mean | log_std] of {a_dim}",
        ).reshape(n, 2 * a_dim)
    )
    s = _u64(fn, "seed", seed)
    c = _u64(fn, "counter", counter)
    eo = _env_offset(fn, env_offset, n)
    sq = _flag(fn, "squash", squash)
    det = _flag(fn, "deterministic", deterministic)
    act = np.empty((n, a_dim), dtype=np.float32)
    logp = np.empty(n, dtype=np.float32)
    kern = (
        _k.gaussian_parallel if n * a_dim >= _dispatch.PARALLEL_MIN_GAUSSIAN else _k.gaussian_serial
    )
    st = kern(
        p,
        0,
        p,
        a_dim,
        a_dim,
        _KIND[dt],
        False,
        s & _MASK32,
        s >> 32,
        c & _MASK32,
        c >> 32,
        eo,
        sq,
        det,
        act,
        logp,
    )
    if st >= 0:
        dec = _codec.decode(params_buf, dt, (n, 2 * a_dim), out_dtype="float64")
        _bad_gaussian(
            fn,
            dec[:, :a_dim],
            dec[:, a_dim:],
            st,
            eo,
            ("params_buf (mean)", "params_buf (log_std)"),
        )
    ab = (
        act.tobytes() if adt == "float32" else _codec.encode_into(fn, "actions", act, adt).tobytes()
    )
    return ab, logp.tobytes()


def _warmup() -> None:
    """Compile every sampler variant: float32/float64 arrays, the four byte dtypes,
    serial and parallel builds (sizes straddling the parallel threshold)."""
    for n in (1, _dispatch.PARALLEL_MIN_LOGITS):
        for dt in (np.float32, np.float64):
            lg = np.zeros((n, 2), dtype=dt)
            mk = np.ones((n, 2), dtype=bool)
            sample_categorical(lg, seed=0, counter=0)
            sample_categorical(lg, mk, seed=0, counter=0)
            sample_multi_categorical(lg, [1, 1], mk, seed=0, counter=0)
            sample_gaussian(lg, lg[0], seed=0, counter=0)
            sample_gaussian(lg, lg, seed=0, counter=0)
            categorical_logp_entropy(lg, np.zeros(n, dtype=np.int64), mk)
            gaussian_logp_entropy(lg, lg[0], lg.astype(dt), squash=True)
        for bdt in _codec.FLOAT_DTYPES:
            buf = _codec.encode(np.zeros(2 * n, dtype=np.float32), bdt)
            sample_categorical_bytes(buf, n_envs=n, n_actions=2, dtype=bdt, seed=0, counter=0)
            sample_categorical_bytes(
                buf, n_envs=n, n_actions=2, dtype=bdt, mask_buf=b"\x01" * (2 * n), seed=0, counter=0
            )
            sample_gaussian_bytes(buf, n_envs=n, action_dim=1, dtype=bdt, seed=0, counter=0)
