"""Pure-numpy twins of :mod:`fastppo.kernels.fastmath` (``expf32``, ``exp64``,
``tanh64``, ``tanh32``), bit for bit.

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


def tanh32(x: npt.ArrayLike) -> np.ndarray:
    """float32 ``tanh(x)`` (Eigen's rational, as the kernel)."""
    x = np.asarray(x, dtype=np.float32)
    xc = np.minimum(np.maximum(x, -K._TANH32_CLAMP), K._TANH32_CLAMP)
    x2 = xc * xc
    p = x2 * K._TA13 + K._TA11
    for c in (K._TA9, K._TA7, K._TA5, K._TA3, K._TA1):
        p = x2 * p + c
    q = x2 * K._TB6 + K._TB4
    for c in (K._TB2, K._TB0):
        q = x2 * q + c
    r = (xc * p) / q
    r = np.where(np.abs(x) < K._TANH32_TINY, x, r)
    return np.where(x == x, r, x).astype(np.float32)
