"""The flat parameter vector of :class:`fastppo.nn.ActorCritic`: its layout and size rules.

Layout, in order: actor layers (``W [n_in, n_out]`` then ``b [n_out]`` each),
the Gaussian ``log_std`` (continuous heads only), then critic layers. The size
rules bound what a checkpoint's spec can make the constructor allocate
(``MAX_PARAMS`` float64s: 512 MiB); docs/api.md documents them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastppo._checks import fail

#: Widths of layers, observations and heads.
MAX_WIDTH = 1 << 16
#: Hidden layers per stack.
MAX_LAYERS = 16
#: Parameters in all.
MAX_PARAMS = 1 << 26


#: Parameter precisions a network (and a checkpoint's spec) may name.
DTYPES = ("float32", "float64")


def check_dtype(fn: str, dtype: Any) -> str:
    """``dtype`` as one of :data:`DTYPES` (a name or a numpy dtype), else the house ValueError."""
    try:
        name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    except TypeError:
        name = None
    if name not in DTYPES:
        fail(fn, "dtype", f"one of {DTYPES}", repr(dtype))
    return str(name)


def check_hidden(fn: str, hidden_sizes: Any) -> tuple[int, ...]:
    """``hidden_sizes`` as a tuple of ints in ``[1, MAX_WIDTH]``, at most ``MAX_LAYERS``."""
    try:
        hs = tuple(hidden_sizes)
    except TypeError:
        fail(fn, "hidden_sizes", "a sequence of positive ints", repr(hidden_sizes), exc=TypeError)
    if len(hs) > MAX_LAYERS:
        fail(fn, "hidden_sizes", f"at most {MAX_LAYERS} layers", len(hs))
    for h in hs:
        if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not 1 <= h <= MAX_WIDTH:
            fail(fn, "hidden_sizes", f"a sequence of ints in [1, {MAX_WIDTH}]", repr(hidden_sizes))
    return tuple(int(h) for h in hs)


def param_count(sizes_a: Sequence[int], sizes_c: Sequence[int], n_log_std: int) -> int:
    """Parameters of actor layers ``sizes_a``, critic layers ``sizes_c`` and the log-std."""
    return sum(i * o + o for s in (sizes_a, sizes_c) for i, o in itertools.pairwise(s)) + n_log_std


def bounds(fn: str, name: str, x: Any, n: int) -> np.ndarray:
    """A float or ``n`` floats, as a fresh float64 ``[n]`` array."""
    try:
        return np.broadcast_to(np.asarray(x, np.float64), (n,)).copy()
    except (TypeError, ValueError):
        fail(fn, name, f"a float or {n} floats", repr(x))


def layer_layout(sizes: list[int], off: int) -> tuple[np.ndarray, int]:
    """Rows ``(n_in, n_out, w_offset, b_offset)`` of layers ``sizes`` from ``off``; the end."""
    rows = []
    for n_in, n_out in itertools.pairwise(sizes):
        rows.append((n_in, n_out, off, off + n_in * n_out))
        off += n_in * n_out + n_out
    return np.array(rows, dtype=np.int64).reshape(-1, 4), off


def layer_views(p: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)`` of one :func:`layer_layout` row: views into ``p``."""
    n_in, n_out, w, b = (int(x) for x in row)
    return p[w : w + n_in * n_out].reshape(n_in, n_out), p[b : b + n_out]
