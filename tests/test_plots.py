"""fastppo.plots: matplotlib charts, and a clear ImportError without it."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from fastppo import plots


def _png(path) -> np.ndarray:
    import matplotlib.image as mpimg

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return mpimg.imread(path)


def test_line_chart_draws_each_series(tmp_path):
    p = tmp_path / "curve.png"
    x = np.arange(50.0)
    plots.line_chart(p, "CartPole-v1", "env steps", "return", {"up": (x, x), "one": ([5.0], [3.0])})
    img = _png(p)
    assert img.shape[0] > 100 and img.shape[1] > 100
    # not a blank canvas: the lines put colour on it
    assert (np.ptp(img[..., :3], axis=-1) > 0.2).any()
    assert not list(tmp_path.glob("*.tmp-*"))  # written atomically


def test_bar_chart_log_scale_with_groups(tmp_path):
    p = tmp_path / "bench.png"
    plots.bar_chart(p, "t", ["a", "b", "c"], [0.5, 4.0, 100.0], "ratio", log=True,
                    groups=["g1", "g1", "g2"], ref_line=1.0, unit="x")  # fmt: skip
    img = _png(p)
    assert img.shape[0] > 100


def test_bar_chart_rejects_mismatched_lengths(tmp_path):
    with pytest.raises(
        ValueError, match="bar_chart: labels, values and groups must have one length"
    ):
        plots.bar_chart(tmp_path / "x.png", "t", ["a", "b"], [1.0], "v")


def test_missing_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    with pytest.raises(
        ImportError, match=r'line_chart: charts need matplotlib; pip install "fastppo\[plot\]"'
    ):
        plots.line_chart(tmp_path / "x.png", "t", "x", "y", {"s": ([1.0], [1.0])})
