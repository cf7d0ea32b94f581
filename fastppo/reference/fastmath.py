"""Pure-numpy twins of :mod:`fastppo.kernels.fastmath` (``expf32``, ``exp64``,
``log64``, ``tanh64``), bit for bit.

Each step is one IEEE operation of the kernel's width, in its order (no FMA), so
the results match the compiled function exactly; see the kernel module for
the formula and its accuracy. Reference only: tests import it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fastppo.kernels import fastmath as K

_f32 = np.float32


def expf32(x: np.ndarray) -> np.ndarray:
    """float32 ``exp(x)``: 0 for ``x <= -87.3``, +inf for ``x >= 88.376``."""
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        xc = np.minimum(np.maximum(x, K._LO), K._HI).astype(np.float32)
        kd = (xc * K._LOG2E).astype(np.float32) + K._SHIFT
        k = kd - K._SHIFT
        ki = kd.view(np.int32) - K._SHIFT_BITS
        r = xc - k * K._C1
        r = r - k * K._C2
        z = r * r
        y = K._P0 * r + K._P1
        for p in (K._P2, K._P3, K._P4, K._P5):
            y = y * r + p
        y = y * z + r + K._ONE
        scale = ((ki + np.int32(127)) << np.int32(23)).astype(np.int32).view(np.float32)
        v = np.where(x < K._HI, y * scale, K._INF)
        return np.where(x > K._LO, v, K._ZERO).astype(np.float32)


def _bits_to_f64(b: npt.ArrayLike) -> np.ndarray:
    return np.asarray(b, dtype=np.int64).view(np.float64)


def exp64(x: npt.ArrayLike) -> np.ndarray:
    """float64 ``exp(x)``, ``x`` clamped to ``[-708, 709]`` (fdlibm, as the kernel)."""
    xc = np.minimum(np.maximum(np.asarray(x, dtype=np.float64), K._EXP64_LO), K._EXP64_HI)
    kd = xc * K._INV_LN2 + K._SHIFT64
    k = kd - K._SHIFT64
    hi = xc - k * K._LN2_HI
    lo = k * K._LN2_LO
    r = hi - lo
    t = r * r
    c = r - t * (K._E1 + t * (K._E2 + t * (K._E3 + t * (K._E4 + t * K._E5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    ki = kd.view(np.int64) - K._SHIFT64_BITS
    return y * _bits_to_f64((ki + K._I1023) << K._I52)


def log64(x: npt.ArrayLike) -> np.ndarray:
    """float64 natural log of normal ``x > 0`` (fdlibm, as the kernel)."""
    b = np.asarray(x, dtype=np.float64).view(np.int64)
    e = _bits_to_f64(K._TWO52_BITS | (b >> K._I52)) - 4503599627370496.0
    m = _bits_to_f64((b & K._MANT64) | K._ONE64_BITS)
    big = m > K._SQRT2
    m = np.where(big, m * 0.5, m)
    k = e - 1023.0 + np.where(big, 1.0, 0.0)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (K._L2 + w * (K._L4 + w * K._L6))
    t2 = z * (K._L1 + w * (K._L3 + w * (K._L5 + w * K._L7)))
    hfsq = 0.5 * f * f
    return k * K._LN2_HI - ((hfsq - (s * (hfsq + (t1 + t2)) + k * K._LN2_LO)) - f)


def tanh64(u: npt.ArrayLike) -> np.ndarray:
    """float64 ``tanh(u)`` (Cephes, as the kernel)."""
    u = np.asarray(u, dtype=np.float64)
    au = np.abs(u)
    z = au * au
    p = (K._TP0 * z + K._TP1) * z + K._TP2
    q = ((z + K._TQ0) * z + K._TQ1) * z + K._TQ2
    small = au + au * z * (p / q)
    with np.errstate(over="ignore"):
        t = exp64(-2.0 * np.minimum(au, K._TANH_BIG))
    big = (1.0 - t) / (1.0 + t)
    return np.copysign(np.where(au < K._TANH_SMALL, small, big), u)
