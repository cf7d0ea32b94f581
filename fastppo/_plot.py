"""Dependency-free PNG charts: horizontal bar charts and line charts.

Charts are drawn into an RGB ``uint8`` canvas with numpy and written as PNG
with ``zlib`` and ``struct`` only, because the runtime dependencies are numpy,
numba and gymnasium: ``fastppo bench`` and the trainer's learning curves must
not pull in matplotlib. Text uses a built-in 5x7 bitmap font (printable ASCII,
plus a descender row), scaled by an integer factor.

Both writers replace ``path`` atomically (temporary file in the same
directory, then ``os.replace``), so a reader never sees half a PNG.
"""

from __future__ import annotations

import math
import os
import struct
import tempfile
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["bar_chart", "encode_png", "line_chart", "write_atomic"]

# --------------------------------------------------------------------------- font

# The classic 5x7 LCD font, printable ASCII 32..126, with an eighth row
# used only by the descenders of g, j, p, q, y (redrawn so they do not read as
# capitals). Five column bytes per glyph; bit 0 is the top row. Column-major is
# how the font is usually published, so it can be checked against a copy by eye.
_FONT_COLUMNS = bytes.fromhex(
    "0000000000"  # ' '
    "00005f0000"  # !
    "0007000700"  # "
    "147f147f14"  # #
    "242a7f2a12"  # $
    "2313086462"  # %
    "3649552250"  # &
    "0005030000"  # '
    "001c224100"  # (
    "0041221c00"  # )
    "082a1c2a08"  # *
    "08083e0808"  # +
    "0050300000"  # ,
    "0808080808"  # -
    "0060600000"  # .
    "2010080402"  # /
    "3e5149453e"  # 0
    "00427f4000"  # 1
    "4261514946"  # 2
    "2141454b31"  # 3
    "1814127f10"  # 4
    "2745454539"  # 5
    "3c4a494930"  # 6
    "0171090503"  # 7
    "3649494936"  # 8
    "064949291e"  # 9
    "0036360000"  # :
    "0056360000"  # ;
    "0814224100"  # <
    "1414141414"  # =
    "0041221408"  # >
    "0201510906"  # ?
    "324979413e"  # @
    "7e1111117e"  # A
    "7f49494936"  # B
    "3e41414122"  # C
    "7f4141221c"  # D
    "7f49494941"  # E
    "7f09090101"  # F
    "3e41415132"  # G
    "7f0808087f"  # H
    "00417f4100"  # I
    "2040413f01"  # J
    "7f08142241"  # K
    "7f40404040"  # L
    "7f0204027f"  # M
    "7f0408107f"  # N
    "3e4141413e"  # O
    "7f09090906"  # P
    "3e4151215e"  # Q
    "7f09192946"  # R
    "4649494931"  # S
    "01017f0101"  # T
    "3f4040403f"  # U
    "1f2040201f"  # V
    "7f2018207f"  # W
    "6314081463"  # X
    "0304780403"  # Y
    "6151494543"  # Z
    "007f414100"  # [
    "0204081020"  # backslash
    "0041417f00"  # ]
    "0402010204"  # ^
    "4040404040"  # _
    "0001020400"  # `
    "2054545478"  # a
    "7f48444438"  # b
    "3844444420"  # c
    "384444487f"  # d
    "3854545418"  # e
    "087e090102"  # f
    "98a4a4a47c"  # g
    "7f08040478"  # h
    "00447d4000"  # i
    "4080847d00"  # j
    "007f102844"  # k
    "00417f4000"  # l
    "7c04180478"  # m
    "7c08040478"  # n
    "3844444438"  # o
    "fc24242418"  # p
    "18242424fc"  # q
    "7c08040408"  # r
    "4854545420"  # s
    "043f444020"  # t
    "3c4040207c"  # u
    "1c2040201c"  # v
    "3c4030403c"  # w
    "4428102844"  # x
    "9ca0a0a07c"  # y
    "4464544c44"  # z
    "0008364100"  # {
    "00007f0000"  # |
    "0041360800"  # }
    "0201020402"  # ~
)
_GLYPH_W, _GLYPH_H = 5, 8


def _build_glyphs() -> np.ndarray:
    cols = np.frombuffer(_FONT_COLUMNS, dtype=np.uint8).reshape(95, _GLYPH_W)
    rows = np.arange(_GLYPH_H, dtype=np.uint8)
    # [glyph, row, col] booleans: bit r of column c is pixel (r, c).
    return ((cols[:, None, :] >> rows[None, :, None]) & 1).astype(bool)


_GLYPHS = _build_glyphs()
_UNKNOWN = ord("?") - 32


def text_size(text: str, scale: int) -> tuple[int, int]:
    """Width and height in pixels of ``text`` drawn at ``scale``."""
    if not text:
        return 0, _GLYPH_H * scale
    return (len(text) * (_GLYPH_W + 1) - 1) * scale, _GLYPH_H * scale


def render_text(text: str, scale: int = 1) -> np.ndarray:
    """Boolean mask ``[h, w]`` of ``text``; characters outside ASCII 32..126 draw as '?'."""
    idx = [(ord(c) - 32) if 32 <= ord(c) <= 126 else _UNKNOWN for c in text]
    w, h = text_size(text, 1)
    mask = np.zeros((h, max(w, 0)), dtype=bool)
    for i, g in enumerate(idx):
        x = i * (_GLYPH_W + 1)
        mask[:, x : x + _GLYPH_W] = _GLYPHS[g]
    if scale > 1:
        mask = mask.repeat(scale, axis=0).repeat(scale, axis=1)
    return mask


# --------------------------------------------------------------------------- canvas

Color = tuple[int, int, int]

_BG: Color = (255, 255, 255)
_FG: Color = (20, 20, 20)
_GRID: Color = (225, 225, 225)
_AXIS: Color = (60, 60, 60)
_REF: Color = (200, 30, 30)
# Tableau-10: distinct hues that stay apart for the common colour-blindnesses.
PALETTE: tuple[Color, ...] = (
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
)


class _Canvas:
    """An RGB image with the few drawing primitives the charts need (clipped)."""

    def __init__(self, width: int, height: int) -> None:
        self.px = np.empty((height, width, 3), dtype=np.uint8)
        self.px[:] = _BG
        self.h, self.w = height, width

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        """Fill the half-open box [x0, x1) x [y0, y1)."""
        x0, x1 = max(0, min(x0, x1)), min(self.w, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.h, max(y0, y1))
        if x0 < x1 and y0 < y1:
            self.px[y0:y1, x0:x1] = color

    def hline(self, x0: int, x1: int, y: int, color: Color, width: int = 1) -> None:
        self.rect(x0, y, x1 + 1, y + width, color)

    def vline(self, x: int, y0: int, y1: int, color: Color, width: int = 1) -> None:
        self.rect(x, y0, x + width, y1 + 1, color)

    def blit(self, mask: np.ndarray, x: int, y: int, color: Color) -> None:
        """Paint the True pixels of ``mask`` with its top-left corner at (x, y)."""
        h, w = mask.shape
        sx0, sy0 = max(0, -x), max(0, -y)
        dx0, dy0 = max(0, x), max(0, y)
        dx1, dy1 = min(self.w, x + w), min(self.h, y + h)
        if dx0 >= dx1 or dy0 >= dy1:
            return
        m = mask[sy0 : sy0 + dy1 - dy0, sx0 : sx0 + dx1 - dx0]
        self.px[dy0:dy1, dx0:dx1][m] = color

    def text(
        self,
        s: str,
        x: int,
        y: int,
        color: Color = _FG,
        scale: int = 2,
        anchor: str = "lt",
        rotate: bool = False,
    ) -> None:
        """Draw ``s``; ``anchor`` is horizontal (l/c/r) + vertical (t/m/b) of (x, y)."""
        mask = render_text(s, scale)
        if rotate:  # reads bottom to top, for a y-axis label
            mask = np.rot90(mask)
        h, w = mask.shape
        x -= {"l": 0, "c": w // 2, "r": w}[anchor[0]]
        y -= {"t": 0, "m": h // 2, "b": h}[anchor[1]]
        self.blit(mask, x, y, color)

    def dots(self, xs: np.ndarray, ys: np.ndarray, color: Color, width: int = 2) -> None:
        """Stamp a ``width``-square dot at each (rounded) point."""
        xs = np.rint(xs).astype(np.int64)
        ys = np.rint(ys).astype(np.int64)
        off = width // 2
        for dy in range(width):
            for dx in range(width):
                px, py = xs + dx - off, ys + dy - off
                ok = (px >= 0) & (px < self.w) & (py >= 0) & (py < self.h)
                self.px[py[ok], px[ok]] = color

    def polyline(
        self, xs: np.ndarray, ys: np.ndarray, ok: np.ndarray, color: Color, width: int = 2
    ) -> None:
        """Join consecutive points where both ends are ``ok``; lone points become dots.

        Every segment is sampled at one point per pixel of its longer extent,
        all segments at once: a Python loop per segment took seconds for a
        long learning curve.
        """
        both = ok[:-1] & ok[1:]
        x0, y0 = xs[:-1][both], ys[:-1][both]
        dx, dy = xs[1:][both] - x0, ys[1:][both] - y0
        steps = (np.maximum(np.abs(dx), np.abs(dy)).astype(np.int64) + 1).clip(max=1 << 16)
        seg = np.repeat(np.arange(steps.size), steps)
        start = np.cumsum(steps) - steps
        t = (np.arange(seg.size) - start[seg]) / steps[seg]
        self.dots(x0[seg] + t * dx[seg], y0[seg] + t * dy[seg], color, width)
        # Segment ends (t = 1) and points with no neighbour on either side.
        prev_ok = np.concatenate([[False], ok[:-1]])
        next_ok = np.concatenate([ok[1:], [False]])
        self.dots(xs[ok & prev_ok], ys[ok & prev_ok], color, width)
        lone = ok & ~prev_ok & ~next_ok
        self.dots(xs[lone], ys[lone], color, width + 2)


# --------------------------------------------------------------------------- PNG


def _chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def encode_png(rgb: np.ndarray) -> bytes:
    """Encode an ``[h, w, 3]`` uint8 image as PNG bytes (8-bit RGB, no interlace).

    Every scanline uses filter type 0 (None): charts are large flat areas that
    deflate compresses well without prediction.
    """
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8:
        raise TypeError(f"encode_png: rgb must be a uint8 ndarray, got {_describe(rgb)}")
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ValueError(f"encode_png: rgb must have shape [h, w, 3], got shape {rgb.shape}")
    h, w, _ = rgb.shape
    raw = np.empty((h, 1 + 3 * w), dtype=np.uint8)
    raw[:, 0] = 0
    raw[:, 1:] = rgb.reshape(h, 3 * w)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)  # 8-bit truecolour
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + _chunk(b"IDAT", zlib.compress(raw.tobytes(), 9))
        + _chunk(b"IEND", b"")
    )


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a temporary file next to ``path``, then rename over it.

    ``os.replace`` within one directory is atomic, so readers see the old file
    or the new one, never a partial write.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.splitext(path)[1], dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        # Leave no stray temporary file behind when the write or rename fails.
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --------------------------------------------------------------------------- validation


def _describe(x: Any) -> str:
    if isinstance(x, np.ndarray):
        return f"array(shape={x.shape}, dtype={x.dtype})"
    return (
        f"{type(x).__name__} {x!r}" if not isinstance(x, (list, tuple, dict)) else type(x).__name__
    )


def _check_path(fn: str, path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{fn}: path must be a str or os.PathLike, got {_describe(path)}")
    p = os.fspath(path)
    if not isinstance(p, str) or not p:
        raise ValueError(f"{fn}: path must be a non-empty file name, got {p!r}")
    directory = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(directory):
        raise ValueError(f"{fn}: path must be in an existing directory, got {p!r}")
    return p


def _check_str(fn: str, name: str, s: Any) -> str:
    if not isinstance(s, str):
        raise TypeError(f"{fn}: {name} must be a str, got {_describe(s)}")
    return s


def _check_str_list(fn: str, name: str, xs: Any) -> list[str]:
    if isinstance(xs, str) or not isinstance(xs, Sequence):
        raise TypeError(f"{fn}: {name} must be a list of str, got {_describe(xs)}")
    for i, s in enumerate(xs):
        if not isinstance(s, str):
            raise TypeError(f"{fn}: {name}[{i}] must be a str, got {_describe(s)}")
    return list(xs)


def _check_floats(fn: str, name: str, xs: Any) -> np.ndarray:
    """A 1-D float64 array of real numbers (bools and strings refused)."""
    if isinstance(xs, (str, bytes)) or not (isinstance(xs, (Sequence, np.ndarray))):
        raise TypeError(f"{fn}: {name} must be a sequence of real numbers, got {_describe(xs)}")
    arr = np.asarray(xs)
    if arr.dtype.kind not in "iuf" or arr.ndim != 1:
        if arr.ndim == 1 and arr.size == 0:
            return np.zeros(0)
        got = f"shape {arr.shape}" if arr.ndim != 1 else f"dtype {arr.dtype}"
        exc = ValueError if arr.ndim != 1 and arr.dtype.kind in "iuf" else TypeError
        raise exc(f"{fn}: {name} must be a 1-D sequence of real numbers, got {got}")
    return arr.astype(np.float64)


# --------------------------------------------------------------------------- ticks


def _nice_step(span: float, target: int) -> float:
    """A 1/2/5 x 10^k step that cuts ``span`` into about ``target`` intervals."""
    raw = span / max(target, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        if raw <= m * mag * (1 + 1e-9):
            return m * mag
    return 10.0 * mag  # pragma: no cover -- the loop always returns


def _linear_ticks(lo: float, hi: float, target: int = 6) -> tuple[float, float, list[float]]:
    """Nice axis limits covering [lo, hi] and the ticks between them."""
    if not hi > lo:
        pad = abs(lo) * 0.1 if lo != 0 else 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice_step(hi - lo, target)
    a = math.floor(lo / step + 1e-9) * step
    b = math.ceil(hi / step - 1e-9) * step
    n = round((b - a) / step)
    return a, b, [a + i * step for i in range(n + 1)]


def _fmt_tick(v: float, step: float) -> str:
    """Short tick label: 250000 -> '250k', 1.5e6 -> '1.5M', 0.25 -> '0.25'."""
    if abs(v) < step * 1e-6:
        return "0"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div and step >= div / 100:
            return f"{v / div:.{_decimals(step / div)}f}{suffix}"
    return f"{v:.{_decimals(step)}f}"


def _decimals(step: float) -> int:
    """Digits after the point that tell ticks ``step`` apart (steps are 1/2/5 x 10^k)."""
    return max(0, -math.floor(math.log10(step) + 1e-9))


def _fmt_value(v: float) -> str:
    """Three significant digits, without scientific notation for everyday magnitudes."""
    a = abs(v)
    if a != 0 and (a >= 1e6 or a < 1e-3):
        return f"{v:.2e}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


# --------------------------------------------------------------------------- bar chart

_S = 2  # text scale for labels: 10x14-pixel glyphs, readable at 100 % zoom
_CHAR_W = (_GLYPH_W + 1) * _S
_TEXT_H = _GLYPH_H * _S


def bar_chart(
    path: str | os.PathLike[str],
    title: str,
    labels: list[str],
    values: list[float],
    ylabel: str,
    log: bool = False,
    groups: list[str] | None = None,
    *,
    ref_line: float | None = None,
    unit: str = "",
) -> None:
    """Write a horizontal bar chart as a PNG file.

    One bar per row, top to bottom in the given order. With ``groups``,
    consecutive rows of the same group sit under one heading, and the bar
    colour follows the row's label, so the same implementation has the same
    colour in every group.

    Parameters
    ----------
    path : str or os.PathLike
        Output file; replaced atomically. Its directory must exist.
    title : str
        Drawn at the top.
    labels : list of str
        One label per bar (for a benchmark: the implementation).
    values : list of float
        Bar lengths, finite; with ``log=True`` strictly positive.
    ylabel : str
        Name of the value axis (drawn under it, since bars are horizontal).
    log : bool, default False
        Logarithmic value axis (for ratios, so 0.5x and 2x are equally long).
    groups : list of str, optional
        Group of each row (for a benchmark: the computation and size), same
        length as ``labels``.
    ref_line : float, optional
        Draw a vertical reference line at this value (1.0 for ratio charts).
    unit : str, default ""
        Appended to the value printed after each bar (``"x"`` for ratios).

    Raises
    ------
    TypeError
        For arguments of the wrong type.
    ValueError
        For empty or mismatched lists, non-finite values, non-positive values
        with ``log=True``, or a path in a directory that does not exist.
    """
    fn = "bar_chart"
    p = _check_path(fn, path)
    title = _check_str(fn, "title", title)
    ylabel = _check_str(fn, "ylabel", ylabel)
    labels = _check_str_list(fn, "labels", labels)
    vals = _check_floats(fn, "values", values)
    if not isinstance(log, (bool, np.bool_)):
        raise TypeError(f"{fn}: log must be a bool, got {_describe(log)}")
    if len(labels) == 0:
        raise ValueError(f"{fn}: labels must be non-empty, got an empty list")
    if vals.shape[0] != len(labels):
        raise ValueError(
            f"{fn}: values must have one entry per label ({len(labels)}), got {vals.shape[0]}"
        )
    if not np.all(np.isfinite(vals)):
        i = int(np.argmin(np.isfinite(vals)))
        raise ValueError(f"{fn}: values must be finite, got {float(vals[i])!r} at index {i}")
    if log and np.any(vals <= 0):
        i = int(np.argmax(vals <= 0))
        raise ValueError(
            f"{fn}: values must be > 0 with log=True, got {float(vals[i])!r} at index {i}"
        )
    grp: list[str] | None = None
    if groups is not None:
        grp = _check_str_list(fn, "groups", groups)
        if len(grp) != len(labels):
            raise ValueError(
                f"{fn}: groups must have one entry per label ({len(labels)}), got {len(grp)}"
            )
    unit = _check_str(fn, "unit", unit)
    if ref_line is not None:
        if isinstance(ref_line, bool) or not isinstance(ref_line, (int, float, np.number)):
            raise TypeError(f"{fn}: ref_line must be a real number or None, got {ref_line!r}")
        if not math.isfinite(ref_line) or (log and ref_line <= 0):
            need = "finite and > 0 with log=True" if log else "finite"
            raise ValueError(f"{fn}: ref_line must be {need}, got {ref_line!r}")
    img = _draw_bars(title, labels, vals, ylabel, log, grp, ref_line, unit)
    write_atomic(p, encode_png(img))


def _bar_axis(
    vals: np.ndarray, log: bool, ref: float | None
) -> tuple[float, float, list[float], list[str]]:
    """Axis limits (in axis units: log10 for a log axis), tick positions and labels."""
    ext = list(vals) + ([ref] if ref is not None else [])
    if log:
        # Half a decade of room below the smallest value, so no bar has zero length.
        lo = math.floor(math.log10(min(ext)) - 0.5)
        hi = math.ceil(math.log10(max(ext)) - 1e-9)
        if hi <= lo:
            hi = lo + 1
        # Decades only, thinned to at most ~8 labels for wide ranges.
        every = max(1, math.ceil((hi - lo) / 8))
        ticks = [float(k) for k in range(lo, hi + 1, every)]
        labels = [f"{10.0**k:g}" for k in range(lo, hi + 1, every)]
        return float(lo), float(hi), ticks, labels
    a, b, ticks = _linear_ticks(min(0.0, *ext), max(0.0, *ext))
    step = ticks[1] - ticks[0]
    return a, b, ticks, [_fmt_tick(t, step) for t in ticks]


def _draw_bars(
    title: str,
    labels: list[str],
    vals: np.ndarray,
    ylabel: str,
    log: bool,
    groups: list[str] | None,
    ref: float | None,
    unit: str,
) -> np.ndarray:
    bar_h, gap = 18, 6
    # Rows: (kind, text, value index). A heading row precedes each run of a group.
    rows: list[tuple[str, str, int]] = []
    prev = None
    for i, lab in enumerate(labels):
        if groups is not None and groups[i] != prev:
            rows.append(("head", groups[i], -1))
            prev = groups[i]
        rows.append(("bar", lab, i))
    colors: dict[str, Color] = {}
    for lab in labels:
        colors.setdefault(lab, PALETTE[len(colors) % len(PALETTE)])

    indent = _CHAR_W if groups is not None else 0
    label_w = max(text_size(lab, _S)[0] + indent for lab in labels)
    if groups is not None:
        label_w = max(label_w, min(max(text_size(g, _S)[0] for g in groups), 60 * _CHAR_W))
    label_w = min(label_w, 60 * _CHAR_W)  # very long labels are clipped at the left edge
    value_w = 9 * _CHAR_W  # room for the value printed after each bar
    margin = 16
    plot_w = max(560, text_size(ylabel, _S)[0] + 20)  # the axis name fits under the axis
    x0 = margin + label_w + 12
    x1 = x0 + plot_w
    width = x1 + value_w + margin
    title_h = 3 * _GLYPH_H + 2 * margin
    y0 = title_h
    plot_h = len(rows) * (bar_h + gap) + gap
    y1 = y0 + plot_h
    height = y1 + 2 * _TEXT_H + 3 * 8 + margin
    width = max(width, text_size(title, 3)[0] + 2 * margin)

    c = _Canvas(width, height)
    c.text(title, width // 2, margin, scale=3, anchor="ct")

    lo, hi, ticks, tick_labels = _bar_axis(vals, log, ref)

    def xpos(v: float) -> int:
        u = math.log10(v) if log else v
        return x0 + round((u - lo) / (hi - lo) * (plot_w - 1))

    for t, tl in zip(ticks, tick_labels):
        x = x0 + round((t - lo) / (hi - lo) * (plot_w - 1))
        c.vline(x, y0, y1, _GRID)
        c.vline(x, y1, y1 + 5, _AXIS)
        c.text(tl, x, y1 + 8, anchor="ct")
    c.text(ylabel, (x0 + x1) // 2, y1 + 16 + _TEXT_H, anchor="ct")

    # Bars start at the axis origin: 0 on a linear axis, the left edge on a log one.
    origin = x0 if log else xpos(0.0)
    # Bars first, then axis and reference line, then text on top, so the
    # reference line never hides a value label.
    texts: list[tuple[str, int, int, Color, str]] = []
    y = y0 + gap
    for kind, text, i in rows:
        mid = y + bar_h // 2
        if kind == "head":
            texts.append((text, x0 - 12 - label_w, mid, _AXIS, "lm"))
            c.hline(x0 - 12 - label_w, x1, y + bar_h + gap // 2 - 1, _GRID)
        else:
            v = float(vals[i])
            xe = xpos(v)
            c.rect(min(origin, xe), y, max(origin, xe) + 1, y + bar_h, colors[text])
            texts.append((text, x0 - 8, mid, _FG, "rm"))
            vt = _fmt_value(v) + unit
            if xe >= origin:
                texts.append((vt, xe + 6, mid, _FG, "lm"))
            else:
                texts.append((vt, xe - 6, mid, _FG, "rm"))
        y += bar_h + gap
    c.vline(origin, y0, y1, _AXIS)
    c.hline(x0, x1, y1, _AXIS)
    if ref is not None:
        c.vline(xpos(ref) - 1, y0, y1, _REF, width=2)
    for text, x, yy, color, anchor in texts:
        c.text(text, x, yy, color=color, anchor=anchor)
    return c.px


# --------------------------------------------------------------------------- line chart


def line_chart(
    path: str | os.PathLike[str],
    title: str,
    xlabel: str,
    ylabel: str,
    series: dict[str, tuple[Sequence[float], Sequence[float]]],
) -> None:
    """Write a line chart of one or more ``(x, y)`` series as a PNG file.

    Built for learning curves (x = environment steps, y = episodic return):
    each series gets its own colour and a legend entry. A NaN in ``y`` means
    "no value here" (for example no episode finished yet) and breaks the
    line; a lone point between gaps is drawn as a dot.

    Parameters
    ----------
    path : str or os.PathLike
        Output file; replaced atomically. Its directory must exist.
    title, xlabel, ylabel : str
        Title and axis names.
    series : dict of str to (sequence of float, sequence of float)
        Name -> ``(x, y)`` of equal length. ``x`` must be finite; ``y`` finite
        or NaN. At least one point must be finite overall.

    Raises
    ------
    TypeError
        For arguments of the wrong type.
    ValueError
        For an empty ``series``, mismatched lengths, infinite values, no finite
        point at all, or a path in a directory that does not exist.
    """
    fn = "line_chart"
    p = _check_path(fn, path)
    title = _check_str(fn, "title", title)
    xlabel = _check_str(fn, "xlabel", xlabel)
    ylabel = _check_str(fn, "ylabel", ylabel)
    if not isinstance(series, dict):
        raise TypeError(f"{fn}: series must be a dict name -> (x, y), got {_describe(series)}")
    if not series:
        raise ValueError(f"{fn}: series must hold at least one series, got an empty dict")
    data: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, xy in series.items():
        if not isinstance(name, str):
            raise TypeError(f"{fn}: series keys must be str, got {_describe(name)}")
        if not isinstance(xy, (tuple, list)) or len(xy) != 2:
            raise TypeError(f"{fn}: series[{name!r}] must be a pair (x, y), got {_describe(xy)}")
        x = _check_floats(fn, f"series[{name!r}] x", xy[0])
        y = _check_floats(fn, f"series[{name!r}] y", xy[1])
        if x.shape != y.shape:
            raise ValueError(
                f"{fn}: series[{name!r}] x and y must have the same length, "
                f"got {x.shape[0]} and {y.shape[0]}"
            )
        if not np.all(np.isfinite(x)):
            i = int(np.argmin(np.isfinite(x)))
            raise ValueError(
                f"{fn}: series[{name!r}] x must be finite, got {float(x[i])!r} at index {i}"
            )
        if np.any(np.isinf(y)):
            i = int(np.argmax(np.isinf(y)))
            raise ValueError(
                f"{fn}: series[{name!r}] y must be finite or NaN, got {float(y[i])!r} at index {i}"
            )
        data[name] = (x, y)
    if not any(np.any(np.isfinite(y)) for _, y in data.values()):
        raise ValueError(f"{fn}: series must contain at least one finite point, got none")
    write_atomic(p, encode_png(_draw_lines(title, xlabel, ylabel, data)))


def _draw_lines(
    title: str, xlabel: str, ylabel: str, data: dict[str, tuple[np.ndarray, np.ndarray]]
) -> np.ndarray:
    width, height, margin = 960, 600, 16
    xs = np.concatenate([x[np.isfinite(y)] for x, y in data.values()])
    ys = np.concatenate([y[np.isfinite(y)] for _, y in data.values()])
    ya, yb, yticks = _linear_ticks(float(ys.min()), float(ys.max()))
    xa, xb, xticks = _linear_ticks(float(xs.min()), float(xs.max()))
    ystep, xstep = yticks[1] - yticks[0], xticks[1] - xticks[0]
    ytl = [_fmt_tick(t, ystep) for t in yticks]
    xtl = [_fmt_tick(t, xstep) for t in xticks]

    x0 = margin + _TEXT_H + 10 + max(text_size(s, _S)[0] for s in ytl) + 10
    x1 = width - margin - 24  # room for half of the last x tick label
    y0 = margin + 3 * _GLYPH_H + 14
    y1 = height - margin - 2 * _TEXT_H - 24
    c = _Canvas(width, height)
    c.text(title, width // 2, margin, scale=3, anchor="ct")

    def sx(v: np.ndarray | float) -> Any:
        return x0 + (np.asarray(v) - xa) / (xb - xa) * (x1 - x0)

    def sy(v: np.ndarray | float) -> Any:
        return y1 - (np.asarray(v) - ya) / (yb - ya) * (y1 - y0)

    for t, tl in zip(yticks, ytl):
        y = round(float(sy(t)))
        c.hline(x0, x1, y, _GRID)
        c.hline(x0 - 5, x0, y, _AXIS)
        c.text(tl, x0 - 8, y, anchor="rm")
    for t, tl in zip(xticks, xtl):
        x = round(float(sx(t)))
        c.vline(x, y0, y1, _GRID)
        c.vline(x, y1, y1 + 5, _AXIS)
        c.text(tl, x, y1 + 8, anchor="ct")
    c.hline(x0, x1, y1, _AXIS)
    c.vline(x0, y0, y1, _AXIS)
    c.text(xlabel, (x0 + x1) // 2, height - margin, anchor="cb")
    c.text(ylabel, margin, (y0 + y1) // 2, anchor="lm", rotate=True)

    for k, (xv, yv) in enumerate(data.values()):
        ok = np.isfinite(yv)
        py = sy(np.where(ok, yv, ya))  # NaN rows are masked out; keep them finite
        c.polyline(sx(xv), py, ok, PALETTE[k % len(PALETTE)])

    # Legend: top-left inside the plot, on a white box so lines do not cross the text.
    names = list(data)
    lw = max(text_size(n, _S)[0] for n in names) + 40
    lh = len(names) * (_TEXT_H + 6) + 8
    lx, ly = x0 + 10, y0 + 8
    c.rect(lx, ly, lx + lw + 12, ly + lh, _BG)
    c.hline(lx, lx + lw + 12, ly, _GRID)
    c.hline(lx, lx + lw + 12, ly + lh, _GRID)
    c.vline(lx, ly, ly + lh, _GRID)
    c.vline(lx + lw + 12, ly, ly + lh, _GRID)
    for k, name in enumerate(names):
        yy = ly + 8 + k * (_TEXT_H + 6) + _TEXT_H // 2
        color = PALETTE[k % len(PALETTE)]
        c.rect(lx + 8, yy - 2, lx + 32, yy + 2, color)
        c.text(name, lx + 40, yy, anchor="lm")
    return c.px
