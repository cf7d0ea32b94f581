"""Charts for ``fastppo train`` (learning curve) and ``fastppo bench`` (speed-up bars).

Drawn with matplotlib, which is an optional extra (``pip install "fastppo[plot]"``):
it is imported here, when a chart is asked for, never by ``import fastppo``.
Without it, :func:`available` is False and the callers skip the PNG and say
what to install; their JSON and CSV outputs do not depend on it.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from fastppo._files import write_atomic

INSTALL_HINT = 'pip install "fastppo[plot]" (matplotlib)'


def available() -> bool:
    """True when matplotlib is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot(fn: str) -> Any:
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError(f"{fn}: charts need matplotlib; {INSTALL_HINT}") from e
    matplotlib.use("Agg", force=False)  # files only: never open a window
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | os.PathLike[str]) -> None:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    write_atomic(os.fspath(path), buf.getvalue())


def line_chart(
    path: str | os.PathLike[str],
    title: str,
    xlabel: str,
    ylabel: str,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
) -> None:
    """Write a PNG with one line per ``series`` entry (``name: (xs, ys)``)."""
    plt = _pyplot("line_chart")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    try:
        for name, (xs, ys) in series.items():
            ax.plot(xs, ys, label=name, linewidth=1.2, marker="o" if len(xs) == 1 else None)
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        fig.tight_layout()
        _save(fig, path)
    finally:
        plt.close(fig)


def bar_chart(
    path: str | os.PathLike[str],
    title: str,
    labels: Sequence[str],
    values: Sequence[float],
    xlabel: str,
    *,
    groups: Sequence[str] | None = None,
    ref_line: float | None = None,
    log: bool = False,
    unit: str = "",
) -> None:
    """Write a PNG of horizontal bars, coloured and labelled by ``groups``."""
    plt = _pyplot("bar_chart")
    grp = list(groups) if groups is not None else [""] * len(labels)
    if not (len(labels) == len(values) == len(grp)):
        raise ValueError(
            f"bar_chart: labels, values and groups must have one length, got "
            f"{len(labels)}, {len(values)}, {len(grp)}"
        )
    names = list(dict.fromkeys(grp))
    colors = {g: plt.cm.tab10(i % 10) for i, g in enumerate(names)}
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.32 * max(len(labels), 1)))
    try:
        ys = range(len(labels))[::-1]
        ax.barh(list(ys), list(values), color=[colors[g] for g in grp])
        ax.set_yticks(list(ys), [str(lab) for lab in labels], fontsize=8)
        for y, v in zip(ys, values):
            if math.isfinite(v):
                ax.annotate(f"{v:.3g}{unit}", (v, y), xytext=(3, 0), textcoords="offset points",
                            va="center", fontsize=7)  # fmt: skip
        if log:
            ax.set_xscale("log")
        if ref_line is not None:
            ax.axvline(ref_line, color="black", linewidth=0.8, linestyle="--")
        ax.set(title=title, xlabel=xlabel)
        if any(names):
            from matplotlib.patches import Patch

            ax.legend(handles=[Patch(color=colors[g], label=g) for g in names], fontsize=7,
                      loc="best")  # fmt: skip
        fig.tight_layout()
        _save(fig, path)
    finally:
        plt.close(fig)
