"""Bit-exact float16 / bfloat16 conversion for kernels, and the codec sweeps.

numpy has no bfloat16, and Numba has no float16 arithmetic, so both formats
travel as their uint16 bit patterns and are converted here by bit
manipulation. Decoding is exact (every float16 and bfloat16 value is a
float32). Encoding rounds to nearest, ties to even, from float64, so a float32
or float64 input is rounded once (no double rounding); NaN stays NaN (a quiet
NaN with the sign kept), values past the largest finite one become inf.

Formats (IEEE 754-2008 binary16; Google Brain bfloat16 = the top half of a
binary32):

======== ============= ============== =====
format   exponent bits mantissa bits  bias
======== ============= ============== =====
float16  5             10             15
bfloat16 8             7              127
======== ============= ============== =====
"""

from __future__ import annotations

import numba
import numpy as np

from fastppo._jit import inline, kernel_pair

_U16 = np.uint16
_U32 = np.uint32


@inline
def f16_to_f32(h):  # pragma: no cover - compiled
    """float16 bits (any int type, low 16 bits used) -> exact float32."""
    h = np.uint32(h)
    sign = (h >> _U32(15)) & _U32(1)
    e = (h >> _U32(10)) & _U32(0x1F)
    m = h & _U32(0x3FF)
    if e == _U32(0):
        # zero or subnormal: m * 2**-24, exact in float32
        v = np.float32(m) * np.float32(5.960464477539063e-08)
        return -v if sign else v
    if e == _U32(31):
        bits = (sign << _U32(31)) | _U32(0x7F800000) | (m << _U32(13))
    else:
        bits = (sign << _U32(31)) | ((e + _U32(112)) << _U32(23)) | (m << _U32(13))
    return np.uint32(bits).view(np.float32)


@inline
def bf16_to_f32(h):  # pragma: no cover - compiled
    """bfloat16 bits -> exact float32 (the bits are the top half of a float32)."""
    return np.uint32(np.uint32(h) << _U32(16)).view(np.float32)


@inline
def _round_small_float(x, mbits, ebits):  # pragma: no cover - compiled
    """float64 ``x`` -> bits of the nearest float with ``ebits``/``mbits`` (ties to even).

    Works on the float64 bit pattern: for a normal result the low
    ``52 - mbits`` mantissa bits are rounded away (a carry into the exponent
    is the right answer, up to inf); a subnormal result is ``x / 2**(emin -
    mbits)`` rounded to an integer, which is exact arithmetic in float64.
    """
    bias = (1 << (ebits - 1)) - 1
    emin = 1 - bias
    b = np.float64(x).view(np.uint64)
    sign = np.int64(b >> np.uint64(63)) << (mbits + ebits)
    inf_bits = ((1 << ebits) - 1) << mbits
    if x != x:
        return sign | inf_bits | (1 << (mbits - 1))
    a = abs(x)
    e = np.int64((b >> np.uint64(52)) & np.uint64(0x7FF)) - 1023
    if e > bias:  # |x| >= 2**(bias+1), including inf
        return sign | inf_bits
    if e < emin:
        # subnormal (or zero) in the target: round a * 2**(mbits - emin) to an
        # integer with ties to even; 2**52 + q forces that rounding.
        q = a * 2.0 ** (mbits - emin)
        r = (q + 4503599627370496.0) - 4503599627370496.0
        return sign | np.int64(r)
    mant = np.int64(b & np.uint64(0xFFFFFFFFFFFFF))
    drop = 52 - mbits
    keep = mant >> drop
    rem = mant & ((1 << drop) - 1)
    half = 1 << (drop - 1)
    if rem > half or (rem == half and (keep & 1) == 1):
        keep += 1
    # keep == 2**mbits carries into the exponent; at e == bias that is inf.
    return sign | (((e + bias) << mbits) + keep)


@inline
def f32_to_f16_bits(x):  # pragma: no cover - compiled
    """float -> float16 bits, round to nearest even (from the float64 value)."""
    return np.uint16(_round_small_float(np.float64(x), 10, 5))


@inline
def f32_to_bf16_bits(x):  # pragma: no cover - compiled
    """float -> bfloat16 bits, round to nearest even (from the float64 value)."""
    return np.uint16(_round_small_float(np.float64(x), 7, 8))


@kernel_pair("void(u2_1, f4_1w)")
def _decode_f16(src, out):  # pragma: no cover - compiled
    for i in numba.prange(src.shape[0]):
        out[i] = f16_to_f32(src[i])


@kernel_pair("void(u2_1, f4_1w)")
def _decode_bf16(src, out):  # pragma: no cover - compiled
    for i in numba.prange(src.shape[0]):
        out[i] = bf16_to_f32(src[i])


@kernel_pair("void(F_1, u2_1w)")
def _encode_f16(src, out):  # pragma: no cover - compiled
    for i in numba.prange(src.shape[0]):
        out[i] = f32_to_f16_bits(src[i])


@kernel_pair("void(F_1, u2_1w)")
def _encode_bf16(src, out):  # pragma: no cover - compiled
    for i in numba.prange(src.shape[0]):
        out[i] = f32_to_bf16_bits(src[i])
