"""What the running-statistics classes share: the Cython core, size rules and
input checks (see :mod:`fastppo.stats`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import (
    FLOATS,
    as_array,
    check_range,
    fail,
)
from fastppo._cy import missing
from fastppo._jit import num_threads

try:
    from fastppo._cy import _stats as cy  # noqa: F401 - used by running.py and returns.py
except ImportError as e:  # pragma: no cover - exercised only on a broken install
    raise missing("_stats") from e


# Builtin dtypes are singletons, so ``is`` is the cheapest exact test on the
# per-step fast paths (an equal but distinct dtype object takes the slow path).
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)


# The most features (RunningMeanStd) or envs (ReturnNormalizer) a running state
# holds: its float64 arrays stay below 512 MiB each, and a size from a caller
# (or a state dict) cannot ask for terabytes.
MAX_FEATURES = 2**26


# A block of this many elements (32 KiB of float32, 64 KiB of float64) stays in
# L1/L2 between the two passes of the batch moments, so the second costs no
# memory traffic.
BLOCK_ELEMENTS = 8192
# Without a mask, ``rows_per_super`` consecutive rows are summed as one flat run
# of about this many elements into as many accumulators, then folded: a batch
# with few features (returns have one) still runs a long, vectorisable inner
# loop instead of a loop of length 1 per row.
SUPER_WIDTH = 64


def layout(n_features: int) -> tuple[int, int]:
    """``(rows_per_super, rows_per_block)`` of the batch moments for ``n_features`` columns.

    Depends on the feature count only, so every thread count cuts a batch the
    same way (and gives the same bits). ``rows_per_block`` is a multiple of
    ``rows_per_super``.
    """
    d = max(1, n_features)
    m = max(1, SUPER_WIDTH // d)
    return m, max(m, (BLOCK_ELEMENTS // d) // m * m)


def threads(size: int) -> int:
    """Threads for a pass over ``size`` elements: one below the parallel threshold."""
    return 1 if size < _dispatch.PARALLEL_MIN_STATS else num_threads()


def shape_tuple(fn: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape
    ):
        fail(fn, "shape", "a tuple of ints", repr(shape), exc=TypeError)
    out = tuple(int(s) for s in shape)
    if any(s < 0 for s in out):
        fail(fn, "shape", "non-negative sizes", repr(shape))
    if math.prod(out) > MAX_FEATURES:
        fail(fn, "shape", f"at most {MAX_FEATURES} features (2**26)", repr(shape)[:60])
    return out


def float_input(fn: str, name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A float32/float64 array whose trailing dims are ``shape``."""
    a = as_array(fn, name, x)
    if a.dtype not in FLOATS:
        fix = "use .astype(np.float32)" if a.dtype.kind in "iubf" else None
        fail(fn, name, "float32 or float64", f"dtype {a.dtype}", fix, TypeError)
    k = len(shape)
    if a.ndim < k or a.shape[a.ndim - k :] != shape:
        want = f"[..., {', '.join(map(str, shape))}]" if shape else "[...] (any shape)"
        fail(fn, name, f"shape {want} with trailing dims {shape}", f"shape {a.shape}")
    return a


def clip_value(fn: str, clip: Any) -> float:
    """``None`` -> 0.0 (the kernels' "no clipping"); otherwise a number > 0."""
    if clip is None:
        return 0.0
    return check_range(fn, "clip", clip, 0.0, math.inf, lo_open=True)


def raise_nonfinite(fn: str, name: str, a: np.ndarray, rows: int, v: np.ndarray | None) -> None:
    """Name the first NaN/inf of the rows that counted (the kernel only said "some")."""
    flat = a.reshape(rows, -1)
    bad = ~np.isfinite(flat)
    if v is not None:
        bad &= v.astype(bool)[:, None]
    if bad.any():
        r, j = (int(i) for i in np.argwhere(bad)[0])
        idx = np.unravel_index(r * flat.shape[1] + j, a.shape)
        where = tuple(int(i) for i in idx)
        fail(
            fn,
            name,
            "finite",
            f"{float(flat[r, j])!r} at index {where[0] if len(where) == 1 else where}",
        )
    fail(fn, name, "values whose squares fit in float64", "values so large the variance overflows")
