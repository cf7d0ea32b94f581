"""Running statistics: hand-worked cases, the union property, big counts, errors."""

from __future__ import annotations

import copy
import itertools
import json
import pickle
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastppo
from fastppo import ReturnNormalizer, RunningMeanStd, denormalize_values, normalize_returns
from fastppo._cy import _stats as cy_stats
from fastppo.reference import stats as ref
from fastppo.stats import layout

FLOATS = (np.float32, np.float64)


def assert_union(rms: RunningMeanStd, data: np.ndarray) -> None:
    """rms equals np.mean / np.var of ``data`` [R, *shape] to 1e-12 of the data's scale."""
    d = data.astype(np.float64)
    assert rms.count == d.shape[0]
    scale = max(float(np.abs(d).max()), 1e-300)
    np.testing.assert_allclose(rms.mean, d.mean(axis=0), rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(rms.var, d.var(axis=0), rtol=0, atol=1e-12 * scale**2)


# -- hand-worked -----------------------------------------------------------------
def test_fresh_state_is_identity_prior() -> None:
    rms = RunningMeanStd((2,))
    assert rms.count == 0
    np.testing.assert_array_equal(rms.mean, [0.0, 0.0])
    np.testing.assert_array_equal(rms.var, [1.0, 1.0])
    np.testing.assert_array_equal(rms.std, [1.0, 1.0])
    assert rms.shape == (2,)


def test_hand_worked_scalar_updates() -> None:
    rms = RunningMeanStd()
    rms.update(np.array([1.0, 2.0, 3.0, 4.0]))
    assert rms.count == 4
    assert rms.mean == 2.5 and rms.var == 1.25
    rms.update(np.array([10.0]))
    # union {1, 2, 3, 4, 10}: mean 4, E[x^2] = 130/5 = 26, var = 26 - 16 = 10
    assert rms.count == 5
    assert rms.mean == pytest.approx(4.0, abs=1e-15)
    assert rms.var == pytest.approx(10.0, abs=1e-14)
    assert rms.std == pytest.approx(np.sqrt(10.0), abs=1e-14)
    assert rms.mean.shape == () and rms.var.shape == ()


def test_hand_worked_normalize_denormalize() -> None:
    rms = RunningMeanStd(epsilon=1e-8)
    rms.update(np.array([1.0, 2.0, 3.0, 4.0]))  # mean 2.5, var 1.25
    y = rms.normalize(np.array([2.5, 5.0, -100.0]))
    s = np.sqrt(1.25 + 1e-8)
    np.testing.assert_allclose(y, [0.0, 2.5 / s, -102.5 / s], rtol=1e-15)
    yc = rms.normalize(np.array([2.5, 5.0, -100.0]), clip=2.0)
    np.testing.assert_allclose(yc, [0.0, 2.0, -2.0], rtol=1e-15)
    np.testing.assert_allclose(rms.denormalize(np.array([0.0, 1.0])), [2.5, 2.5 + s], rtol=1e-15)


def test_valid_mask_leaves_rows_out_even_non_finite() -> None:
    rms = RunningMeanStd((2,))
    x = np.array([[1.0, 2.0], [np.nan, np.inf], [3.0, 6.0]])
    rms.update(x, valid=np.array([True, False, True]))
    assert rms.count == 2
    np.testing.assert_array_equal(rms.mean, [2.0, 4.0])
    np.testing.assert_array_equal(rms.var, [1.0, 4.0])
    rms.update(x, valid=np.zeros(3, bool))  # nothing valid: no change
    assert rms.count == 2


def test_leading_dims_and_mask_over_them() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3, 4)).astype(np.float32)
    mask = rng.random((5, 3)) < 0.6
    rms = RunningMeanStd((4,))
    rms.update(x, valid=mask)
    assert_union(rms, x[mask])
    rms2 = RunningMeanStd(4)  # an int shape means (4,)
    rms2.update(x, valid=mask.astype(np.uint8))
    np.testing.assert_array_equal(rms2.mean, rms.mean)


def test_multi_dim_shape() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(3.0, 2.0, size=(7, 2, 3))
    rms = RunningMeanStd((2, 3))
    rms.update(x)
    assert rms.mean.shape == (2, 3)
    assert_union(rms, x)
    np.testing.assert_allclose(rms.normalize(x).reshape(7, 6).mean(axis=0), 0, atol=1e-12)


def test_zero_size_shapes_and_empty_batches() -> None:
    rms = RunningMeanStd((0,))
    rms.update(np.zeros((5, 0)))
    assert rms.count == 5
    r = RunningMeanStd((3,))
    r.update(np.zeros((0, 3), np.float32))
    assert r.count == 0
    assert r.normalize(np.zeros((0, 3))).shape == (0, 3)


# -- the union property (hypothesis) ----------------------------------------------
@st.composite
def split_data(draw):
    n_feat = draw(st.integers(1, 5))
    n_rows = draw(st.integers(1, 60))
    dtype = draw(st.sampled_from(FLOATS))
    offset = draw(st.sampled_from([0.0, 1e3, -1e6]))
    spread = draw(st.sampled_from([1e-3, 1.0, 1e3]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    data = (offset + spread * rng.standard_normal((n_rows, n_feat))).astype(dtype)
    cuts = sorted(draw(st.lists(st.integers(0, n_rows), max_size=5)))
    bounds = [0, *cuts, n_rows]
    parts = [data[a:b] for a, b in itertools.pairwise(bounds)]
    return data, parts


@settings(max_examples=60, deadline=None)
@given(split_data())
def test_any_split_of_updates_equals_union(case) -> None:
    data, parts = case
    rms = RunningMeanStd((data.shape[1],))
    for p in parts:
        rms.update(p)
    assert_union(rms, data)


@settings(max_examples=60, deadline=None)
@given(split_data(), st.randoms(use_true_random=False))
def test_any_merge_order_equals_union(case, rnd) -> None:
    data, parts = case
    states = []
    for p in parts:
        r = RunningMeanStd((data.shape[1],))
        r.update(p)
        states.append(r)
    while len(states) > 1:  # merge random pairs: any tree of merges
        i, j = sorted(rnd.sample(range(len(states)), 2))
        states[i].merge(states.pop(j))
    assert_union(states[0], data)


@settings(max_examples=40, deadline=None)
@given(split_data(), st.integers(0, 2**32 - 1))
def test_masked_updates_equal_union_of_valid_rows(case, seed) -> None:
    data, parts = case
    rng = np.random.default_rng(seed)
    masks = [rng.random(len(p)) < 0.5 for p in parts]
    rms = RunningMeanStd((data.shape[1],))
    for p, m in zip(parts, masks):
        rms.update(p, valid=m)
    kept = np.concatenate([p[m] for p, m in zip(parts, masks)])
    if len(kept) == 0:
        assert rms.count == 0
        np.testing.assert_array_equal(rms.var, 1.0)
    else:
        assert_union(rms, kept)


@settings(max_examples=40, deadline=None)
@given(split_data())
def test_state_dict_round_trip_through_json(case) -> None:
    data, parts = case
    rms = RunningMeanStd((data.shape[1],), epsilon=1e-6)
    rms.update(parts[0] if len(parts[0]) else data)
    d = json.loads(json.dumps(rms.state_dict()))
    back = RunningMeanStd.from_state_dict(d)
    assert back.count == rms.count and back.epsilon == rms.epsilon and back.shape == rms.shape
    np.testing.assert_array_equal(back.mean, rms.mean)
    np.testing.assert_array_equal(back.var, rms.var)
    # and the copy carries on exactly like the original
    rms.update(data)
    back.update(data)
    np.testing.assert_array_equal(back.mean, rms.mean)
    np.testing.assert_array_equal(back.var, rms.var)


def test_matches_reference_chan_merge() -> None:
    rng = np.random.default_rng(2)
    parts = [rng.normal(5, 3, size=(n, 3)) for n in (4, 9, 1, 30)]
    rms = RunningMeanStd((3,))
    state = ref.batch_moments(parts[0][:0])
    for p in parts:
        rms.update(p)
        state = ref.chan_merge(state, ref.batch_moments(p))
    assert rms.count == state[0]
    np.testing.assert_allclose(rms.mean, state[1], rtol=1e-14)
    np.testing.assert_allclose(rms.var, state[2], rtol=1e-13)


# -- large batches: every thread count gives the same bits ------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(8, 4), (16, 17), (1000, 3), (70_000, 1), (3000, 64)])
@pytest.mark.parametrize("masked", [False, True])
def test_every_thread_count_gives_the_same_bits(dtype, shape, masked) -> None:
    rng = np.random.default_rng(3)
    x = (7.0 + 2.0 * rng.standard_normal(shape)).astype(dtype)
    valid = (rng.random(shape[0]) < 0.7).astype(np.uint8) if masked else None
    m, rpb = layout(shape[1])
    results = []
    for threads in (1, 2, 3):  # one block per thread, blocks split across threads
        mean = np.full(shape[1], 1.5)
        var = np.full(shape[1], 0.5)
        up = cy_stats.Updater(mean, var, m, rpb)
        n = (up.update_f32 if dtype == np.float32 else up.update_f64)(x, valid, 11.0, threads)
        results.append((n, mean, var))
    for n, mean, var in results[1:]:
        assert n == results[0][0]
        np.testing.assert_array_equal(mean, results[0][1])
        np.testing.assert_array_equal(var, results[0][2])
    # and the numbers are right: merged with the 11-sample prior state
    kept = x[valid.astype(bool)] if masked else x
    exp = ref.chan_merge(
        (11, np.full(shape[1], 1.5), np.full(shape[1], 0.5)), ref.batch_moments(kept)
    )
    np.testing.assert_allclose(results[0][1], exp[1], rtol=0, atol=1e-12 * 20)
    np.testing.assert_allclose(results[0][2], exp[2], rtol=0, atol=1e-12 * 400)


@pytest.fixture(params=["serial", "parallel"])
def update_path(request, monkeypatch):
    """Run a test through each path the public layer picks by size."""
    if request.param == "parallel":
        monkeypatch.setattr(fastppo._dispatch, "PARALLEL_MIN_STATS", 1)
    return request.param


@pytest.mark.parametrize("dtype", FLOATS)
def test_public_paths(dtype, update_path) -> None:
    rng = np.random.default_rng(4)
    x = (1e4 + rng.standard_normal((2000, 8))).astype(dtype)
    mask = rng.random(x.shape[0]) < 0.9
    rms = RunningMeanStd((8,))
    rms.update(x[:5])
    rms.update(x[5:], valid=mask[5:])
    assert_union(rms, np.concatenate([x[:5], x[5:][mask[5:]]]))
    y = rms.normalize(x)
    np.testing.assert_allclose(
        y,
        ref.normalize(x, rms.mean, rms.var, 1e-8),
        rtol=1e-6 if dtype == np.float32 else 1e-12,
        atol=1e-6,
    )


# -- counts beyond 2**53 ------------------------------------------------------------
def test_huge_count_update_keeps_exact_count_and_mean() -> None:
    n0 = 2**60
    rms = RunningMeanStd.from_state_dict(
        {"shape": [], "epsilon": 1e-8, "count": n0, "mean": [1.0], "var": [4.0]}
    )
    batch = np.array([1.0 + 2**-20] * 3 + [3.0e6])
    rms.update(batch)
    assert rms.count == n0 + 4  # exact: a float count would have stayed 2**60
    exact_mean = (Fraction(n0) * 1 + sum(Fraction(float(b)) for b in batch)) / (n0 + 4)
    assert float(rms.mean) == pytest.approx(float(exact_mean), rel=1e-15)
    assert float(rms.mean) > 1.0  # the small batch still moves the mean
    # the state survives JSON with the exact count
    back = RunningMeanStd.from_state_dict(json.loads(json.dumps(rms.state_dict())))
    assert back.count == n0 + 4


def test_huge_count_merge() -> None:
    a = RunningMeanStd.from_state_dict(
        {"shape": [2], "epsilon": 1e-8, "count": 2**62 + 1, "mean": [0.0, 1.0], "var": [1.0, 1.0]}
    )
    b = RunningMeanStd.from_state_dict(
        {"shape": [2], "epsilon": 1e-8, "count": 3 * 2**62, "mean": [4.0, 1.0], "var": [1.0, 2.0]}
    )
    a.merge(b)
    assert a.count == 2**64 + 1  # beyond int64 too
    # weights 1/4, 3/4: mean = 3, var = 1/4*1 + 3/4*1 + 16*3/16 = 4 (feature 0)
    np.testing.assert_allclose(a.mean, [3.0, 1.0], rtol=1e-15)
    np.testing.assert_allclose(a.var, [4.0, 1.75], rtol=1e-15)
    assert isinstance(a.state_dict()["count"], int)


def test_copy_deepcopy_and_pickle_are_independent() -> None:
    rms = RunningMeanStd((2,))
    rms.update(np.array([[1.0, 2.0], [3.0, 5.0]]))
    rn = ReturnNormalizer(2)
    f = np.zeros(2, bool)
    rn.normalize(np.array([1.0, 2.0]), f, f)
    for clone in (rms.copy(), copy.deepcopy(rms), pickle.loads(pickle.dumps(rms))):
        np.testing.assert_array_equal(clone.var, rms.var)
        clone.update(np.array([[100.0, 100.0]]))  # the clone has its own buffers
        assert clone.count == 3 and rms.count == 2
        np.testing.assert_array_equal(rms.mean, [2.0, 3.5])
    for rclone in (copy.deepcopy(rn), pickle.loads(pickle.dumps(rn))):
        rclone.normalize(np.array([1.0, 2.0]), f, f)
        assert rclone.rms.count == 4 and rn.rms.count == 2
        np.testing.assert_array_equal(rn.returns, [1.0, 2.0])


def test_count_as_decimal_string() -> None:
    d = RunningMeanStd().state_dict()
    d["count"] = str(2**70)
    assert RunningMeanStd.from_state_dict(d).count == 2**70


# -- normalize / denormalize --------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("divide", [True, False])
@pytest.mark.parametrize("clip", [0.0, 1.5])
def test_affine_every_thread_count_gives_the_same_bits(dtype, divide, clip) -> None:
    rng = np.random.default_rng(11)
    mean = rng.normal(size=5)
    var = rng.random(5) * 3
    x = rng.normal(size=(30_000, 5)).astype(dtype)  # 3 tasks of 13,107 rows
    x[3, 2] = np.nan  # propagates through clipping, like np.clip
    m, rpb = layout(5)
    up = cy_stats.Updater(mean.copy(), var.copy(), m, rpb)
    outs = [np.empty_like(x) for _ in range(3)]
    for threads, out in zip((1, 2, 3), outs):
        aff = up.affine_f32 if dtype == np.float32 else up.affine_f64
        aff(x, out, 1e-8, divide, clip, threads)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])
    assert np.isnan(outs[0][3, 2])
    # feature-major (a Fortran-ordered batch's transpose): the same bits
    xt = np.ascontiguousarray(x.T)
    for threads in (1, 3):
        out_t = np.empty_like(xt)
        aff(xt, out_t, 1e-8, divide, clip, threads, True)
        np.testing.assert_array_equal(out_t, outs[0].T)
    # one feature: its rows are one run
    up1 = cy_stats.Updater(mean[:1].copy(), var[:1].copy(), *layout(1))
    x1 = np.ascontiguousarray(x[:, :1])
    aff1 = up1.affine_f32 if dtype == np.float32 else up1.affine_f64
    for threads in (1, 3):
        out1 = np.empty_like(x1)
        aff1(x1, out1, 1e-8, divide, clip, threads)
        np.testing.assert_array_equal(out1, outs[0][:, :1])
    if divide:
        exp = ref.normalize(x, mean, var, 1e-8, clip or None)
    else:
        exp = ref.denormalize(x, mean, var, 1e-8)
        exp = np.clip(exp, -clip, clip) if clip else exp
    tol = 1e-6 if dtype == np.float32 else 1e-15
    np.testing.assert_allclose(outs[0], exp, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_normalize_denormalize_inverse_and_dtype(dtype, update_path) -> None:
    rng = np.random.default_rng(5)
    rms = RunningMeanStd((3,))
    rms.update(rng.normal(10, 5, size=(100, 3)))
    x = rng.normal(10, 5, size=(4, 6, 3)).astype(dtype)
    y = rms.normalize(x)
    assert y.dtype == dtype and y.shape == x.shape
    np.testing.assert_allclose(
        y,
        ref.normalize(x, rms.mean, rms.var, rms.epsilon),
        rtol=2e-6 if dtype == np.float32 else 1e-14,
        atol=1e-6 if dtype == np.float32 else 1e-14,
    )
    back = rms.denormalize(y)
    np.testing.assert_allclose(back, x, rtol=1e-5 if dtype == np.float32 else 1e-13)


def test_out_buffers_are_used_and_inputs_untouched(update_path) -> None:
    rng = np.random.default_rng(6)
    rms = RunningMeanStd((2,))
    x = rng.normal(size=(10, 2))
    rms.update(x)
    x_copy = x.copy()
    out = np.empty_like(x)
    res = rms.normalize(x, clip=1.0, out=out)
    assert np.shares_memory(res, out)
    res2 = rms.denormalize(res, out=np.empty_like(x))
    np.testing.assert_allclose(res2, np.clip(res, -1, 1) * np.sqrt(rms.var + 1e-8) + rms.mean)
    np.testing.assert_array_equal(x, x_copy)
    # a non-contiguous out still receives the result
    big = np.zeros((10, 4))
    res3 = rms.normalize(x, out=big[:, ::2])
    assert np.shares_memory(res3, big)
    np.testing.assert_array_equal(big[:, ::2], rms.normalize(x))
    np.testing.assert_array_equal(big[:, 1::2], 0.0)


def test_scalar_stats_strided_out_and_foreign_byte_order(update_path) -> None:
    rms = RunningMeanStd()
    rms.update(np.array([1.0, 2.0, 4.0]))
    x = np.array([0.5, 1.5, 3.0, 7.0])
    big = np.zeros(8)
    res = rms.normalize(x, clip=1.0, out=big[::2])
    assert np.shares_memory(res, big)
    np.testing.assert_allclose(big[::2], ref.normalize(x, rms.mean, rms.var, 1e-8, 1.0), rtol=1e-15)
    np.testing.assert_array_equal(big[1::2], 0.0)
    with pytest.raises(TypeError, match=r"RunningMeanStd.normalize: x must be float32 or float64"):
        rms.normalize(x.astype(">f8"))
    with pytest.raises(TypeError, match=r"RunningMeanStd.update: batch must be float32 or float64"):
        rms.update(x.astype(">f8"))
    assert rms.count == 3


def test_read_only_and_non_contiguous_inputs(update_path) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(20, 6))
    ro = x.copy()
    ro.flags.writeable = False
    a = RunningMeanStd((3,))
    a.update(ro[:, ::2], valid=np.ones(20, bool)[::1])
    assert_union(a, x[:, ::2])
    y = a.normalize(ro[:, ::2])
    np.testing.assert_allclose(y, ref.normalize(x[:, ::2], a.mean, a.var, 1e-8), rtol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(), (5,)])
def test_every_layout_gives_the_c_order_bits(dtype, shape) -> None:
    """Fortran-ordered, transposed and strided batches fold their rows in C
    order (the C copy), so the state has the C-contiguous batch's bits; the
    normalisations are element-wise and equal bit for bit, one-feature
    statistics writing a Fortran-ordered array's result in its own order."""
    rng = np.random.default_rng(11)
    lead = (300, 7)
    x = (rng.normal(size=(*lead, *shape)) * 3 + 1).astype(dtype)
    if shape:  # [N, D] batches: the layouts of a per-step batch
        x = x.reshape(-1, *shape)
    wide = np.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype)
    wide[..., ::2] = x
    forms = {
        "Fortran": np.asfortranarray(x),
        "transposed": np.ascontiguousarray(x.T).T,
        "strided": wide[..., ::2],
        "read-only Fortran": np.asfortranarray(x),
    }
    forms["read-only Fortran"].flags.writeable = False
    want = RunningMeanStd(shape)
    want.update(x)
    y = want.normalize(x, clip=2.0)
    z = want.denormalize(x)
    for label, f in forms.items():
        got = RunningMeanStd(shape)
        got.update(f)
        assert got.state_dict() == want.state_dict(), label
        yf = got.normalize(f, clip=2.0)
        np.testing.assert_array_equal(yf, y, err_msg=label)
        np.testing.assert_array_equal(got.denormalize(f), z, err_msg=label)
        np.testing.assert_array_equal(
            normalize_returns(f, got.copy(), update=False), want.normalize(x, 5.0), err_msg=label
        )
        if f.flags.f_contiguous:  # mapped feature-major, into the same order
            assert yf.flags.f_contiguous and not yf.flags.c_contiguous, label
            out = np.empty(x.shape, dtype)  # a C-ordered out= is written too
            assert got.normalize(f, clip=2.0, out=out) is out
            np.testing.assert_array_equal(out, y, err_msg=label)


def _views(x: np.ndarray) -> dict[str, np.ndarray]:
    """Views of ``x``'s values that a row loop reads as they lie: every k-th
    element, rows apart (a column slice), reversed rows and elements."""
    out = {}
    for k in (2, 3, 5):
        wide = np.zeros((*x.shape[:-1], k * x.shape[-1]), x.dtype)
        wide[..., ::k] = x
        out[f"every {k}th"] = wide[..., ::k]
    wide = np.zeros((*x.shape[:-1], x.shape[-1] + 3), x.dtype)
    wide[..., 1:-2] = x
    out["rows apart"] = wide[..., 1:-2]
    rev = x[::-1, ::-1].copy() if x.ndim == 2 else x[::-1].copy()
    out["reversed"] = rev[::-1, ::-1] if x.ndim == 2 else rev[::-1]
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("state", "lead"), [((), (300, 7)), ((), (2100,)), ((5,), (300,))])
def test_strided_views_are_mapped_in_place_with_the_contiguous_bits(
    dtype, state, lead, update_path, monkeypatch
) -> None:
    """A view a row loop can read (``row_readable``) is normalised where it
    lies, never copied first, with the contiguous array's bits, into a fresh,
    an out= or a strided out= result; an out= overlapping it is refused."""
    import fastppo.stats.running as running

    rng = np.random.default_rng(23)
    x = (rng.normal(size=(*lead, *state)) * 3 + 1).astype(dtype)
    rms = RunningMeanStd(state)
    rms.update(x)
    want = {
        "normalize": rms.normalize(x, clip=2.0),
        "denormalize": rms.denormalize(x),
        "returns": normalize_returns(x, rms.copy(), update=False) if not state else None,
    }

    def no_copy(a):
        raise AssertionError("a readable view was copied")

    monkeypatch.setattr(running, "c_contiguous", no_copy)
    for label, v in _views(x).items():
        np.testing.assert_array_equal(rms.normalize(v, clip=2.0), want["normalize"], label)
        np.testing.assert_array_equal(rms.denormalize(v), want["denormalize"], label)
        if not state:
            got = normalize_returns(v, rms.copy(), update=False)
            np.testing.assert_array_equal(got, want["returns"], label)
        out = np.empty_like(x)
        assert rms.normalize(v, clip=2.0, out=out) is out
        np.testing.assert_array_equal(out, want["normalize"], label)
        big = np.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype)
        rms.normalize(v, clip=2.0, out=big[..., ::2])
        np.testing.assert_array_equal(big[..., ::2], want["normalize"], label)
    wide = np.zeros((*x.shape[:-1], 2 * x.shape[-1]), dtype)
    wide[..., ::2] = x
    with pytest.raises(ValueError, match="out"):
        rms.normalize(wide[..., ::2], out=wide[..., 1::2])


def test_unaligned_and_transposed_views_are_copied_with_the_same_bits() -> None:
    rms = RunningMeanStd((3,))
    x = np.random.default_rng(2).normal(size=(40, 3))
    rms.update(x)
    want = rms.normalize(x)
    buf = np.zeros(x.size * 8 + 1, np.uint8)
    unaligned = np.frombuffer(buf.data, np.float64, x.size, offset=1).reshape(x.shape)
    unaligned[...] = x
    assert not unaligned.flags.aligned
    np.testing.assert_array_equal(rms.normalize(unaligned), want)
    # a transposed view's rows lie closer than its elements: copied in blocks
    t = np.ascontiguousarray(x.T).T[::2]
    assert not fastppo._checks.row_readable(t)
    np.testing.assert_array_equal(rms.normalize(t), want[::2])


def test_merge_with_empty_and_self() -> None:
    a = RunningMeanStd((2,))
    b = RunningMeanStd((2,))
    a.merge(b)
    assert a.count == 0
    np.testing.assert_array_equal(a.var, 1.0)
    b.update(np.array([[1.0, 2.0], [3.0, 4.0]]))
    a.merge(b)
    np.testing.assert_array_equal(a.mean, b.mean)
    assert b.count == 2  # other unchanged
    a.merge(a)
    assert a.count == 4
    np.testing.assert_allclose(a.var, b.var)


# -- ReturnNormalizer ----------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("masked", [False, True])
def test_return_normalizer_matches_sb3_transcription(dtype, masked) -> None:
    rng = np.random.default_rng(8)
    t_max, n = 40, 5
    rewards = rng.normal(0.5, 2.0, size=(t_max, n)).astype(dtype)
    term = rng.random((t_max, n)) < 0.08
    trunc = rng.random((t_max, n)) < 0.05
    valid = rng.random((t_max, n)) < 0.8 if masked else None
    exp, exp_ret, hist = ref.return_normalize(rewards, term, trunc, 0.97, 3.0, 1e-8, valid)
    # step by step, as a trainer calls it
    rn = ReturnNormalizer(n, gamma=0.97, clip=3.0)
    got = np.stack(
        [
            rn.normalize(rewards[t], term[t], trunc[t], None if valid is None else valid[t])
            for t in range(t_max)
        ]
    )
    assert got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, exp, rtol=tol, atol=tol)
    np.testing.assert_allclose(rn.returns, exp_ret, rtol=1e-12)
    assert rn.rms.count == len(hist)
    np.testing.assert_allclose(rn.rms.var, np.var(hist), rtol=1e-12)
    # a [T, N] block is processed exactly like T single steps
    rn2 = ReturnNormalizer(n, gamma=0.97, clip=3.0)
    block = rn2.normalize(rewards, term, trunc, valid)
    np.testing.assert_array_equal(block, got)
    np.testing.assert_array_equal(rn2.returns, rn.returns)
    assert rn2.rms.count == rn.rms.count


def test_return_normalizer_fast_and_general_paths_agree() -> None:
    rng = np.random.default_rng(13)
    r = rng.normal(size=(12, 3))
    term = rng.random((12, 3)) < 0.2
    a, b = ReturnNormalizer(3), ReturnNormalizer(3)
    for t in range(12):
        fast = a.normalize(r[t], term[t], np.zeros(3, bool))  # bool flags: Cython direct
        slow = b.normalize(r[t].tolist(), term[t].astype(np.float32), np.zeros(3, np.uint8))
        np.testing.assert_array_equal(fast, slow)
    assert a.rms.count == b.rms.count == 36
    np.testing.assert_array_equal(a.returns, b.returns)


def test_return_normalizer_fast_path_takes_tensors_uint8_and_strided_forms(monkeypatch) -> None:
    """Per-step forms the fast path now takes (tensors, uint8 and float 0/1
    flags, strided views): the same bits and state as bool C-contiguous
    arrays, without entering the general path; a float flag that is not 0/1
    still gets the general path's error."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(17)
    r = rng.normal(size=(6, 5)).astype(np.float32)
    term = rng.random((6, 5)) < 0.3
    trunc = rng.random((6, 5)) < 0.2
    wide = np.zeros((6, 10), np.float32)
    wide[:, ::2] = r
    want, got = ReturnNormalizer(5), [ReturnNormalizer(5) for _ in range(5)]
    import fastppo.stats.returns as ret_mod

    def no_general(*a, **k):
        raise AssertionError("general path entered")

    for t in range(6):
        w = want.normalize(r[t], term[t], trunc[t])
        with monkeypatch.context() as m:
            m.setattr(ret_mod, "as_array", no_general)
            forms = (
                (torch.from_numpy(r[t]), torch.from_numpy(term[t]), torch.from_numpy(trunc[t])),
                (r[t], term[t].view(np.uint8), trunc[t].astype(np.uint8)),
                (wide[t, ::2], term[t], trunc[t]),
                (r[t : t + 1], term[t : t + 1], np.asfortranarray(trunc[t : t + 1])),
                (r[t], term[t].astype(np.float32), trunc[t].astype(np.float64)),
            )
            for rn, (a, b, c) in zip(got, forms):
                np.testing.assert_array_equal(rn.normalize(a, b, c).reshape(-1), w)
    for rn in got:
        assert rn.state_dict() == want.state_dict()
    half = np.full(5, 0.5, np.float32)
    with pytest.raises(ValueError, match=r"ReturnNormalizer\.normalize: terminated must be 0/1"):
        got[0].normalize(r[0], half, trunc[0])
    assert got[0].state_dict() == want.state_dict()


def test_return_normalizer_resets_on_truncation_hand_worked() -> None:
    rn = ReturnNormalizer(2, gamma=0.5, clip=None)
    f = np.zeros(2, bool)
    rn.normalize(np.array([1.0, 2.0]), f, np.array([False, True]))
    np.testing.assert_array_equal(rn.returns, [1.0, 0.0])
    rn.normalize(np.array([1.0, 2.0]), np.array([True, False]), f)
    # R history: {1, 2} then {1.5, 2}: mean 1.625, var = mean(x^2) - mean^2
    np.testing.assert_array_equal(rn.returns, [0.0, 2.0])
    h = np.array([1.0, 2.0, 1.5, 2.0])
    assert rn.rms.var == pytest.approx(h.var(), abs=1e-15)
    y = rn.normalize(np.array([3.0, -3.0]), f, f)
    h = np.append(h, [3.0, -2.0])
    np.testing.assert_allclose(y, np.array([3.0, -3.0]) / np.sqrt(h.var() + 1e-8), rtol=1e-14)


def test_return_normalizer_state_round_trip() -> None:
    rng = np.random.default_rng(9)
    rn = ReturnNormalizer(3, gamma=0.9, clip=5.0)
    f = np.zeros((6, 3), bool)
    rn.normalize(rng.normal(size=(6, 3)), f, f)
    back = ReturnNormalizer.from_state_dict(json.loads(json.dumps(rn.state_dict())))
    r = rng.normal(size=(4, 3))
    np.testing.assert_array_equal(back.normalize(r, f[:4], f[:4]), rn.normalize(r, f[:4], f[:4]))
    np.testing.assert_array_equal(back.returns, rn.returns)


def test_return_normalizer_inputs_untouched_and_out() -> None:
    rn = ReturnNormalizer(4)
    r = np.arange(8.0).reshape(2, 4)
    r.flags.writeable = False
    term = np.zeros((2, 4), np.float32)  # float 0/1 flags are accepted
    out = np.empty((2, 4))
    res = rn.normalize(r, term, term, out=out)
    assert np.shares_memory(res, out)
    np.testing.assert_array_equal(r, np.arange(8.0).reshape(2, 4))


# -- normalize_returns / denormalize_values -------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
def test_normalize_returns_then_denormalize(dtype, update_path) -> None:
    rng = np.random.default_rng(10)
    rms = RunningMeanStd()
    ret = rng.normal(50.0, 20.0, size=(32, 4)).astype(dtype)
    y = normalize_returns(ret, rms)
    assert rms.count == ret.size and y.dtype == dtype
    exp = np.clip(
        (ret.astype(np.float64) - ret.astype(np.float64).mean())
        / np.sqrt(ret.astype(np.float64).var() + 1e-8),
        -5,
        5,
    )
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y, exp, rtol=tol, atol=tol)
    # update=False: the statistics stay; no clip: denormalize is the inverse
    y2 = normalize_returns(ret, rms, update=False, clip=None, out=np.empty_like(ret))
    assert rms.count == ret.size
    back = denormalize_values(y2, rms)
    np.testing.assert_allclose(back, ret, rtol=tol * 10)


def test_normalize_returns_valid_mask_and_out() -> None:
    rms = RunningMeanStd()
    ret = np.array([[1.0, 1e9], [3.0, 5.0]])
    valid = np.array([[True, False], [True, True]])
    out = np.empty_like(ret)
    res = normalize_returns(ret, rms, valid=valid, out=out)
    assert np.shares_memory(res, out) and rms.count == 3
    assert rms.mean == pytest.approx(3.0)
    assert res[0, 1] == 5.0  # clipped to [-5, 5]


# -- errors: one test per rule ----------------------------------------------------------
def test_error_shape_type() -> None:
    with pytest.raises(TypeError, match=r"RunningMeanStd: shape must be a tuple of ints, got"):
        RunningMeanStd((2.0,))


def test_error_shape_negative() -> None:
    with pytest.raises(ValueError, match=r"RunningMeanStd: shape must be non-negative"):
        RunningMeanStd((-1,))


@pytest.mark.parametrize("eps", [0.0, -1.0, float("inf"), float("nan")])
def test_error_epsilon_range(eps) -> None:
    with pytest.raises(ValueError, match=r"RunningMeanStd: epsilon must be in \(0, inf\), got"):
        RunningMeanStd(epsilon=eps)


def test_error_batch_dtype() -> None:
    with pytest.raises(
        TypeError, match=r"RunningMeanStd.update: batch must be float32 or float64, got dtype int64"
    ):
        RunningMeanStd().update(np.arange(3))


def test_error_batch_trailing_shape() -> None:
    rms = RunningMeanStd((3,))
    with pytest.raises(
        ValueError, match=r"RunningMeanStd.update: batch must be shape .* got shape \(4, 2\)"
    ):
        rms.update(np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"got shape \(\)"):
        rms.update(np.float64(1.0))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_error_non_finite_batch_leaves_state(bad, update_path) -> None:
    rms = RunningMeanStd((2,))
    rms.update(np.ones((3, 2)))
    x = np.zeros((4, 2))
    x[2, 1] = bad
    with pytest.raises(
        ValueError, match=r"RunningMeanStd.update: batch must be finite, got .* at index \(2, 1\)"
    ):
        rms.update(x)
    assert rms.count == 3
    np.testing.assert_array_equal(rms.mean, 1.0)
    big = np.zeros((5000, 2))
    big[-1, 0] = bad
    with pytest.raises(ValueError, match=r"must be finite, got .* at index \(4999, 0\)"):
        rms.update(big)
    assert rms.count == 3


def test_error_overflowing_batch() -> None:
    rms = RunningMeanStd()
    with pytest.raises(
        ValueError, match=r"RunningMeanStd.update: batch must be values whose squares fit"
    ):
        rms.update(np.array([1e300, -1e300]))
    assert rms.count == 0


def test_error_valid_shape_and_type() -> None:
    rms = RunningMeanStd((2,))
    with pytest.raises(
        ValueError, match=r"RunningMeanStd.update: valid must be shape \(3,\), got shape \(2,\)"
    ):
        rms.update(np.zeros((3, 2)), valid=np.ones(2, bool))
    with pytest.raises(
        TypeError, match=r"RunningMeanStd.update: valid must be bool, uint8 or float 0/1"
    ):
        rms.update(np.zeros((3, 2)), valid=np.ones(3, np.int32))
    assert rms.count == 0


def test_error_merge_type_and_shape() -> None:
    with pytest.raises(
        TypeError, match=r"RunningMeanStd.merge: other must be a RunningMeanStd, got dict"
    ):
        RunningMeanStd().merge({})
    with pytest.raises(
        ValueError,
        match=r"RunningMeanStd.merge: other must be a RunningMeanStd of shape \(\), got shape",
    ):
        RunningMeanStd().merge(RunningMeanStd((2,)))


@pytest.mark.parametrize("clip", [0.0, -1.0])
def test_error_clip_positive(clip) -> None:
    with pytest.raises(
        ValueError, match=r"RunningMeanStd.normalize: clip must be in \(0, inf\], got"
    ):
        RunningMeanStd().normalize(np.zeros(3), clip=clip)


def test_error_normalize_out() -> None:
    rms = RunningMeanStd()
    x = np.zeros(3)
    with pytest.raises(
        TypeError, match=r"RunningMeanStd.normalize: out must be dtype float64, got dtype float32"
    ):
        rms.normalize(x, out=np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"out must be shape \(3,\), got shape \(4,\)"):
        rms.normalize(x, out=np.zeros(4))
    ro = np.zeros(3)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"out must be writeable"):
        rms.denormalize(x, out=ro)
    with pytest.raises(ValueError, match=r"out must be not to overlap the input 'x'"):
        rms.normalize(x, out=x)


def test_error_normalize_input() -> None:
    with pytest.raises(TypeError, match=r"RunningMeanStd.normalize: x must be float32 or float64"):
        RunningMeanStd().normalize([1, 2])
    with pytest.raises(ValueError, match=r"RunningMeanStd.denormalize: y must be shape"):
        RunningMeanStd((2,)).denormalize(np.zeros(3))


def test_error_state_dict() -> None:
    good = RunningMeanStd((2,)).state_dict()
    with pytest.raises(TypeError, match=r"from_state_dict: d must be a mapping"):
        RunningMeanStd.from_state_dict([1])
    with pytest.raises(
        ValueError, match=r"from_state_dict: d must be a mapping .* missing \['count'\]"
    ):
        RunningMeanStd.from_state_dict({k: v for k, v in good.items() if k != "count"})
    with pytest.raises(TypeError, match=r"from_state_dict: count must be an int, got 3.0"):
        RunningMeanStd.from_state_dict({**good, "count": 3.0})
    with pytest.raises(ValueError, match=r"from_state_dict: count must be >= 0"):
        RunningMeanStd.from_state_dict({**good, "count": -1})
    with pytest.raises(ValueError, match=r"from_state_dict: mean must be 2 real numbers"):
        RunningMeanStd.from_state_dict({**good, "mean": [1.0]})
    with pytest.raises(ValueError, match=r"from_state_dict: var must be >= 0"):
        RunningMeanStd.from_state_dict({**good, "var": [1.0, -1.0]})
    with pytest.raises(ValueError, match=r"from_state_dict: mean must be finite"):
        RunningMeanStd.from_state_dict({**good, "mean": [1.0, float("nan")]})


def test_error_return_normalizer_construction() -> None:
    with pytest.raises(TypeError, match=r"ReturnNormalizer: n_envs must be an int, got 2.0"):
        ReturnNormalizer(2.0)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"ReturnNormalizer: n_envs must be in \[1, 67108864\], got 0"
    ):
        ReturnNormalizer(0)
    with pytest.raises(ValueError, match=r"ReturnNormalizer: gamma must be in \[0, 1\], got 1.5"):
        ReturnNormalizer(2, gamma=1.5)
    with pytest.raises(ValueError, match=r"ReturnNormalizer: clip must be in \(0, inf\]"):
        ReturnNormalizer(2, clip=0.0)


def test_error_return_normalizer_inputs_leave_state() -> None:
    rn = ReturnNormalizer(3)
    f = np.zeros(3, bool)
    with pytest.raises(
        ValueError,
        match=r"normalize: rewards must be shape \[3\] or \[T, 3\], got shape \(4,\)",
    ):
        rn.normalize(np.zeros(4), f, f)
    with pytest.raises(
        TypeError, match=r"ReturnNormalizer.normalize: rewards must be float32 or float64"
    ):
        rn.normalize(np.zeros(3, np.int64), f, f)
    with pytest.raises(
        ValueError, match=r"ReturnNormalizer.normalize: truncated must be shape \(3,\)"
    ):
        rn.normalize(np.zeros(3), f, np.zeros(2, bool))
    with pytest.raises(
        ValueError, match=r"ReturnNormalizer.normalize: terminated must be 0/1 flags"
    ):
        rn.normalize(np.zeros(3), np.array([0.0, 0.5, 1.0]), f)
    with pytest.raises(
        ValueError,
        match=r"ReturnNormalizer.normalize: rewards must be finite, got .*nan.* at index 1",
    ):
        rn.normalize(np.array([1.0, np.nan, 2.0]), f, f)
    with pytest.raises(ValueError, match=r"ReturnNormalizer.normalize: out must be shape"):
        rn.normalize(np.ones(3), f, f, out=np.empty(2))
    assert rn.rms.count == 0
    np.testing.assert_array_equal(rn.returns, 0.0)


def test_error_normalize_returns_arguments_leave_rms() -> None:
    rms = RunningMeanStd()
    r = np.ones(4)
    with pytest.raises(
        TypeError, match=r"normalize_returns: rms must be a RunningMeanStd, got dict"
    ):
        normalize_returns(r, {})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"normalize_returns: update must be a bool, got 1"):
        normalize_returns(r, rms, update=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"normalize_returns: clip must be in \(0, inf\]"):
        normalize_returns(r, rms, clip=-5.0)
    with pytest.raises(TypeError, match=r"normalize_returns: out must be dtype float64"):
        normalize_returns(r, rms, out=np.empty(4, np.float32))
    with pytest.raises(ValueError, match=r"normalize_returns: returns must be shape"):
        normalize_returns(r, RunningMeanStd((2,)))
    assert rms.count == 0
    with pytest.raises(TypeError, match=r"denormalize_values: rms must be a RunningMeanStd"):
        denormalize_values(r, None)  # type: ignore[arg-type]


# -- packaging ------------------------------------------------------------------------
def test_missing_extension_is_an_import_error_naming_the_build() -> None:
    code = (
        "import sys; sys.modules['fastppo._cy._stats'] = None\n"
        "try:\n    import fastppo.stats\nexcept ImportError as e:\n    print(e)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install -e ." in res.stdout


def test_exports() -> None:
    for name in ("RunningMeanStd", "ReturnNormalizer", "normalize_returns", "denormalize_values"):
        assert getattr(fastppo, name) is getattr(fastppo.stats, name)


# -- variance overflow: an error, never var = inf or 0 (issue 13, class 7) ----------
@pytest.mark.parametrize("path", ["serial", "parallel"])
def test_update_whose_merge_overflows_raises_and_leaves_state(path, monkeypatch) -> None:
    from fastppo import _dispatch

    if path == "parallel":
        monkeypatch.setattr(_dispatch, "PARALLEL_MIN_STATS", 0)
    rms = RunningMeanStd((2,))
    rms.update(np.array([[1e300, 1.0], [1e300, 2.0]]))
    state = (rms.mean.copy(), rms.var.copy(), rms.count)
    with pytest.raises(
        ValueError,
        match=r"RunningMeanStd.update: batch must be values whose merge with the running state "
        r"keeps the variance finite, .*the state is unchanged",
    ):
        rms.update(np.array([[-1e300, 1.0], [-1e300, 3.0]]))
    np.testing.assert_array_equal(rms.mean, state[0])
    np.testing.assert_array_equal(rms.var, state[1])
    assert rms.count == state[2]
    rms.update(np.array([[1e300, 5.0]]))  # a batch that does fit still folds in
    assert rms.count == 3 and np.isfinite(rms.var).all()


def test_merge_whose_variance_overflows_raises_and_leaves_state() -> None:
    a, b = RunningMeanStd((1,)), RunningMeanStd((1,))
    a.update(np.full((2, 1), 1e300))
    b.update(np.full((2, 1), -1e300))
    with pytest.raises(
        ValueError,
        match=r"RunningMeanStd.merge: other must be a state whose merge with this one has a "
        r"variance that fits in float64, got means 1e\+300 and -1e\+300 at feature 0",
    ):
        a.merge(b)
    assert a.count == 2 and a.mean[0] == 1e300 and a.var[0] == 0.0


@pytest.mark.parametrize("dtype", FLOATS)
def test_return_normalizer_refuses_returns_beyond_the_limit(dtype) -> None:
    limit = cy_stats.RETURN_LIMIT
    assert limit == 1e150
    rn = ReturnNormalizer(2, gamma=0.99)
    f = np.zeros(2, bool)
    rn.normalize(np.array([1.0, -1.0], dtype), f, f)
    state = rn.state_dict()
    big = np.array([1e151, -1e151]) if dtype == np.float64 else np.array([3e38, 1.0], dtype)
    out = np.full(2, 7.0, dtype)
    if dtype == np.float32:  # float32 rewards cannot reach the limit: they pass
        rn.normalize(big, f, f, out=out)
        assert np.isfinite(rn.rms.var)
        return
    for block in (big, np.stack([big, big])):
        o = np.full(block.shape, 7.0, dtype)
        with pytest.raises(
            ValueError,
            match=r"ReturnNormalizer.normalize: rewards must be rewards whose discounted returns "
            r"stay below 1e\+150 in magnitude .*state and out are unchanged",
        ):
            rn.normalize(block, np.zeros(block.shape, bool), np.zeros(block.shape, bool), out=o)
        assert (o == 7.0).all()
        assert rn.state_dict() == state
    # a step's returns just inside the bound fold in with a finite variance
    rn.normalize(np.array([1e149, -1e149]), f, f, out=out)
    assert np.isfinite(rn.rms.var) and rn.rms.var > 0


def test_return_normalizer_out_may_not_alias_a_flag_array() -> None:
    """Found by the fuzz suite: out aliasing terminated was accepted and overwrote it."""
    rn = ReturnNormalizer(3)
    buf = np.zeros(3, np.float32)
    for kw in ({"terminated": buf}, {"truncated": buf}, {"valid": buf.view(np.uint8)[:3]}):
        args = {"terminated": np.zeros(3, bool), "truncated": np.zeros(3, bool), **kw}
        with pytest.raises(
            ValueError, match=r"ReturnNormalizer\.normalize: out must be not to overlap"
        ):
            rn.normalize(np.ones(3, np.float32), out=buf, **args)
    assert rn.rms.count == 0 and (buf == 0).all()


def test_normalize_returns_errors_name_it_and_its_argument() -> None:
    with pytest.raises(ValueError, match=r"^normalize_returns: returns must be finite"):
        normalize_returns(np.array([1.0, np.inf]), RunningMeanStd())
