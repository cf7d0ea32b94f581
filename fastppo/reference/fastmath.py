"""Pure-numpy twin of :func:`fastppo.kernels.fastmath.expf32`, bit for bit.

Each step is one float32 IEEE operation in the kernel's order (no FMA), so
the results match the compiled function exactly; see the kernel module for
the formula and its accuracy. Reference only: tests import it.
"""

from __future__ import annotations

import numpy as np

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
