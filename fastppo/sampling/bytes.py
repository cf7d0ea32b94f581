"""Sampling straight from raw byte buffers of any dtype: ``sample_categorical_bytes``,
``sample_gaussian_bytes``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo import codec as _codec
from fastppo._checks import fail
from fastppo._jit import by_size
from fastppo.kernels import categorical as _kc
from fastppo.kernels import chunks as _kk
from fastppo.kernels import gaussian as _kg
from fastppo.sampling._common import (
    _NOMASK_RO,
    _P32,
    _P64,
    _flag,
    _offs1,
    _ro,
    stream,
)
from fastppo.sampling.categorical import _bad_categorical
from fastppo.sampling.gaussian import _bad_gaussian

_KIND = {
    "float32": _kk.KIND_F32,
    "float64": _kk.KIND_F64,
    "float16": _kk.KIND_F16,
    "bfloat16": _kk.KIND_BF16,
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
    key, det = stream(fn, seed, counter, env_offset, n, deterministic)
    act = np.empty(n, dtype=np.int64)
    logp = np.empty(n, dtype=np.float32)
    kern = by_size(_kc.categorical, n * a, _dispatch.PARALLEL_MIN_LOGITS)
    st = kern(
        x,
        _KIND[dt],
        _NOMASK_RO if m is None else m,
        m is not None,
        _offs1(a),
        key,
        det,
        False,
        _P64 if dt == "float64" else _P32,
        act,
        logp,
    )
    if st >= 0:
        dec = _codec.decode(logits_buf, dt, (n, a), out_dtype="float64")
        _bad_categorical(fn, dec, m, _offs1(a), st, key[4], "logits_buf", "mask_buf")
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
    key, det = stream(fn, seed, counter, env_offset, n, deterministic)
    sq = _flag(fn, "squash", squash)
    act = np.empty((n, a_dim), dtype=np.float32)
    logp = np.empty(n, dtype=np.float32)
    kern = by_size(_kg.gaussian, n * a_dim, _dispatch.PARALLEL_MIN_GAUSSIAN)
    st = kern(
        p,
        0,
        p,
        a_dim,
        a_dim,
        _KIND[dt],
        False,
        key,
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
            key[4],
            ("params_buf (mean)", "params_buf (log_std)"),
        )
    ab = (
        act.tobytes() if adt == "float32" else _codec.encode_into(fn, "actions", act, adt).tobytes()
    )
    return ab, logp.tobytes()
