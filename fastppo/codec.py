"""Byte buffers <-> arrays for the ten wire dtypes.

Dtype names: ``int8 int16 int32 int64 uint8 float16 bfloat16 float32 float64
bool``, little-endian, row-major. ``decode`` turns any buffer-protocol object
(bytes, bytearray, memoryview, mmap, a numpy array) into a float32 array
(float dtypes) or an int64 array (integer dtypes and bool), without a copy
when the buffer already holds that dtype and is aligned; ``encode`` turns an
array into the bytes of any of the ten dtypes.

Conversions:

* float -> float16 / bfloat16 / float32: round to nearest, ties to even, from
  the exact input value (no double rounding); NaN stays NaN; a finite value
  past the format's range becomes inf (IEEE overflow);
* float -> integer: rounded toward zero, then range-checked (``ValueError``);
  NaN and inf are errors;
* integer -> float: must be exact (``ValueError`` naming the first integer
  the target cannot represent, e.g. 2049 in float16);
* integer -> integer: range-checked;
* bool: encoded as one byte 0/1 (values must be 0 or 1); decoded as 0/1
  (any nonzero byte is 1).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import as_array, fail
from fastppo._jit import by_size
from fastppo.kernels import codec as _kcodec

if sys.byteorder != "little":  # pragma: no cover - no big-endian CI
    raise ImportError("fastppo.codec: zero-copy decoding assumes a little-endian host")

DTYPES = (
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "bool",
)

# wire dtype -> numpy dtype of its storage (bfloat16 travels as uint16 bits)
_STORAGE: dict[str, np.dtype] = {
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "float16": np.dtype(np.uint16),
    "bfloat16": np.dtype(np.uint16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "bool": np.dtype(np.uint8),
}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
_INT_RANGE = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 255),
    "bool": (0, 1),
}
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_OUT_DTYPES: dict[str, np.dtype] = {"float32": _F32, "float64": _F64, "int64": _I64}


def itemsize(dtype: str) -> int:
    """Bytes per element of a wire dtype."""
    return _STORAGE[dtype].itemsize


def check_dtype(fn: str, name: str, dtype: Any, allowed: tuple[str, ...] = DTYPES) -> str:
    """A wire dtype name from ``allowed`` (numpy dtypes are accepted by name)."""
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        dtype = np.dtype(dtype).name
    if not isinstance(dtype, str) or dtype not in allowed:
        fail(fn, name, f"one of {', '.join(allowed)}", repr(dtype), exc=TypeError)
    return dtype


def byte_view(fn: str, name: str, buf: Any) -> np.ndarray:
    """A zero-copy 1-D uint8 view of any C-contiguous buffer-protocol object."""
    if isinstance(buf, np.ndarray):
        if buf.dtype.hasobject:
            fail(fn, name, "a buffer of plain values", "an array of Python objects", exc=TypeError)
        if not buf.flags.c_contiguous:
            fail(
                fn,
                name,
                "a C-contiguous buffer",
                "a non-contiguous array",
                "use np.ascontiguousarray first",
            )
        return buf.reshape(-1).view(np.uint8)
    try:
        mv = memoryview(buf)
    except TypeError:
        # torch CPU tensors and other __array__/__dlpack__ objects: a zero-copy
        # ndarray view (accelerator tensors are refused there, naming the device).
        if not (hasattr(buf, "__array__") or hasattr(buf, "__dlpack__")):
            fail(
                fn,
                name,
                "a buffer-protocol object (bytes, bytearray, memoryview, mmap, ndarray) "
                "or a CPU array/tensor",
                type(buf).__name__,
                exc=TypeError,
            )
        arr = as_array(fn, name, buf)
        if arr.dtype.hasobject:
            fail(fn, name, "a numeric buffer", f"dtype {arr.dtype}", exc=TypeError)
        return byte_view(fn, name, arr)
    if not mv.c_contiguous:
        fail(fn, name, "a C-contiguous buffer", "a non-contiguous memoryview")
    return np.frombuffer(mv, dtype=np.uint8)


def typed_view(fn: str, name: str, buf: Any, dtype: str, count: int, what: str) -> np.ndarray:
    """The first-level view of ``buf`` as ``count`` elements of ``dtype``'s storage.

    The length must be exact; the error names the expected byte count.
    Misaligned buffers are copied once (Numba kernels read aligned arrays).
    """
    raw = byte_view(fn, name, buf)
    st = _STORAGE[dtype]
    want = count * st.itemsize
    if raw.shape[0] != want:
        fail(fn, name, f"{want} bytes ({what} of {dtype})", f"{raw.shape[0]} bytes")
    arr = raw.view(st)
    if not arr.flags.aligned:
        arr = arr.copy()
    return arr


def _pick(pair: tuple[Any, Any], n: int) -> Any:
    return by_size(pair, n, _dispatch.PARALLEL_MIN_ELEMENTS)


def decode_half(src: np.ndarray, out: np.ndarray, bf16: bool) -> None:
    """uint16 bit patterns [n] -> float32 [n] (float16, or bfloat16 when ``bf16``)."""
    _pick(_kcodec._decode_bf16 if bf16 else _kcodec._decode_f16, src.shape[0])(src, out)


def encode_half(src: np.ndarray, out: np.ndarray, bf16: bool) -> None:
    """float32/float64 [n] -> uint16 bit patterns [n], round to nearest even."""
    _pick(_kcodec._encode_bf16 if bf16 else _kcodec._encode_f16, src.shape[0])(src, out)


def _shape(fn: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (int(shape),)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 0 for s in shape
    ):
        fail(fn, "shape", "an int or a tuple of non-negative ints", repr(shape), exc=TypeError)
    return tuple(int(s) for s in shape)


def decode(buf: Any, dtype: str, shape: Any = None, *, out_dtype: str | None = None) -> np.ndarray:
    """Decode a buffer of ``dtype`` elements into a float32 or int64 array.

    Parameters
    ----------
    buf : bytes, bytearray, memoryview, mmap, numpy array, ...
        Any C-contiguous buffer-protocol object holding exactly
        ``prod(shape) * itemsize(dtype)`` bytes, little-endian.
    dtype : str
        Wire dtype of the elements (one of :data:`DTYPES`).
    shape : int or tuple of int, optional
        Shape of the result; default 1-D of the buffer's element count.
    out_dtype : {"float32", "float64", "int64"}, optional
        Result dtype. Default float32 for float wire dtypes, int64 for
        integer dtypes and bool.

    Returns
    -------
    numpy.ndarray
        A zero-copy view of ``buf`` when ``dtype`` equals ``out_dtype`` and the
        buffer is aligned (read-only when ``buf`` is), else a new array.

    Raises
    ------
    ValueError
        The buffer length does not match (the message gives the expected
        byte count); a float value converted to int64 is NaN or out of range.
    TypeError
        Unknown dtype or a non-buffer object.
    """
    fn = "decode"
    dtype = check_dtype(fn, "dtype", dtype)
    target: np.dtype
    if out_dtype is None:
        target = _F32 if dtype in FLOAT_DTYPES else _I64
    else:
        target = _OUT_DTYPES[check_dtype(fn, "out_dtype", out_dtype, tuple(_OUT_DTYPES))]
    if shape is None:
        raw = byte_view(fn, "buf", buf)
        size = _STORAGE[dtype].itemsize
        if raw.shape[0] % size:
            fail(fn, "buf", f"a multiple of {size} bytes ({dtype})", f"{raw.shape[0]} bytes")
        shp: tuple[int, ...] = (raw.shape[0] // size,)
    else:
        shp = _shape(fn, shape)
    count = math.prod(shp)  # a Python int: a huge shape cannot wrap to a small count
    st = typed_view(fn, "buf", buf, dtype, count, f"shape {shp}")
    if dtype in ("float16", "bfloat16"):
        vals = np.empty(count, dtype=np.float32)
        decode_half(st, vals, dtype == "bfloat16")
    elif dtype == "bool":
        vals = (st != 0).view(np.uint8)
    else:
        vals = st
    return _convert(fn, "buf", vals, target).reshape(shp)


def _first_bad(fn: str, arg: str, values: np.ndarray, bad: np.ndarray, expected: str) -> None:
    if bad.any():
        i = int(np.argmax(bad.reshape(-1)))
        fail(fn, arg, expected, f"{values.reshape(-1)[i].item()!r} at flat index {i}")


def _convert(fn: str, arg: str, vals: np.ndarray, target: np.dtype) -> np.ndarray:
    """Convert with the module's rules; returns ``vals`` itself when no conversion is needed."""
    if vals.dtype == target:
        return vals
    if target.kind == "f":
        if vals.dtype.kind in "iub":
            _check_int_exact(fn, arg, vals, target.name)
        with np.errstate(over="ignore", invalid="ignore"):  # IEEE overflow/NaN are the rule
            return vals.astype(target)
    # to int64
    if vals.dtype.kind == "f":
        return _float_to_int(fn, arg, vals, "int64")
    return vals.astype(target)


def _float_to_int(fn: str, arg: str, vals: np.ndarray, dtype: str) -> np.ndarray:
    lo, hi = _INT_RANGE[dtype]
    with np.errstate(invalid="ignore"):
        t = np.trunc(vals.astype(np.float64))
        # hi + 1 is a power of two, exact in float64, so the bound is exact
        bad = ~((t >= lo) & (t < float(hi) + 1.0))
    _first_bad(fn, arg, vals, bad, f"finite and within [{lo}, {hi}] after truncation")
    return t.astype(_STORAGE[dtype] if dtype != "bool" else np.uint8)


# Significand bits and largest finite value of each float wire dtype: an
# integer is exact in the format when its odd part has at most that many bits
# and it does not exceed the largest finite value.
_FLOAT_FORMAT = {
    "float16": (11, 65504),
    "bfloat16": (8, 2**64),  # bfloat16's range (~3.4e38) holds every 64-bit integer
    "float32": (24, 2**64),
    "float64": (53, 2**64),
}


def _check_int_exact(fn: str, arg: str, vals: np.ndarray, dtype: str) -> None:
    """Integers must survive the trip to float ``dtype`` unchanged.

    Decided on the integers themselves (no float64 detour, which would round
    int64/uint64 beyond 2**53 first): ``|v| = odd * 2**k`` is exact with a
    ``p``-bit significand when ``odd < 2**p`` and ``|v|`` is in range.
    """
    if vals.size == 0 or vals.dtype.kind == "b":
        return
    bits, largest = _FLOAT_FORMAT[dtype]
    v = vals.reshape(-1)
    if v.dtype.kind == "i":
        u = v.astype(np.int64).view(np.uint64)
        mag = np.where(v < 0, ~u + np.uint64(1), u)  # two's complement |v|, INT64_MIN too
    else:
        mag = v.astype(np.uint64)
    low = mag & (~mag + np.uint64(1))  # lowest set bit (0 for 0)
    odd = mag // np.maximum(low, np.uint64(1))
    ok = odd < np.uint64(2**bits)
    if largest < 2**64:
        ok &= mag <= np.uint64(largest)
    _first_bad(fn, arg, vals, ~ok, f"integers exactly representable in {dtype}")


def encode_into(fn: str, arg: str, a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` converted to ``dtype``'s storage array (validated); used by encode and the samplers."""
    st = _STORAGE[dtype]
    k = a.dtype.kind
    if dtype in ("float16", "bfloat16"):
        if k in "iub":
            _check_int_exact(fn, arg, a, dtype)
        with np.errstate(invalid="ignore"):
            src = a if k == "f" and a.dtype in (_F32, _F64) else a.astype(np.float64)
        src = np.ascontiguousarray(src).reshape(-1)
        out = np.empty(src.shape[0], dtype=np.uint16)
        encode_half(src, out, dtype == "bfloat16")
        return out
    if dtype in ("float32", "float64"):
        if k in "iub":
            _check_int_exact(fn, arg, a, dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # IEEE overflow/NaN are the rule
            return np.ascontiguousarray(a, dtype=st).reshape(-1)
    # integer or bool targets
    if k == "f" and dtype == "bool":
        _first_bad(fn, arg, a, (a != 0) & (a != 1), "0 or 1 for bool")
    if k == "f":
        return _float_to_int(fn, arg, a, dtype).reshape(-1)
    if k == "b":
        return np.ascontiguousarray(a, dtype=st).reshape(-1)
    lo, hi = _INT_RANGE[dtype]
    if a.size:
        amin, amax = int(a.min()), int(a.max())
        if amin < lo or amax > hi:
            bad = (a < lo) | (a > hi)
            _first_bad(fn, arg, a, bad, f"within [{lo}, {hi}] for {dtype}")
    return np.ascontiguousarray(a, dtype=st).reshape(-1)


def encode(array: Any, dtype: str) -> bytes:
    """Encode an array as little-endian, row-major bytes of wire ``dtype``.

    Parameters
    ----------
    array : array-like of bool, integers or float16/float32/float64
        Any shape; read in C order. Not modified.
    dtype : str
        Target wire dtype (one of :data:`DTYPES`).

    Returns
    -------
    bytes
        ``array.size * itemsize(dtype)`` bytes.

    Raises
    ------
    ValueError
        An integer target that a value does not fit after truncation toward
        zero (or a NaN/inf), an integer the float target cannot represent
        exactly, a bool target given a value other than 0 or 1.
    TypeError
        Unknown dtype, or an array of a non-numeric dtype.
    """
    fn = "encode"
    dtype = check_dtype(fn, "dtype", dtype)
    a = as_array(fn, "array", array)
    if a.dtype.kind not in "biuf":
        fail(fn, "array", "bool, integer or float", f"dtype {a.dtype}", exc=TypeError)
    if a.dtype == np.float16:
        with np.errstate(invalid="ignore"):  # signalling NaNs stay NaN
            a = a.astype(np.float32)  # exact
    return encode_into(fn, "array", a, dtype).tobytes()
