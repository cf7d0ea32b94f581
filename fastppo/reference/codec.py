"""Independent codec reference: float16 through numpy, bfloat16 by exact float64 arithmetic.

The kernels convert by bit manipulation; this module gets the same answers a
different way (``frexp`` scaling and an explicit nearest / ties-to-even
choice), so agreement is evidence, not tautology. Reference only.
"""

from __future__ import annotations

import numpy as np

BF16_MAX = (2.0 - 2.0**-7) * 2.0**127


def bf16_bits_to_float(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits -> float64 values from the format's definition (not by shifting)."""
    b = np.asarray(bits, dtype=np.int64)
    sign = np.where(b >> 15, -1.0, 1.0)
    e = (b >> 7) & 0xFF
    m = (b & 0x7F).astype(np.float64)
    normal = sign * (1.0 + m / 128.0) * np.exp2(e.astype(np.float64) - 127.0)
    sub = sign * m * 2.0**-133
    out = np.where(e == 0, sub, normal)
    out = np.where((e == 0xFF) & (m == 0), sign * np.inf, out)
    return np.where((e == 0xFF) & (m != 0), np.nan, out)


def float_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Nearest bfloat16 (ties to even) of float64 values, as uint16 bits.

    ``|x| = f * 2**e`` with ``f`` in [0.5, 1); the representable neighbours are
    multiples of ``ulp = 2**max(e - 8, -133)``; pick the nearer, the even
    multiple on a tie. Values that round past the largest finite bfloat16
    become inf; NaN becomes a quiet NaN.
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.empty(x.shape, dtype=np.uint16)
    for idx, v in np.ndenumerate(x):
        sign = 0x8000 if np.signbit(v) else 0
        if np.isnan(v):
            out[idx] = sign | 0x7FC0
            continue
        a = abs(float(v))
        if np.isinf(a):
            out[idx] = sign | 0x7F80
            continue
        if a == 0.0:
            out[idx] = sign
            continue
        _, e = np.frexp(a)
        ulp = 2.0 ** max(int(e) - 8, -133)
        q = a / ulp  # exact: ulp is a power of two
        lo = np.floor(q)
        diff = q - lo
        if diff > 0.5 or (diff == 0.5 and int(lo) % 2 == 1):
            lo += 1.0
        val = lo * ulp
        if val > BF16_MAX:
            out[idx] = sign | 0x7F80
            continue
        bits = int(np.float32(val).view(np.uint32)) >> 16
        out[idx] = sign | bits
    return out
