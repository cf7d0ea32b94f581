"""The Cython small-call fast path (``fastppo._cy._fast``), configured once.

The public functions try ``fast.<name>(...)`` first; it returns ``None`` for
anything but the plain numpy case below each kind's size limit (set by the
module that owns the kernel), and the general path runs instead. C entry
points (:mod:`fastppo.kernels.cabi`) are compiled or loaded on first use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _checks as C
from fastppo import _dispatch
from fastppo.kernels import sweep as _ka

try:
    from fastppo._cy import _fast as fast
except ImportError as e:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "fastppo needs the compiled extension fastppo._cy._fast, which is missing or stale; "
        "build it with `pip install -e .` (rerun after editing a .pyx)"
    ) from e

# Kinds, as fastppo.kernels.cabi.entry numbers them.
GAE, VTRACE, RETURNS, CATEGORICAL = range(4)


def _load_entry(kind: int, d: int) -> int:
    from fastppo.kernels import cabi  # numba cfuncs: compiled or loaded on demand

    return cabi.address(kind, d)


fast.configure(_load_entry, _ka.HAS_TRUNC, _ka.HAS_FINAL, _ka.HAS_VALID, _ka.BATCH_MAJOR)


# Flag arguments the sweeps' fast path takes as bool/uint8 only.
_FLAGS = frozenset({"terminated", "truncated", "valid"})


def fast_on_views(
    entry: Any, fn: str, names: tuple[str, ...], arrays: tuple[Any, ...], rest: tuple[Any, ...]
) -> Any:
    """``entry(*arrays, *rest)`` (a fast-path function) with the torch CPU tensors
    among ``arrays`` replaced by their numpy views (no copy) and small float
    0/1 flag arrays by their uint8 conversion, or None if there are none or it
    declines.

    The fast path views plain tensors itself (``Tensor.numpy()``) but takes
    bool/uint8 flags only, and declines a tensor numpy cannot view in place
    (``requires_grad``); the general path would make these same views
    (``as_array``, which detaches) and conversions, so such a call gets a
    second chance at the fast path. Flags are converted only below the
    parallel size (the fast path declines larger problems) and only when
    every value is 0 or 1: otherwise the general path explains.
    """
    # a plain loop: the generator expressions it replaces cost ~1.5 us a call
    views = None
    for i, x in enumerate(arrays):
        if x is None:
            continue
        if type(x) is not np.ndarray:
            if not type(x).__module__.startswith("torch"):
                continue
            if views is None:
                views = list(arrays)
            x = views[i] = C.as_array(fn, names[i], x)
        if (
            type(x) is np.ndarray
            and x.dtype.kind == "f"
            and (x.dtype == np.float32 or x.dtype == np.float64)
            and names[i] in _FLAGS
            and x.size < _dispatch.PARALLEL_MIN_ELEMENTS
            and (x.flags.c_contiguous or x.flags.f_contiguous)
        ):
            u, bad = C.flags_u8(x)
            if bad >= 0:
                return None
            if views is None:
                views = list(arrays)
            views[i] = u
    return None if views is None else entry(*views, *rest)


__all__ = ["CATEGORICAL", "GAE", "RETURNS", "VTRACE", "fast", "fast_on_views"]
