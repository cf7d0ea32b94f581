"""Validation helpers that need a compiled pass (finiteness of large arrays)."""

from __future__ import annotations

import numba

from fastppo._jit import kernel, kernel_pair


# x - x is 0 for finite x and NaN for NaN or +-inf. Counting the comparisons is
# an integer reduction, which LLVM vectorises without fastmath (and a sum is a
# reduction parfors supports; |= on booleans is not).
@kernel_pair("b1(F_1)")
def all_finite(x):  # pragma: no cover - compiled
    bad = 0
    for i in numba.prange(x.shape[0]):
        bad += int((x[i] - x[i]) != 0)
    return bad == 0


all_finite_serial, all_finite_parallel = all_finite


# Elements per block of any_set_where_clear: each block is checked while it is
# in L1 (4 KiB of each flag array).
FLAG_BLOCK = 4096


@kernel("b1(u1_1, u1_1)")
def any_set_where_clear(a, b):  # pragma: no cover - compiled
    """Whether some ``a[i] != 0`` where ``b[i] == 0``: a truncation that is not
    also a termination (the sweeps' ambiguous bootstrap). Block by block in
    L1, stopping at the first block that has one. numpy's
    ``((a != 0) & (b == 0)).any()`` costs as much when the allocator reuses
    memory (41 against 52 us at [2048x256]) but makes three full-size
    temporaries (1.5 MB there), each a fresh mapping and its page faults
    whenever the allocator hands large blocks back to the system."""
    for i0 in range(0, a.shape[0], FLAG_BLOCK):
        av = a[i0 : i0 + FLAG_BLOCK]
        bv = b[i0 : i0 + FLAG_BLOCK]
        hits = 0
        for i in range(av.shape[0]):
            hits += (av[i] != 0) & (bv[i] == 0)
        if hits:
            return True
    return False
