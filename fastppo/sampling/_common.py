"""What every sampler shares: argument rules, the stream prologue, outputs, kernel dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import as_array, c_contiguous, check_no_overlap, check_out_pair, fail
from fastppo._fastpath import CATEGORICAL, GAUSSIAN
from fastppo._fastpath import fast as _fast

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

_OFFS: dict[int, np.ndarray] = {}
# Below the parallel size, plain numpy calls take the Cython fast path.
_fast.set_limit(CATEGORICAL, _dispatch.PARALLEL_MIN_LOGITS)
_fast.set_limit(GAUSSIAN, _dispatch.PARALLEL_MIN_GAUSSIAN)


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


def stream(
    fn: str, seed: Any, counter: Any, env_offset: Any, n: int, deterministic: Any
) -> tuple[tuple[int, int, int, int, int], bool]:
    """The stream arguments every sampler takes, checked, as its kernel takes them.

    Returns ``((seed_lo, seed_hi, counter_lo, counter_hi, env_offset),
    deterministic)``, the first the kernels' stream record
    (:data:`fastppo.kernels.rng.STREAM`): ``seed`` and ``counter`` in
    ``[0, 2**64)`` split into 32-bit halves (Philox's key and counter words),
    ``env_offset`` such that the ``n`` streams stay below ``2**32``. The plain case costs four type
    tests; anything else goes through the checks that raise the house errors.
    """
    if type(seed) is not int or not 0 <= seed < _U64_END:
        seed = _u64(fn, "seed", seed)
    if type(counter) is not int or not 0 <= counter < _U64_END:
        counter = _u64(fn, "counter", counter)
    if type(env_offset) is not int or env_offset < 0 or env_offset + n > _ENV_END:
        env_offset = _env_offset(fn, env_offset, n)
    if deterministic is not False and deterministic is not True:
        deterministic = _flag(fn, "deterministic", deterministic)
    words = (seed & _MASK32, seed >> 32, counter & _MASK32, counter >> 32, env_offset)
    return words, deterministic


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
    return c_contiguous(a)


def gaussian_params(fn: str, mean: Any, log_std: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(mean [N, A], log_std [1 or N, A])``: C-contiguous, one float dtype.

    ``log_std`` is state-independent ``[A]`` (returned as ``[1, A]``, as is an
    ``[N, A]`` view broadcast over envs) or per-env ``[N, A]``, and must have
    ``mean``'s dtype.
    """
    mu = _logits2d(fn, "mean", mean)
    a_dim = mu.shape[1]
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
        # a broadcast view (stride 0 over envs: np.broadcast_to, torch's
        # expand) or a copy of one row per env (what SB3 and torch policies
        # hand over for a state-independent log-std) is one row: take the
        # state-independent path. Both paths compute exp and the densities
        # alike (the same bits; rows equal by == differ at most in the sign of
        # a zero, which no sum they enter can see).
        ls2 = ls[:1] if ls.strides[0] == 0 else c_contiguous(ls)
        if _fast.same_rows(ls2):
            ls2 = ls2[:1]
    else:
        fail(fn, "log_std", f"shape {mu.shape} or ({a_dim},)", f"shape {ls.shape}")
    return mu, c_contiguous(ls2)


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
    return c_contiguous(m)


def _outs(
    fn: str,
    out: Any,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    dtypes: tuple[np.dtype, np.dtype],
    names: tuple[str, str],
    inputs: dict[str, np.ndarray | None],
) -> tuple[np.ndarray, np.ndarray]:
    """``out=(first, second)`` checked by the house rules: dtype, shape, writeable,
    C-contiguous (the kernels write flat rows), no overlap with each other or an input."""
    pair = check_out_pair(fn, out, shapes, dtypes, names, contiguous=True)
    check_no_overlap(fn, pair, inputs)
    return pair


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
