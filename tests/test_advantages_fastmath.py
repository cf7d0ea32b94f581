"""The vectorised float32 exp behind the V-trace ratios, and V-trace on its float32 path."""

from __future__ import annotations

import numpy as np
import pytest

import fastppo
from fastppo._jit import kernel
from fastppo.kernels import vtrace as K
from fastppo.kernels.fastmath import expf32
from fastppo.reference import advantages as R


@kernel("void(f4_1, f4_1w)")
def _expf32_array(x, out):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        out[i] = expf32(x[i])


def _expf32(x: np.ndarray) -> np.ndarray:
    """expf32 as V-trace runs it (its ratio row: ``expf32_fma``, fused
    multiply-adds) and as plain IEEE operations; both must meet the
    documented bound."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    K._vt_rho_row(x, np.zeros_like(x), True, out)
    plain = np.empty_like(x)
    _expf32_array(x, plain)
    both = np.isfinite(out) & np.isfinite(plain) & (plain != 0)
    np.testing.assert_allclose(out[both], plain[both], rtol=2.5e-7, atol=2.0**-149)
    np.testing.assert_array_equal(out[~both], plain[~both])
    return out


def test_expf32_relative_error_over_the_normal_range() -> None:
    # The module docstring quotes this bound (an exhaustive scan of every
    # float32 in the range gave the same 1.2e-7, at 1 ulp of the result).
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.uniform(-87.29, 88.376, 2_000_000),
            np.linspace(-87.29, 88.376, 200_001),
            [0.0, -0.0, 1e-30, -1e-30, 0.34657359, -0.34657359],
        ]
    ).astype(np.float32)
    got = _expf32(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got - ref) / ref) <= 1.25e-7
    assert _expf32(np.zeros(1))[0] == 1.0


def test_vtrace_ratios_are_fused_and_the_plain_exp_is_not() -> None:
    # expf32_fma rounds differently from expf32 somewhere (so it is fused),
    # and expf32 keeps the bits of its numpy twin (the samplers' references)
    from fastppo.reference.fastmath import expf32 as ref_expf32

    x = np.random.default_rng(1).uniform(-80, 80, 200_000).astype(np.float32)
    fused = np.empty_like(x)
    K._vt_rho_row(x, np.zeros_like(x), True, fused)
    plain = np.empty_like(x)
    _expf32_array(x, plain)
    assert not np.array_equal(fused, plain)
    assert ref_expf32(x).tobytes() == plain.tobytes()


def test_expf32_range_ends() -> None:
    big = np.array([88.3763, 88.8, 89.0, 100.0, 3e38, np.inf], np.float32)
    assert np.all(np.isposinf(_expf32(big)))
    near_hi = np.float32(88.3762)  # k = 127: 2.4e38, the largest finite result
    got = float(_expf32(np.array([near_hi]))[0])
    assert got == pytest.approx(np.exp(np.float64(near_hi)), rel=1.25e-7)
    # results below 1.3e-38 are flushed to zero: no subnormal is ever computed
    tiny = np.array([-87.3, -87.31, -104.0, -200.0, -3e38, -np.inf], np.float32)
    assert np.all(_expf32(tiny) == 0.0)
    low = np.float32(-87.29)
    assert float(_expf32(np.array([low]))[0]) == pytest.approx(np.exp(np.float64(low)), rel=1.25e-7)


@pytest.fixture(params=["serial", "parallel"])
def mode(request, force_parallel_sweeps):
    if request.param == "parallel":
        force_parallel_sweeps(1)
    return request.param


@pytest.mark.parametrize("scale", [0.1, 3.0, 30.0])
def test_vtrace_float32_logp_against_reference(mode, scale) -> None:
    # float32 log-probs and values take the expf32 path; wide log-ratios
    # exercise clipping on both sides of rho = 1.
    rng = np.random.default_rng(int(scale * 10))
    T, N = 70, 37
    r = rng.standard_normal((T, N)).astype(np.float32)
    v = rng.standard_normal((T, N)).astype(np.float32)
    lv = rng.standard_normal(N).astype(np.float32)
    te = rng.random((T, N)) < 0.05
    tr = (rng.random((T, N)) < 0.05) & ~te
    valid = fastppo.next_step_valid(te, tr)
    blp = (rng.standard_normal((T, N)) * scale).astype(np.float32)
    tlp = (rng.standard_normal((T, N)) * scale).astype(np.float32)
    kw = dict(gamma=0.97, lam=0.9, rho_bar=1.3, c_bar=0.9, pg_rho_bar=2.0)
    vs, pg = fastppo.vtrace(blp, tlp, r, v, lv, te, tr, valid=valid, **kw)
    vs_ref, pg_ref = R.vtrace(blp, tlp, r, v, lv, te, tr, valid=valid, **kw)
    np.testing.assert_allclose(vs, vs_ref, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(pg, pg_ref, rtol=2e-5, atol=2e-5)


def test_vtrace_huge_log_ratio_stays_finite_with_finite_thresholds(mode) -> None:
    # rho = exp(200) overflows to +inf in float32; clipped by finite
    # thresholds it is harmless, and a cut trace never multiplies it by 0.
    T, N = 5, 3
    r = np.ones((T, N), np.float32)
    v = np.zeros((T, N), np.float32)
    lv = np.zeros(N, np.float32)
    te = np.zeros((T, N), bool)
    te[2] = True
    blp = np.zeros((T, N), np.float32)
    tlp = np.zeros((T, N), np.float32)
    tlp[1] = 200.0
    tlp[3] = -200.0
    vs, pg = fastppo.vtrace(blp, tlp, r, v, lv, te, gamma=0.5)
    vs_ref, pg_ref = R.vtrace(blp, tlp, r, v, lv, te, gamma=0.5)
    assert np.all(np.isfinite(vs)) and np.all(np.isfinite(pg))
    np.testing.assert_allclose(vs, vs_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(pg, pg_ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("first", ["rewards", "values"])
def test_reported_input_does_not_depend_on_the_split(mode, first) -> None:
    # Two bad inputs in different row ranges: the lowest status code wins
    # (rewards before values), whichever part of the rows each one is in.
    rng = np.random.default_rng(9)
    T, N = 64, 48
    r = rng.standard_normal((T, N)).astype(np.float32)
    v = rng.standard_normal((T, N)).astype(np.float32)
    lv = np.zeros(N, np.float32)
    te = np.zeros((T, N), bool)
    rows = (0, T - 1) if first == "values" else (T - 1, 0)
    r[rows[0], 5] = np.nan
    v[rows[1], 7] = np.inf
    out = (np.full_like(r, 7.0), np.full_like(r, 7.0))
    with pytest.raises(ValueError, match="gae: rewards must be finite"):
        fastppo.gae(r, v, lv, te, out=out)
    assert np.all(out[0] == 7.0) and np.all(out[1] == 7.0)
    with pytest.raises(ValueError, match="vtrace: rewards must be finite"):
        fastppo.vtrace(v, v, r, v, lv, te, out=out)
    assert np.all(out[0] == 7.0) and np.all(out[1] == 7.0)
