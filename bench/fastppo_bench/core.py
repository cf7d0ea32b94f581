"""What a benchmark suite declares: groups of implementations of one computation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Group:
    """One computation on one input, timed across implementations in one run.

    Attributes
    ----------
    name : str
        What is computed and on what, e.g. ``"gae [2048x256] float32"``.
    baseline : str
        Label in ``impls`` that ratios are relative to (ratio = baseline median
        / impl median, so > 1 means faster than the baseline).
    impls : dict
        Label -> zero-argument callable with its inputs already bound, or a
        string saying why it cannot run (``"not installed: pip install torch"``);
        such rows are reported, never silently dropped.
    check : callable, optional
        Receives ``{label: result}`` of one call of every runnable impl and
        raises ``AssertionError`` if they disagree. Runs before any timing.
    target : str
        The goal in words, e.g. ``"fastppo >= 20x numpy loop"``.
    bytes_moved : int, optional
        Bytes read + written by one call, for a GB/s column.
    """

    name: str
    baseline: str
    impls: dict[str, Callable[[], Any] | str]
    check: Callable[[dict[str, Any]], None] | None = None
    target: str = ""
    bytes_moved: int | None = None
