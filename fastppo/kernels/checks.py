"""Validation helpers that need a compiled pass (finiteness of large arrays)."""

from __future__ import annotations

import numba
import numpy as np

from fastppo._jit import FASTMATH_SAFE, PARALLEL_MIN_ELEMENTS, kernel_pair


# x * 0 is 0 for finite x and NaN for NaN or +-inf, so the sum is NaN exactly
# when some element is not finite. Reassociation lets LLVM vectorise the sum
# (the order does not matter: any NaN term makes any order NaN); nnan/ninf are
# not in FASTMATH_SAFE, so the NaN survives.
@kernel_pair(fastmath=FASTMATH_SAFE)
def _all_finite(x):  # pragma: no cover - compiled
    s = 0.0
    for i in numba.prange(x.shape[0]):
        s += x[i] * 0.0
    return s == 0.0


_all_finite_serial, _all_finite_parallel = _all_finite


def all_finite_1d(x: np.ndarray) -> bool:
    """True when every element of the 1-D float array ``x`` is finite."""
    if x.shape[0] >= PARALLEL_MIN_ELEMENTS:
        return bool(_all_finite_parallel(x))
    return bool(_all_finite_serial(x))
