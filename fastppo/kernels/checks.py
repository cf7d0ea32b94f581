"""Validation helpers that need a compiled pass (finiteness of large arrays)."""

from __future__ import annotations

import numba
import numpy as np

from fastppo import _dispatch
from fastppo._jit import kernel_pair


# x - x is 0 for finite x and NaN for NaN or +-inf. Counting the comparisons is
# an integer reduction, which LLVM vectorises without fastmath (and a sum is a
# reduction parfors supports; |= on booleans is not).
@kernel_pair
def _all_finite(x):  # pragma: no cover - compiled
    bad = 0
    for i in numba.prange(x.shape[0]):
        bad += int((x[i] - x[i]) != 0)
    return bad == 0


_all_finite_serial, _all_finite_parallel = _all_finite


def all_finite_1d(x: np.ndarray) -> bool:
    """True when every element of the 1-D float array ``x`` is finite."""
    if x.shape[0] >= _dispatch.PARALLEL_MIN_ELEMENTS:
        return bool(_all_finite_parallel(x))
    return bool(_all_finite_serial(x))
