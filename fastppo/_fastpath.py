"""The Cython small-call fast path (``fastppo._cy._fast``), configured once.

The public functions try ``fast.<name>(...)`` first; it returns ``None`` for
anything it does not recognise (see its module docstring) or above each
kind's size limit (set by the module that owns the kernel), and the general
path runs instead. C entry points (:mod:`fastppo.kernels.cabi`) are compiled
or loaded on first use.
"""

from __future__ import annotations

from fastppo._cy import missing
from fastppo.kernels import sweep as _ka

try:
    from fastppo._cy import _fast as fast
except ImportError as e:  # pragma: no cover - exercised only on a broken install
    raise missing("_fast") from e

# Kinds, as fastppo.kernels.cabi.entry numbers them.
GAE, VTRACE, RETURNS, CATEGORICAL, GAUSSIAN = range(5)


def _load_entry(kind: int, d: int) -> int:
    from fastppo.kernels import cabi  # numba cfuncs: compiled or loaded on demand

    return cabi.address(kind, d)


_OPTIONS = (_ka.HAS_TRUNC, _ka.HAS_FINAL, _ka.HAS_VALID, _ka.BATCH_MAJOR)
fast.configure(_load_entry, (*_OPTIONS, _ka.CHECK_ROWS, _ka.STATUS, _ka.BLOCK))


__all__ = ["CATEGORICAL", "GAE", "GAUSSIAN", "RETURNS", "VTRACE", "fast"]
