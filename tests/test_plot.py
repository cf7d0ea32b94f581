"""fastppo._plot: PNG encoding, bitmap text, bar and line charts.

The PNGs are decoded back here with zlib and struct (an independent reader:
chunk CRCs, IHDR fields, scanline filters), and the pixels are inspected:
bars where the values say, colours per series, text where text belongs.
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest

from fastppo import _plot
from fastppo._plot import PALETTE, bar_chart, encode_png, line_chart, render_text, text_size

BG = np.array([255, 255, 255], dtype=np.uint8)


def read_png(data: bytes) -> np.ndarray:
    """Decode an 8-bit RGB, non-interlaced PNG (what _plot writes), checking every CRC."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "bad signature"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        tag = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(tag + body), f"bad CRC in {tag!r}"
        chunks.append((tag, body))
        pos += 12 + length
    assert pos == len(data), "trailing bytes after the last chunk"
    tags = [t for t, _ in chunks]
    assert tags[0] == b"IHDR" and tags[-1] == b"IEND" and b"IDAT" in tags
    w, h, depth, ctype, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, ctype, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(b for t, b in chunks if t == b"IDAT"))
    assert len(raw) == h * (1 + 3 * w), "decompressed size does not match IHDR"
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(h, 1 + 3 * w)
    assert np.all(rows[:, 0] == 0), "unexpected scanline filter"
    return rows[:, 1:].reshape(h, w, 3)


def load(path: os.PathLike[str] | str) -> np.ndarray:
    with open(path, "rb") as f:
        return read_png(f.read())


def color_mask(img: np.ndarray, color: tuple[int, int, int]) -> np.ndarray:
    return np.all(img == np.array(color, dtype=np.uint8), axis=2)


def runs(mask_1d: np.ndarray) -> list[tuple[int, int]]:
    """Half-open [start, stop) runs of True."""
    m = np.concatenate([[False], mask_1d, [False]]).astype(np.int8)
    d = np.diff(m)
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))


def bars(img: np.ndarray, color: tuple[int, int, int]) -> list[tuple[int, int, int, int]]:
    """(y0, y1, x0, x1) of each solid bar of ``color`` (rows with >= 3 pixels of it)."""
    m = color_mask(img, color)
    out = []
    for y0, y1 in runs(m.sum(axis=1) >= 3):
        cols = np.flatnonzero(m[y0:y1].any(axis=0))
        out.append((int(y0), int(y1), int(cols.min()), int(cols.max()) + 1))
    return out


# --------------------------------------------------------------------------- PNG


def test_encode_png_round_trips_random_image() -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(17, 23, 3), dtype=np.uint8)
    assert np.array_equal(read_png(encode_png(img)), img)


def test_encode_png_ihdr_states_the_size() -> None:
    data = encode_png(np.zeros((5, 9, 3), dtype=np.uint8))
    w, h = struct.unpack(">II", data[16:24])
    assert (w, h) == (9, 5)


@pytest.mark.parametrize(
    ("img", "exc", "match"),
    [
        (np.zeros((4, 4, 3), dtype=np.float32), TypeError, "rgb must be a uint8 ndarray"),
        ([[0, 0, 0]], TypeError, "rgb must be a uint8 ndarray"),
        (
            np.zeros((4, 4), dtype=np.uint8),
            ValueError,
            r"rgb must have shape \[h, w, 3\], got shape \(4, 4\)",
        ),
        (np.zeros((0, 4, 3), dtype=np.uint8), ValueError, r"rgb must .* got shape \(0, 4, 3\)"),
    ],
)
def test_encode_png_rejects(img: object, exc: type, match: str) -> None:
    with pytest.raises(exc, match=f"encode_png: {match}"):
        encode_png(img)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- text


def test_text_size_and_render_agree() -> None:
    for s, scale in (("A", 1), ("fastppo 1.0x", 2), ("", 3)):
        w, h = text_size(s, scale)
        m = render_text(s, scale)
        assert m.shape == (h, w)


def test_glyphs_are_distinct_and_space_is_blank() -> None:
    masks = {chr(c): render_text(chr(c)) for c in range(32, 127)}
    assert not masks[" "].any()
    printable = [k for k in masks if k != " "]
    assert all(masks[k].any() for k in printable)
    seen = {masks[k].tobytes() for k in printable}
    assert len(seen) == len(printable), "two glyphs are identical"


def test_non_ascii_draws_as_question_mark() -> None:
    assert np.array_equal(render_text("\u00b5"), render_text("?"))


def test_descenders_use_the_bottom_row_and_capitals_do_not() -> None:
    for c in "gjpqy":
        assert render_text(c)[-1].any(), c
    for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ":
        assert not render_text(c)[-1].any(), c


# --------------------------------------------------------------------------- bar chart


def test_bar_chart_writes_valid_png_with_title(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "b.png")
    bar_chart(p, "Title here", ["a", "b"], [1.0, 2.0], "seconds")
    img = load(p)
    h, w, _ = img.shape
    assert h > 50 and w > 200
    top = img[:40]  # the title band
    assert np.any(np.any(top != BG, axis=2)), "title region is blank"
    assert os.listdir(tmp_path) == ["b.png"], "temporary file left behind"


def test_bar_lengths_are_proportional_on_linear_axis(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "b.png")
    bar_chart(p, "t", ["a", "b"], [1.0, 2.0], "v")
    img = load(p)
    (a,) = bars(img, PALETTE[0])
    (b,) = bars(img, PALETTE[1])
    assert a[0] < b[0], "bars must be drawn top to bottom in order"
    assert a[2] == b[2], "bars start at the same origin"
    la, lb = a[3] - a[2], b[3] - b[2]
    assert lb / la == pytest.approx(2.0, rel=0.02)
    assert a[1] - a[0] >= 10, "bar too thin to see"


def test_negative_bar_extends_left_of_zero(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "b.png")
    bar_chart(p, "t", ["pos", "neg"], [3.0, -1.5], "v")
    img = load(p)
    (a,) = bars(img, PALETTE[0])
    (b,) = bars(img, PALETTE[1])
    assert a[2] - b[3] == 1, "both bars meet the one-pixel zero line"
    assert (a[3] - a[2]) / (b[3] - b[2]) == pytest.approx(2.0, rel=0.05)


def test_log_bars_measure_decades(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "b.png")
    bar_chart(p, "t", ["a", "b", "c"], [1.0, 10.0, 100.0], "ratio", log=True)
    img = load(p)
    (a,), (b,), (c,) = (bars(img, PALETTE[k]) for k in range(3))
    la, lb, lc = (r[3] - r[2] for r in (a, b, c))
    # On a log axis equal ratios are equal lengths: 1 -> 10 -> 100 adds a
    # constant step; the smallest value still gets a visible bar.
    assert lb - la == pytest.approx(lc - lb, abs=1)
    assert la >= 0.4 * (lb - la)
    assert not color_mask(img, _plot._REF).any(), "no reference line unless asked"


def test_ref_line_is_drawn_at_its_value(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "b.png")
    bar_chart(p, "t", ["a", "b"], [0.5, 4.0], "ratio", log=True)
    (b,) = bars(load(p), PALETTE[1])
    bar_chart(p, "t", ["a", "b"], [0.5, 4.0], "ratio", log=True, ref_line=4.0)
    img = load(p)
    cols = np.flatnonzero(color_mask(img, _plot._REF).any(axis=0))
    assert cols.size > 0, "no reference line"
    # The line sits where the bar of the same value ends.
    assert abs(cols.max() - (b[3] - 1)) <= 1
    rows = np.flatnonzero(color_mask(img, _plot._REF).any(axis=1))
    assert rows.max() - rows.min() > 40, "the line spans the plot height"


def test_groups_repeat_label_colours(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "b.png")
    bar_chart(
        p, "t", ["x", "y", "x", "y"], [1.0, 2.0, 3.0, 4.0], "v", groups=["g1", "g1", "g2", "g2"]
    )
    img = load(p)
    xs, ys = bars(img, PALETTE[0]), bars(img, PALETTE[1])
    assert len(xs) == 2 and len(ys) == 2, "one colour per label, across groups"
    assert not color_mask(img, PALETTE[2]).any()
    # A heading row separates the groups: the gap between group 1's last bar
    # and group 2's first is larger than between bars inside a group.
    inside = xs[0][0] - 0, ys[0][0] - xs[0][1]
    between = xs[1][0] - ys[0][1]
    assert between > inside[1] + 10


def test_bar_chart_overwrites_existing_file(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "b.png")
    with open(p, "wb") as f:
        f.write(b"old")
    bar_chart(p, "t", ["a"], [1.0], "v")
    load(p)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"labels": []}, ValueError, "labels must be non-empty"),
        ({"labels": "ab"}, TypeError, "labels must be a list of str"),
        ({"labels": ["a", 2]}, TypeError, r"labels\[1\] must be a str"),
        ({"values": [1.0]}, ValueError, r"values must have one entry per label \(2\), got 1"),
        ({"values": [1.0, float("nan")]}, ValueError, "values must be finite, got nan at index 1"),
        ({"values": ["1", "2"]}, TypeError, "values must be a 1-D sequence of real numbers"),
        ({"values": 3.0}, TypeError, "values must be a sequence of real numbers"),
        ({"values": [1.0, 0.0], "log": True}, ValueError, "values must be > 0 with log=True"),
        ({"log": "yes"}, TypeError, "log must be a bool"),
        ({"groups": ["g"]}, ValueError, r"groups must have one entry per label \(2\), got 1"),
        ({"title": None}, TypeError, "title must be a str"),
        ({"ylabel": 1}, TypeError, "ylabel must be a str"),
        ({"unit": None}, TypeError, "unit must be a str"),
        ({"ref_line": "1"}, TypeError, "ref_line must be a real number or None"),
        ({"ref_line": 0.0, "log": True}, ValueError, "ref_line must be finite and > 0"),
        ({"path": 5}, TypeError, "path must be a str or os.PathLike"),
        ({"path": "/nonexistent-dir-fastppo/x.png"}, ValueError, "path must be in an existing"),
    ],
)
def test_bar_chart_rejects(
    tmp_path: os.PathLike[str], kwargs: dict[str, object], exc: type, match: str
) -> None:
    args: dict[str, object] = {
        "path": os.path.join(tmp_path, "b.png"),
        "title": "t",
        "labels": ["a", "b"],
        "values": [1.0, 2.0],
        "ylabel": "v",
    }
    args.update(kwargs)
    with pytest.raises(exc, match=f"bar_chart: {match}"):
        bar_chart(**args)  # type: ignore[arg-type]
    assert not os.path.exists(os.path.join(tmp_path, "b.png"))


# --------------------------------------------------------------------------- line chart


def test_line_chart_draws_each_series_in_its_colour(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "l.png")
    x = np.arange(0, 100_000, 2048, dtype=np.float64)
    up = 20 + 480 * (1 - np.exp(-x / 30_000))
    flat = np.full_like(x, 250.0)
    line_chart(p, "CartPole-v1", "env steps", "episodic return", {"up": (x, up), "flat": (x, flat)})
    img = load(p)
    m0, m1 = color_mask(img, PALETTE[0]), color_mask(img, PALETTE[1])
    assert m0.sum() > 500 and m1.sum() > 500
    # The rising curve: its leftmost pixels sit lower on screen than its rightmost.
    cols = np.flatnonzero(m0.sum(axis=0) > 0)
    # Skip the legend swatch, which sits at the top-left inside the plot.
    left_rows = np.flatnonzero(m0[:, cols[-1] // 4])
    right_rows = np.flatnonzero(m0[:, cols[-1] - 2])
    assert left_rows.mean() > right_rows.mean() + 100
    # The flat series is a horizontal line: one narrow band of rows, outside the legend.
    rows1 = np.flatnonzero(m1[:, cols[-1] // 2])
    assert rows1.max() - rows1.min() <= 2
    assert np.any(np.any(img[:40] != BG, axis=2)), "title region is blank"


def test_line_chart_nan_breaks_the_line(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "l.png")
    x = np.arange(100, dtype=np.float64)
    y = np.where((x > 40) & (x < 60), np.nan, 1.0 + 0 * x)
    y[0] = 0.0
    line_chart(p, "t", "x", "y", {"s": (list(x), list(y))})
    img = load(p)
    m = color_mask(img, PALETTE[0])
    cols = np.flatnonzero(m.any(axis=0))
    x_lo, x_hi = cols.min(), cols.max()  # data spans the plot's x range
    gap = m[:, x_lo + (x_hi - x_lo) * 48 // 99 : x_lo + (x_hi - x_lo) * 52 // 99]
    # Only the legend swatch may be in that column band; it is near the top.
    rows = np.flatnonzero(gap.any(axis=1))
    assert rows.size == 0 or rows.max() < 120


def test_line_chart_single_point_is_visible(tmp_path: os.PathLike[str]) -> None:
    p = os.path.join(tmp_path, "l.png")
    line_chart(p, "t", "x", "y", {"one": ([5.0], [3.0])})
    assert color_mask(load(p), PALETTE[0]).sum() > 10


@pytest.mark.parametrize(
    ("series", "exc", "match"),
    [
        ({}, ValueError, "series must hold at least one series"),
        ([([1.0], [1.0])], TypeError, "series must be a dict"),
        ({1: ([1.0], [1.0])}, TypeError, "series keys must be str"),
        ({"s": [1.0, 2.0, 3.0]}, TypeError, r"series\['s'\] must be a pair"),
        ({"s": ([1.0, 2.0], [1.0])}, ValueError, "must have the same length, got 2 and 1"),
        ({"s": ([1.0, np.nan], [1.0, 2.0])}, ValueError, r"x must be finite, got nan at index 1"),
        ({"s": ([1.0, 2.0], [1.0, np.inf])}, ValueError, "y must be finite or NaN, got inf"),
        ({"s": ([1.0], [np.nan])}, ValueError, "at least one finite point"),
        ({"s": ([[1.0]], [[1.0]])}, ValueError, "x must be a 1-D sequence"),
    ],
)
def test_line_chart_rejects(
    tmp_path: os.PathLike[str], series: object, exc: type, match: str
) -> None:
    p = os.path.join(tmp_path, "l.png")
    with pytest.raises(exc, match=f"line_chart: .*{match}"):
        line_chart(p, "t", "x", "y", series)  # type: ignore[arg-type]
    assert not os.path.exists(p)


# --------------------------------------------------------------------------- axes


@pytest.mark.parametrize(
    ("lo", "hi"), [(0.0, 1.0), (-3.0, 97.0), (20.0, 500.0), (0.0, 98_304.0), (5.0, 5.0)]
)
def test_linear_ticks_cover_the_data_with_nice_steps(lo: float, hi: float) -> None:
    a, b, ticks = _plot._linear_ticks(lo, hi)
    assert a <= lo and b >= hi and ticks[0] == a and ticks[-1] == pytest.approx(b)
    step = ticks[1] - ticks[0]
    mant = step / 10 ** np.floor(np.log10(step))
    assert any(np.isclose(mant, m) for m in (1, 2, 5))
    assert 3 <= len(ticks) <= 12


@pytest.mark.parametrize(
    ("v", "step", "text"),
    [(250_000.0, 50_000.0, "250k"), (1.5e6, 5e5, "1.5M"), (0.25, 0.05, "0.25"), (0.0, 0.1, "0")],
)
def test_tick_labels_are_short(v: float, step: float, text: str) -> None:
    assert _plot._fmt_tick(v, step) == text
