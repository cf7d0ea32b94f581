"""Validation helpers that need a compiled pass (finiteness of large arrays)."""

from __future__ import annotations

import numba

from fastppo._jit import kernel_pair


# x - x is 0 for finite x and NaN for NaN or +-inf. Counting the comparisons is
# an integer reduction, which LLVM vectorises without fastmath (and a sum is a
# reduction parfors supports; |= on booleans is not).
@kernel_pair("b1(F_1)")
def _all_finite(x):  # pragma: no cover - compiled
    bad = 0
    for i in numba.prange(x.shape[0]):
        bad += int((x[i] - x[i]) != 0)
    return bad == 0


all_finite_serial, all_finite_parallel = _all_finite
