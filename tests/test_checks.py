"""The shared validation helpers: finiteness (serial and parallel builds) and the error format."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastppo import _checks as C
from fastppo._checks import all_finite_1d
from fastppo._dispatch import PARALLEL_MIN_ELEMENTS


@pytest.mark.parametrize("n", [1, 100, PARALLEL_MIN_ELEMENTS + 3])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_all_finite_serial_and_parallel(n, dt, bad):
    x = np.linspace(-1e30, 1e30, n).astype(dt)
    assert all_finite_1d(x)
    x[n // 2] = bad
    assert not all_finite_1d(x)


def test_check_finite_message_names_index_and_value():
    x = np.zeros((3, 4))
    x[2, 1] = np.inf
    with pytest.raises(ValueError, match=r"^f: x must be finite, got inf at index \(2, 1\)$"):
        C.check_finite("f", "x", x)


def test_check_range_messages():
    assert C.check_range("f", "g", 0.5, 0.0, 1.0) == 0.5
    assert C.check_range("f", "g", 1, 0.0, 1.0) == 1.0
    with pytest.raises(ValueError, match=r"^f: g must be in \[0, 1\], got 1.5$"):
        C.check_range("f", "g", 1.5, 0.0, 1.0)
    with pytest.raises(ValueError, match=r"^f: g must be in \(0, inf\], got 0.0$"):
        C.check_positive("f", "g", 0.0)
    with pytest.raises(TypeError, match=r"^f: g must be a real number, got True$"):
        C.check_range("f", "g", True, 0.0, 1.0)


def test_cuda_like_tensor_is_refused():
    class Dev:
        type = "cuda"

        def __str__(self):
            return "cuda:0"

    class FakeTensor:
        device = Dev()

    FakeTensor.__module__ = "torch"
    with pytest.raises(
        TypeError, match="f: x must be a CPU tensor or array, got a tensor on device"
    ):
        C.as_array("f", "x", FakeTensor())


def test_a_torch_tensor_off_the_cpu_is_refused():
    torch = pytest.importorskip("torch")
    t = torch.zeros(3, 2, device="meta")  # is_cpu is False, as on a GPU
    with pytest.raises(
        TypeError, match="f: x must be a CPU tensor or array, got a tensor on device 'meta'"
    ):
        C.as_array("f", "x", t)


@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (4096, 3), (2049, 4)])  # blocks of 4096
@pytest.mark.parametrize("orders", ["CC", "FF", "CF", "strided"])
def test_any_set_where_clear_agrees_with_numpy(shape, orders):
    """The sweeps' ambiguous-truncation check: a compiled scan when both flag
    arrays share a memory order, numpy otherwise; a hit in any block, at the
    first or last element, or none."""
    rng = np.random.default_rng(shape[0])
    n = shape[0] * shape[1]
    for hit in (None, 0, n - 1, n // 2):
        b = (rng.random(shape) < 0.5).astype(np.uint8) * np.uint8(255)  # nonzero is set
        a = b.copy()  # set only where b is: no hit
        if hit is not None:
            b.flat[hit] = 0
            a.flat[hit] = 7
        if orders == "strided":
            a2 = np.zeros((shape[0], 2 * shape[1]), np.uint8)
            a2[:, ::2] = a
            a = a2[:, ::2]
        else:
            a = np.asarray(a, order=orders[0])
            b = np.asarray(b, order=orders[1])
        want = bool(((a != 0) & (b == 0)).any())
        assert want == (hit is not None)
        assert C.any_set_where_clear(a, b) is want


def _views(base: np.ndarray, draw_ints) -> np.ndarray:
    """A view of ``base`` reshaped to 2-D, sliced with steps that may be negative."""
    rows = draw_ints(1, 6)
    v = base[: (base.size // rows) * rows].reshape(rows, -1)
    r0, r1 = sorted((draw_ints(0, v.shape[0]), draw_ints(0, v.shape[0])))
    c0, c1 = sorted((draw_ints(0, v.shape[1]), draw_ints(0, v.shape[1])))
    v = v[r0 : r1 : draw_ints(1, 3), c0 : c1 : draw_ints(1, 3)]
    if draw_ints(0, 1):
        v = v[::-1]
    if draw_ints(0, 1):
        v = v[:, ::-1]
    if draw_ints(0, 1):
        v = v.T
    return v


@given(st.data())
@settings(max_examples=400, deadline=None)
def test_the_overlap_rule_is_numpys_bounds_test(data):
    """``_fast.may_share_memory`` (the one overlap rule, in C) answers as
    ``np.may_share_memory`` on views of one buffer: empty, reversed, strided,
    transposed, broadcast and of another dtype."""
    from fastppo._cy._fast import may_share_memory

    base = np.zeros(96, np.float32)
    ints = lambda lo, hi: data.draw(st.integers(lo, hi))  # noqa: E731
    a = _views(base, ints)
    b = _views(base.view(np.uint8) if ints(0, 1) else base, ints)
    if ints(0, 3) == 0:
        b = np.broadcast_to(b[:1, :1], (3, 2)) if b.size else b
    assert may_share_memory(a, b) == np.may_share_memory(a, b)
    assert may_share_memory(a, np.zeros(3, np.float32)) is False


@pytest.mark.parametrize("module", ["fastppo._checks", "fastppo._fastpath", "fastppo.stats"])
def test_a_missing_extension_says_how_to_build_it(module):
    """Every importer of a Cython extension raises the one message (``_cy.missing``)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['fastppo._cy._fast'] = None; "
        "sys.modules['fastppo._cy._stats'] = None\n"
        f"try:\n    import {module}\nexcept ImportError as e:\n    print(e)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "fastppo needs the compiled extension fastppo._cy._" in out.stdout
    assert "pip install -e ." in out.stdout
