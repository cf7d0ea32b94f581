"""Array samplers: exact agreement with the numpy reference, invariances, errors."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import special

import fastppo
from fastppo import _dispatch
from fastppo import sampling as S
from fastppo._cy._fast import same_rows
from fastppo.kernels import categorical as K
from fastppo.kernels import gaussian as KG
from fastppo.kernels.chunks import CHUNK
from fastppo.kernels.squash import A_LIMIT
from fastppo.reference import rng as rrng
from fastppo.reference import sampling as R
from fastppo.sampling import _common

ROOT = Path(__file__).resolve().parents[1]


def _logits(n: int, a: int, dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((n, a)) * 2).astype(dtype)


def _mask(n: int, a: int, seed: int = 1) -> np.ndarray:
    m = np.random.default_rng(seed).random((n, a)) > 0.4
    m[np.arange(n), np.random.default_rng(seed + 1).integers(0, a, n)] = True
    return m


# ---------------------------------------------------------------- expf32


def test_expf32_kernel_equals_reference_bitwise_and_is_accurate() -> None:
    """The one float32 exp (samplers and V-trace) == its numpy twin, bit for bit."""
    from fastppo.kernels.fastmath import expf32, expf32_nonpos
    from fastppo.reference.fastmath import expf32 as ref_expf32

    ends = [0.0, -0.0, -1e-30, -86.99, -87.0, -87.5, -103.9, -104.0, -np.inf, np.inf]
    x = np.concatenate([-np.linspace(0, 110, 200_001), np.linspace(0, 90, 20_001), ends]).astype(
        np.float32
    )

    @fastppo._jit.kernel("void(f4_1, f4_1w)")
    def run(x, out):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            out[i] = expf32(x[i])

    got = np.empty_like(x)
    run(x, got)
    np.testing.assert_array_equal(got.view(np.int32), ref_expf32(x).view(np.int32))

    @fastppo._jit.kernel("void(f4_1, f4_1w)")
    def run_nonpos(x, out):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            out[i] = expf32_nonpos(x[i])

    neg = x[x <= 0]
    got_neg = np.empty_like(neg)
    run_nonpos(neg, got_neg)  # the samplers' entry: the same bits for x <= 0
    np.testing.assert_array_equal(got_neg.view(np.int32), got[x <= 0].view(np.int32))
    normal = (x > -87.3) & (x < 88.376)
    exact = np.exp(x[normal].astype(np.float64))
    ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got[normal] - exact) / ulp) <= 1.0
    assert np.all(got[x <= -87.3] == 0.0) and np.all(np.isposinf(got[x >= 88.3763]))
    assert got[x == 0][0] == 1.0


# ---------------------------------------------------------------- hand-worked


def test_hand_worked_two_equal_allowed_actions() -> None:
    """logits [0, -inf, 0]: action 0 when u < 1/2, else 2; logp = log(1/2)."""
    logits = np.array([[0.0, -np.inf, 0.0]] * 6, dtype=np.float32)
    act, logp = S.sample_categorical(logits, seed=3, counter=9)
    u = rrng.env_uniforms(3, 9, 6, 1)[:, 0]
    np.testing.assert_array_equal(act, np.where(u < 0.5, 0, 2))
    np.testing.assert_allclose(logp, np.log(0.5), rtol=1e-7)


def test_hand_worked_inverse_cdf_thresholds() -> None:
    """probs [0.25, 0.25, 0.5]: the uniform picks the bucket its cumulative sum falls in."""
    logits = np.log(np.array([[1.0, 1.0, 2.0]] * 40, dtype=np.float64))
    act, logp = S.sample_categorical(logits, seed=5, counter=0)
    u = rrng.env_uniforms(5, 0, 40, 1)[:, 0]
    np.testing.assert_array_equal(act, np.digitize(u, [0.25, 0.5]))
    np.testing.assert_allclose(logp, np.log([0.25, 0.25, 0.5])[act], rtol=1e-6)


def test_deterministic_is_first_argmax_of_allowed() -> None:
    logits = np.array([[1.0, 3.0, 3.0, 5.0], [2.0, 2.0, 0.0, -np.inf]], dtype=np.float32)
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool)
    act, logp = S.sample_categorical(logits, mask, seed=0, counter=0, deterministic=True)
    np.testing.assert_array_equal(act, [1, 0])
    ref = special.log_softmax(np.where(mask, logits, -np.inf).astype(np.float64), axis=1)
    np.testing.assert_allclose(logp, ref[[0, 1], act], rtol=1e-6)


def test_single_action_has_logp_zero() -> None:
    act, logp = S.sample_categorical(np.zeros((4, 1), np.float32), seed=1, counter=1)
    np.testing.assert_array_equal(act, 0)
    np.testing.assert_array_equal(logp, 0.0)


def test_zero_envs() -> None:
    act, logp = S.sample_categorical(np.zeros((0, 3), np.float32), seed=1, counter=1)
    assert act.shape == (0,) and logp.shape == (0,)


# ---------------------------------------------------------------- reference agreement


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(("n", "a"), [(1, 1), (1, 4), (37, 3), (300, 18)])
@pytest.mark.parametrize("deterministic", [False, True])
def test_categorical_equals_reference(
    dtype: type, masked: bool, n: int, a: int, deterministic: bool
) -> None:
    x = _logits(n, a, dtype)
    m = _mask(n, a) if masked else None
    act, logp = S.sample_categorical(x, m, seed=2**63 + 5, counter=77, deterministic=deterministic)
    ra, rl = R.sample_categorical(x, m, 2**63 + 5, 77, deterministic=deterministic)
    np.testing.assert_array_equal(act, ra)
    np.testing.assert_allclose(logp, rl, rtol=1e-6, atol=1e-6)
    assert act.dtype == np.int64 and logp.dtype == np.float32


def test_logp_matches_independent_log_softmax() -> None:
    x = _logits(500, 7, np.float64, seed=3)
    m = _mask(500, 7, seed=4)
    act, logp = S.sample_categorical(x, m, seed=1, counter=2)
    assert np.all(m[np.arange(500), act])
    ref = special.log_softmax(np.where(m, x, -np.inf), axis=1)[np.arange(500), act]
    np.testing.assert_allclose(logp, ref, rtol=2e-6, atol=2e-6)


def test_minus_inf_logits_act_as_mask() -> None:
    x = _logits(200, 6)
    m = _mask(200, 6)
    a1, l1 = S.sample_categorical(x, m, seed=9, counter=1)
    a2, l2 = S.sample_categorical(np.where(m, x, -np.inf).astype(np.float32), seed=9, counter=1)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(l1, l2)


def test_masked_actions_never_sampled() -> None:
    n, a = 4000, 5
    x = np.zeros((n, a), np.float32)
    x[:, 4] = 30.0  # would dominate if it were not masked
    m = np.ones((n, a), bool)
    m[:, 4] = False
    m[:, 0] = np.arange(n) % 2 == 0
    act, logp = S.sample_categorical(x, m.astype(np.uint8), seed=2, counter=3)
    assert np.all(m[np.arange(n), act])
    assert np.all(np.isfinite(logp))


def test_rounding_fallback_picks_last_positive_weight_action() -> None:
    """If u * s reached the total, the draw falls back to the last allowed action, never
    a trailing masked one (u = 1 is outside the generator's range, so this is forced)."""
    # one row in a chunk tile: R[j * CHUNK] is action j's logit
    R = np.full(4 * CHUNK, -np.inf, dtype=np.float32)
    R[0], R[CHUNK] = 0.0, -1.0
    M = np.zeros(CHUNK, dtype=np.float32)
    E = np.empty(4 * CHUNK, dtype=np.float32)
    S, C, T = (np.empty(CHUNK) for _ in range(3))
    A = np.empty(CHUNK, dtype=np.int64)
    for u in (1.0, 1.0 - 2.0**-53):
        K._chunk_draw(4, 1, np.full(CHUNK, u), False, R, E, M, S, C, T, A)
        assert A[0] == 1
        lp = np.float64(R[A[0] * CHUNK] - M[0]) - T[0]
        assert lp == pytest.approx(-1.0 - math.log(1.0 + math.exp(-1.0)), rel=1e-6)


def test_multi_categorical_equals_reference_and_single_dim_equals_categorical() -> None:
    nvec = [3, 1, 5, 2]
    x = _logits(150, sum(nvec), seed=7)
    m = np.ones_like(x, dtype=bool)
    m[:, 0] = False
    m[:, 6] = False
    for deterministic in (False, True):
        act, logp = S.sample_multi_categorical(
            x, nvec, m, seed=4, counter=8, deterministic=deterministic
        )
        ra, rl = R.sample_multi_categorical(x, nvec, m, 4, 8, deterministic=deterministic)
        np.testing.assert_array_equal(act, ra)
        np.testing.assert_allclose(logp, rl, rtol=1e-6, atol=1e-6)
    assert act.shape == (150, 4)
    assert np.all(act[:, 0] != 0) and np.all(act < np.array(nvec))
    a1, l1 = S.sample_multi_categorical(x, [x.shape[1]], seed=4, counter=8)
    a2, l2 = S.sample_categorical(x, seed=4, counter=8)
    np.testing.assert_array_equal(a1[:, 0], a2)
    np.testing.assert_array_equal(l1, l2)
    # logp is the sum of the dimensions' log-softmax
    offs = np.cumsum([0, *nvec])
    xm = np.where(m, x, -np.inf).astype(np.float64)
    act, logp = S.sample_multi_categorical(x, np.array(nvec), m, seed=4, counter=9)
    ref = sum(
        special.log_softmax(xm[:, offs[d] : offs[d + 1]], axis=1)[np.arange(150), act[:, d]]
        for d in range(4)
    )
    np.testing.assert_allclose(logp, ref, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("squash", [False, True])
@pytest.mark.parametrize("deterministic", [False, True])
def test_gaussian_equals_reference(
    dtype: type, shared: bool, squash: bool, deterministic: bool
) -> None:
    n, a = 64, 5
    g = np.random.default_rng(2)
    mean = g.standard_normal((n, a)).astype(dtype)
    ls = (g.standard_normal(a if shared else (n, a)) * 0.5).astype(dtype)
    act, logp = S.sample_gaussian(
        mean, ls, seed=11, counter=2**33, squash=squash, deterministic=deterministic
    )
    ra, rl = R.sample_gaussian(mean, ls, 11, 2**33, squash=squash, deterministic=deterministic)
    # Same C-library calls in the same order: bit-identical on one platform;
    # allow one float32 ulp should a libm differ between kernel and Python.
    np.testing.assert_allclose(act, ra, rtol=2e-7, atol=1e-7)
    np.testing.assert_allclose(logp, rl, rtol=1e-6, atol=1e-6)
    assert act.dtype == np.float32 and logp.dtype == np.float32


def test_gaussian_deterministic_is_the_mode() -> None:
    mean = np.array([[0.5, -2.0], [3.0, 0.0]], np.float32)
    ls = np.array([0.1, -0.3], np.float32)
    act, logp = S.sample_gaussian(mean, ls, seed=0, counter=0, deterministic=True)
    np.testing.assert_array_equal(act, mean)
    np.testing.assert_allclose(logp, np.sum(-ls.astype(np.float64) - 0.5 * np.log(2 * np.pi)))
    act, logp = S.sample_gaussian(mean, ls, seed=0, counter=0, squash=True, deterministic=True)
    np.testing.assert_allclose(act, np.tanh(mean.astype(np.float64)), rtol=1e-6)
    # the density of the float32 action returned (z is not exactly 0 after rounding)
    u = np.arctanh(act.astype(np.float64))
    z = (u - mean) / np.exp(ls.astype(np.float64))
    ref = np.sum(-0.5 * z * z - ls - 0.5 * np.log(2 * np.pi) - np.log1p(-(np.tanh(u) ** 2)), axis=1)
    np.testing.assert_allclose(logp, ref, rtol=1e-6)


def test_gaussian_logp_matches_scipy_and_squash_correction_is_stable() -> None:
    from scipy import stats

    n, a = 400, 3
    mean = np.zeros((n, a), np.float64)
    mean[:, 0] = 12.0  # tanh(u) rounds to 1 in float32: the correction must stay finite
    ls = np.array([0.0, -1.0, 0.5])
    act, logp = S.sample_gaussian(mean, ls, seed=1, counter=1)
    ref = stats.norm.logpdf(act.astype(np.float64), mean, np.exp(ls)).sum(axis=1)
    np.testing.assert_allclose(logp, ref, rtol=1e-5, atol=1e-4)  # actions rounded to float32
    sq, slogp = S.sample_gaussian(mean, ls, seed=1, counter=1, squash=True)
    assert np.all(np.isfinite(slogp)) and np.all(np.abs(sq) <= 1)
    u = R.sample_gaussian(mean, ls, 1, 1)[0].astype(np.float64)
    mid = np.abs(u).max(axis=1) < 5  # where float64 log1p(-tanh^2) is still accurate
    direct = logp.astype(np.float64) - np.log1p(-(np.tanh(u) ** 2)).sum(axis=1)
    np.testing.assert_allclose(slogp[mid], direct[mid], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- invariances


def test_slices_with_env_offset_equal_whole_batch() -> None:
    x = _logits(100, 6)
    m = _mask(100, 6)
    a, lp = S.sample_categorical(x, m, seed=21, counter=5)
    parts = [
        S.sample_categorical(x[i:j], m[i:j], seed=21, counter=5, env_offset=i)
        for i, j in [(0, 1), (1, 40), (40, 100)]
    ]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), a)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), lp)
    mean = _logits(100, 3)
    ga, gl = S.sample_gaussian(mean, np.zeros(3, np.float32), seed=2, counter=3)
    gp = [
        S.sample_gaussian(mean[i:j], np.zeros(3, np.float32), seed=2, counter=3, env_offset=i)
        for i, j in [(0, 33), (33, 100)]
    ]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in gp]), ga)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in gp]), gl)
    ma, ml = S.sample_multi_categorical(x, [2, 4], seed=1, counter=1)
    mp = [S.sample_multi_categorical(x[i:], [2, 4], seed=1, counter=1, env_offset=i) for i in [7]]
    np.testing.assert_array_equal(mp[0][0], ma[7:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nvec", [[3, 1, 5, 2], [9, 12], [1, 1, 1]])
def test_multi_categorical_chunks_equal_reference_and_find_a_dead_dimension(dtype, nvec) -> None:
    # 200 rows: three full chunks of 64 and a partial one; a total width above
    # 8 takes the chunk loader's one-pass path, at most 8 its two-pass path
    n, w = 200, sum(nvec)
    x = _logits(n, w, dtype, seed=11)
    m = _mask(n, w, seed=12)
    offs = np.cumsum([0, *nvec])
    for d in range(len(nvec)):
        m[:, offs[d]] = True  # every dimension keeps an allowed action
    for deterministic in (False, True):
        act, logp = S.sample_multi_categorical(
            x, nvec, m, seed=3, counter=5, deterministic=deterministic
        )
        ra, rl = R.sample_multi_categorical(x, nvec, m, 3, 5, deterministic=deterministic)
        np.testing.assert_array_equal(act, ra)
        np.testing.assert_allclose(logp, rl, rtol=1e-6, atol=1e-6)
    # the last dimension of row 150 (chunk 2) has no allowed action; row 170
    # has a NaN: the first bad env is named, and out= buffers stay untouched
    m[150, offs[-2] :] = False
    x[170, 0] = np.nan
    out = (np.full((n, len(nvec)), -7, np.int64), np.full(n, 9.0, np.float32))
    for kw in ({}, {"out": out}):
        with pytest.raises(ValueError, match="env 150"):
            S.sample_multi_categorical(x, nvec, m, seed=3, counter=5, **kw)
    assert np.all(out[0] == -7) and np.all(out[1] == 9.0)


def test_serial_and_parallel_builds_are_bit_identical() -> None:
    n, a = 1000, 9
    x = _logits(n, a)
    m = _mask(n, a)
    m[:, [0, 4]] = True  # every segment keeps an allowed action
    m = m.view(np.uint8)
    offs = np.array([0, 4, a], dtype=np.int64)
    outs = []
    for kern in K.multi_categorical:
        act = np.empty(n * 2, np.int64)
        lp = np.empty(n, np.float32)
        assert kern(x, 0, m, True, offs, (1, 2, 3, 4, 5), False, True, _common._P32, act, lp) == -1
        outs.append((act, lp))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    gouts = []
    for kern in KG.gaussian:
        act = np.empty((n, a), np.float32)
        lp = np.empty(n, np.float32)
        kern(x, 0, x, 0, a, 0, False, (1, 2, 3, 4, 5), True, False, act, lp)
        gouts.append((act, lp))
    np.testing.assert_array_equal(gouts[0][0], gouts[1][0])
    np.testing.assert_array_equal(gouts[0][1], gouts[1][1])


def test_public_parallel_path_equals_serial_build_and_reference() -> None:
    n, a = _dispatch.PARALLEL_MIN_LOGITS // 8 + 3, 8  # above the threshold: the parallel build
    x = _logits(n, a, seed=5)
    m = _mask(n, a, seed=6)
    act, logp = S.sample_categorical(x, m, seed=8, counter=13)
    sa = np.empty(n, np.int64)
    sl = np.empty(n, np.float32)
    offs = np.array([0, a], np.int64)
    K.categorical_serial(
        x, 0, m.view(np.uint8), True, offs, (8, 0, 13, 0, 0), False, False, _common._P32, sa, sl
    )
    np.testing.assert_array_equal(act, sa)
    np.testing.assert_array_equal(logp, sl)
    ra, rl = R.sample_categorical(x[:300], m[:300], 8, 13)
    np.testing.assert_array_equal(act[:300], ra)
    np.testing.assert_allclose(logp[:300], rl, rtol=1e-6, atol=1e-6)


_THREAD_SCRIPT = """
import hashlib, json, numpy as np, numba
from fastppo import _dispatch, sampling as S
n = _dispatch.PARALLEL_MIN_LOGITS // 9 + 1  # large enough for the parallel builds
x = (np.random.default_rng(0).standard_normal((n, 9)) * 2).astype(np.float32)
m = np.random.default_rng(1).random((n, 9)) > 0.3
m[:, 0] = True
a, lp = S.sample_categorical(x, m, seed=99, counter=7)
g, gl = S.sample_gaussian(x[:, :4], np.zeros(4, np.float32), seed=99, counter=7)
h = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in dict(a=a, lp=lp, g=g, gl=gl).items()}
print(json.dumps({"threads": numba.get_num_threads(), "n": n, "a0": a[:50].tolist(), **h}))
"""


def _run_with_threads(k: int) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(k), PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", _THREAD_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_same_actions_with_one_or_two_numba_threads() -> None:
    one = _run_with_threads(1)
    two = _run_with_threads(2)
    assert one["threads"] == 1 and two["threads"] == 2
    for key in ("a", "lp", "g", "gl"):
        assert one[key] == two[key], key
    # and both equal this process's serial-build answer for the first rows
    n = one["n"]
    x = (np.random.default_rng(0).standard_normal((n, 9)) * 2).astype(np.float32)[:50]
    m = np.random.default_rng(1).random((n, 9))[:50] > 0.3
    m[:, 0] = True
    assert one["a0"] == S.sample_categorical(x, m, seed=99, counter=7)[0].tolist()


# ---------------------------------------------------------------- buffers and inputs


def test_out_buffers_are_used() -> None:
    x = _logits(20, 4)
    act = np.empty(20, np.int64)
    lp = np.empty(20, np.float32)
    ra, rl = S.sample_categorical(x, seed=1, counter=1, out=(act, lp))
    assert ra is act and rl is lp
    ref = S.sample_categorical(x, seed=1, counter=1)
    np.testing.assert_array_equal(act, ref[0])
    ga = np.empty((20, 4), np.float32)
    gl = np.empty(20, np.float32)
    r = S.sample_gaussian(x, x, seed=1, counter=1, out=(ga, gl))
    assert np.shares_memory(r[0], ga) and np.shares_memory(r[1], gl)
    ma = np.empty((20, 2), np.int64)
    r = S.sample_multi_categorical(x, [2, 2], seed=1, counter=1, out=(ma, gl))
    assert r[0] is ma


def test_nothing_written_to_out_when_a_row_is_bad() -> None:
    x = _logits(300, 4)
    x[299, 2] = np.nan  # the last row: a single-pass kernel would have written 299 rows
    act = np.full(300, -7, np.int64)
    lp = np.full(300, 9.0, np.float32)
    with pytest.raises(ValueError, match="env 299"):
        S.sample_categorical(x, seed=1, counter=1, out=(act, lp))
    assert np.all(act == -7) and np.all(lp == 9.0)
    m = np.ones((300, 4), bool)
    m[298] = False  # no allowed action in the second-to-last row
    with pytest.raises(ValueError, match="env 298"):
        S.sample_categorical(_logits(300, 4), m, seed=1, counter=1, out=(act, lp))
    assert np.all(act == -7) and np.all(lp == 9.0)
    mean = _logits(300, 2)
    mean[299, 1] = np.inf
    ga = np.full((300, 2), 5.0, np.float32)
    with pytest.raises(ValueError, match="env 299"):
        S.sample_gaussian(mean, np.zeros(2, np.float32), seed=1, counter=1, out=(ga, lp))
    assert np.all(ga == 5.0) and np.all(lp == 9.0)


def test_readonly_noncontiguous_inputs_accepted_and_not_modified() -> None:
    big = _logits(50, 12)
    x = big[:, ::2]  # strided view
    m = _mask(50, 6)
    m.flags.writeable = False
    before = (big.copy(), m.copy())
    a1, l1 = S.sample_categorical(x, m, seed=3, counter=4)
    a2, l2 = S.sample_categorical(np.ascontiguousarray(x), m.copy(), seed=3, counter=4)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_array_equal(l1, l2)
    ro = np.ascontiguousarray(x)
    ro.flags.writeable = False
    a3, _ = S.sample_categorical(ro, seed=3, counter=4, mask=m)
    np.testing.assert_array_equal(a3, a1)
    np.testing.assert_array_equal(big, before[0])
    np.testing.assert_array_equal(m, before[1])
    g1 = S.sample_gaussian(ro, ro[0], seed=1, counter=2)
    g2 = S.sample_gaussian(ro.copy(), ro[0].copy(), seed=1, counter=2)
    np.testing.assert_array_equal(g1[0], g2[0])


def test_lists_and_lazy_exports() -> None:
    act, logp = fastppo.sample_categorical([[0.0, 1.0]], seed=1, counter=1)
    assert act.shape == (1,)
    assert fastppo.sample_gaussian is S.sample_gaussian


# ---------------------------------------------------------------- training side


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_categorical_logp_entropy_matches_reference_and_sampler(dtype: type) -> None:
    x = _logits(300, 7, dtype)
    x[:, 3] = -np.inf
    m = _mask(300, 7)
    m[:, 5] = True
    act, slogp = S.sample_categorical(x, m, seed=1, counter=1)
    logp, ent = S.categorical_logp_entropy(x, act, m)
    rl, re_ = R.categorical_logp_entropy(x, act, m)
    assert logp.dtype == dtype and ent.dtype == dtype
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(logp, rl, rtol=tol, atol=tol)
    np.testing.assert_allclose(ent, re_, rtol=tol, atol=tol)
    assert np.all(np.isfinite(ent)) and np.all(ent >= 0)
    np.testing.assert_allclose(logp, slogp, rtol=2e-6, atol=2e-6)
    # entropy of a uniform over k allowed actions is log k
    u = np.zeros((2, 4), dtype)
    um = np.array([[1, 1, 0, 0], [1, 1, 1, 1]], bool)
    _, e2 = S.categorical_logp_entropy(u, np.array([0, 3]), um)
    np.testing.assert_allclose(e2, [np.log(2), np.log(4)], rtol=1e-6)


@pytest.mark.parametrize("squash", [False, True])
def test_gaussian_logp_entropy_matches_reference_and_sampler(squash: bool) -> None:
    from scipy import stats

    g = np.random.default_rng(5)
    mean = (g.standard_normal((200, 3)) * 0.5).astype(np.float32)
    ls = (g.standard_normal(3) * 0.2 - 0.5).astype(np.float32)
    act, slogp = S.sample_gaussian(mean, ls, seed=3, counter=3, squash=squash)
    logp, ent = S.gaussian_logp_entropy(mean, ls, act, squash=squash)
    rl, re_ = R.gaussian_logp_entropy(mean, ls, act, squash=squash)
    np.testing.assert_allclose(logp, rl, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ent, re_, rtol=1e-6)
    np.testing.assert_allclose(ent, stats.norm.entropy(0, np.exp(ls)).sum(), rtol=1e-5)
    ok = np.abs(act).max(axis=1) < 0.99  # atanh of a float32 near +-1 loses digits
    np.testing.assert_allclose(logp[ok], slogp[ok], rtol=1e-3, atol=1e-3)
    logp2, _ = S.gaussian_logp_entropy(mean, np.broadcast_to(ls, mean.shape), act, squash=squash)
    np.testing.assert_allclose(logp2, logp, rtol=1e-6)


def test_gaussian_logp_saturated_squash_is_finite() -> None:
    act = np.array([[1.0, -1.0]], np.float32)
    logp, _ = S.gaussian_logp_entropy(
        np.zeros((1, 2), np.float32), np.zeros(2, np.float32), act, squash=True
    )
    assert np.all(np.isfinite(logp))


# ---------------------------------------------------------------- errors


def _cat(x: object = None, **kw: object) -> object:
    x = _logits(3, 4) if x is None else x
    kw.setdefault("seed", 1)
    kw.setdefault("counter", 1)
    return S.sample_categorical(x, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"x": np.zeros((3, 4), np.int64)}, TypeError, "logits must be float32 or float64"),
        ({"x": np.zeros(4, np.float32)}, ValueError, r"logits must be 2-D"),
        ({"x": np.zeros((3, 0), np.float32)}, ValueError, r"logits must be \[N, A\] with A >= 1"),
        ({"mask": np.ones((3, 4), np.float32)}, TypeError, "mask must be bool, uint8 or int8"),
        ({"mask": np.ones((3, 5), bool)}, ValueError, r"mask must be shape \(3, 4\)"),
        ({"seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*64\)"),
        ({"seed": 2**64}, ValueError, "seed must be"),
        ({"seed": 1.0}, TypeError, "seed must be"),
        ({"seed": True}, TypeError, "seed must be"),
        ({"counter": -5}, ValueError, "counter must be"),
        ({"env_offset": -1}, ValueError, "env_offset must be"),
        ({"env_offset": 2**32 - 2}, ValueError, "env_offset must be"),
        ({"env_offset": 1.5}, TypeError, "env_offset must be"),
        ({"deterministic": 1}, TypeError, "deterministic must be a bool"),
        ({"out": np.zeros(3)}, TypeError, "out must be a tuple"),
        ({"out": (np.zeros(3, np.int32), np.zeros(3, np.float32))}, TypeError, r"out\[0\]"),
        ({"out": (np.zeros(3, np.int64), np.zeros(4, np.float32))}, ValueError, r"out\[1\]"),
        (
            {"out": (np.zeros(6, np.int64)[::2], np.zeros(3, np.float32))},
            ValueError,
            r"out\[0\] \(actions\) must be C-contiguous",
        ),
    ],
)
def test_categorical_argument_errors(kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match="sample_categorical: " + match):
        _cat(**kwargs)


def test_categorical_readonly_and_overlapping_out_rejected() -> None:
    lp = np.zeros(3, np.float32)
    act = np.zeros(3, np.int64)
    act.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        _cat(out=(act, lp))
    buf = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="non-overlapping"):
        _cat(out=(buf, buf.view(np.float32)[:3]))
    x = _logits(3, 4)
    with pytest.raises(ValueError, match="overlap the input"):
        S.sample_categorical(x, seed=1, counter=1, out=(np.zeros(3, np.int64), x.reshape(-1)[:3]))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_plus_inf_logit_names_the_env(bad: float) -> None:
    x = _logits(10, 4)
    x[6, 1] = bad
    with pytest.raises(
        ValueError,
        match=r"sample_categorical: logits must be free of NaN and \+inf.*env 6, action 1",
    ):
        _cat(x)
    with pytest.raises(ValueError, match=r"row 6 \(env 106\)"):
        _cat(x, env_offset=100)
    with pytest.raises(ValueError, match="env 6"):  # even under a mask
        m = np.ones((10, 4), bool)
        m[6, 1] = False
        _cat(x, mask=m)


def test_row_without_allowed_action_names_the_env() -> None:
    x = _logits(10, 4)
    m = np.ones((10, 4), bool)
    m[3] = False
    with pytest.raises(ValueError, match=r"sample_categorical: mask must be nonzero.*env 3"):
        _cat(x, mask=m)
    x[4] = -np.inf
    with pytest.raises(ValueError, match=r"logits must be finite for at least one action.*env 4"):
        _cat(x)
    m = np.ones((10, 4), bool)
    m[5, :2] = False
    x[5, 2:] = -np.inf
    with pytest.raises(ValueError, match="env 4"):  # first bad env wins
        _cat(x, mask=m)


def test_multi_categorical_errors() -> None:
    x = _logits(3, 5)
    with pytest.raises(ValueError, match=r"nvec must be to sum to logits\.shape"):
        S.sample_multi_categorical(x, [2, 2], seed=1, counter=1)
    with pytest.raises(ValueError, match=r"nvec must be a 1-D sequence of .* ints in \[1, 5\]"):
        S.sample_multi_categorical(x, [5, 0], seed=1, counter=1)
    with pytest.raises(TypeError, match="nvec must be a 1-D sequence"):
        S.sample_multi_categorical(x, [2.5, 2.5], seed=1, counter=1)
    with pytest.raises(TypeError, match="nvec must be a 1-D sequence"):
        S.sample_multi_categorical(x, [], seed=1, counter=1)


@pytest.mark.parametrize(
    "nvec",
    [
        [2**63 - 1, 2**63 - 1, 7],  # int64 sum wraps to 5 (was a SIGSEGV)
        np.array([2**64 - 1, 6], np.uint64),  # wraps to 5 as int64
        np.array([-1, 6], np.int64),
        [2**70, 1],  # beyond 64 bits
    ],
)
def test_multi_categorical_nvec_that_wraps_is_refused(nvec) -> None:
    x = _logits(3, 5)
    act, logp = np.full((3, 3), 7, np.int64), np.full(3, 7.0, np.float32)
    with pytest.raises(ValueError, match=r"sample_multi_categorical: nvec must be .* in \[1, 5\]"):
        S.sample_multi_categorical(x, nvec, seed=1, counter=1, out=(act[:, : len(nvec)], logp))
    assert (act == 7).all() and (logp == 7.0).all()
    m = np.ones((3, 5), bool)
    m[1, 2:] = False
    with pytest.raises(ValueError, match="env 1 in dimension 1"):
        S.sample_multi_categorical(x, [2, 3], m, seed=1, counter=1)


def test_gaussian_errors() -> None:
    mean = _logits(4, 2)
    kw = {"seed": 1, "counter": 1}
    with pytest.raises(TypeError, match="sample_gaussian: log_std must be float32 like mean"):
        S.sample_gaussian(mean, np.zeros(2), **kw)
    with pytest.raises(ValueError, match=r"log_std must be shape \(4, 2\) or \(2,\)"):
        S.sample_gaussian(mean, np.zeros(3, np.float32), **kw)
    with pytest.raises(TypeError, match="mean must be float32 or float64"):
        S.sample_gaussian(mean.astype(np.float16), np.zeros(2, np.float16), **kw)
    bad = mean.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match="mean must be finite, got nan at env 2, dimension 1"):
        S.sample_gaussian(bad, np.zeros(2, np.float32), **kw)
    ls = np.zeros((4, 2), np.float32)
    ls[3, 0] = -np.inf
    with pytest.raises(
        ValueError, match=r"log_std must be finite and within \+-700, got -inf at env 3"
    ):
        S.sample_gaussian(mean, ls, **kw)
    with pytest.raises(TypeError, match="squash must be a bool"):
        S.sample_gaussian(mean, np.zeros(2, np.float32), squash=None, **kw)  # type: ignore[arg-type]


def test_logp_entropy_errors() -> None:
    x = _logits(3, 4)
    with pytest.raises(
        ValueError, match=r"categorical_logp_entropy: actions must be in \[0, 4\), got 4 at env 1"
    ):
        S.categorical_logp_entropy(x, np.array([0, 4, 1]))
    m = np.ones((3, 4), bool)
    m[2, 1] = False
    with pytest.raises(ValueError, match=r"actions must be allowed by the mask.*env 2"):
        S.categorical_logp_entropy(x, np.array([0, 0, 1]), m)
    with pytest.raises(TypeError, match="actions must be an integer array"):
        S.categorical_logp_entropy(x, np.zeros(3))
    with pytest.raises(ValueError, match=r"actions must be shape \(3,\)"):
        S.categorical_logp_entropy(x, np.zeros(4, np.int64))
    x[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"logits must be free of NaN.*env 1"):
        S.categorical_logp_entropy(x, np.zeros(3, np.int64))
    mean = _logits(3, 2)
    with pytest.raises(ValueError, match=r"gaussian_logp_entropy: actions must be in \[-1, 1\]"):
        S.gaussian_logp_entropy(
            mean, np.zeros(2, np.float32), np.full((3, 2), 1.5, np.float32), squash=True
        )
    with pytest.raises(ValueError, match="actions must be finite"):
        S.gaussian_logp_entropy(mean, np.zeros(2, np.float32), np.full((3, 2), np.nan, np.float32))
    with pytest.raises(TypeError, match="actions must be float32 or float64"):
        S.gaussian_logp_entropy(mean, np.zeros(2, np.float32), np.zeros((3, 2), np.int64))


@pytest.mark.parametrize("squash", [False, True])
def test_log_std_outside_the_limit_is_refused_not_divided_by_zero(squash) -> None:
    """Found by the fuzz suite: log_std = -1e38 gave std = 0 and a ZeroDivisionError
    from the squashed log-density; |log_std| must stay below LOG_STD_LIMIT = 700."""
    mean = np.zeros((3, 2), np.float32)
    for bad in (-1e38, 1e30, -700.0):
        ls = np.array([0.0, bad], np.float32)
        act, logp = np.full((3, 2), 7.0, np.float32), np.full(3, 7.0, np.float32)
        with pytest.raises(ValueError, match=r"sample_gaussian: log_std must be finite and within"):
            fastppo.sample_gaussian(mean, ls, seed=0, counter=0, squash=squash, out=(act, logp))
        assert (act == 7.0).all() and (logp == 7.0).all()
        with pytest.raises(ValueError, match=r"gaussian_logp_entropy: log_std must be finite and"):
            fastppo.gaussian_logp_entropy(mean, ls, mean, squash=squash)
    # just inside the limit samples normally
    fastppo.sample_gaussian(mean, np.array([0.0, -699.0], np.float32), seed=0, counter=0)


def test_squashed_entropy_estimates_the_squashed_policy_entropy() -> None:
    """``H(u) + sum log(1 - a^2)`` at sampled actions and ``-logp`` are both unbiased
    estimates of the squashed entropy ``H(a)``; the pre-squash ``H(u)`` is larger."""
    n = 200_000
    mean = np.tile(np.array([[0.3, -1.5, 2.0]], np.float64), (n, 1))
    ls = np.array([-0.5, 0.2, 0.0])
    act, slogp = S.sample_gaussian(mean, ls, seed=4, counter=9, squash=True)
    logp, h_sq = S.gaussian_logp_entropy(mean, ls, act, squash=True, squashed_entropy=True)
    _, h_u = S.gaussian_logp_entropy(mean, ls, act, squash=True)
    assert np.all(h_sq <= h_u)
    se = np.std(h_sq) / np.sqrt(n) + np.std(logp) / np.sqrt(n)
    assert abs(h_sq.mean() - (-logp).mean()) < 4 * se
    rl, re_ = R.gaussian_logp_entropy(mean, ls, act, squash=True, squashed_entropy=True)
    # the log-det is float32 (kernels.squash): within 1 ulp of its value plus 1.5e-7 per dim
    ld = np.log1p(-(np.clip(act.astype(np.float64), -A_LIMIT, A_LIMIT) ** 2))
    bound = (np.abs(ld) * 2.0**-23 + 1.5e-7).sum(axis=1)
    assert np.all(np.abs(h_sq - re_) <= bound)
    with pytest.raises(ValueError, match="gaussian_logp_entropy: squashed_entropy must be False"):
        S.gaussian_logp_entropy(mean, ls, act, squashed_entropy=True)


@pytest.mark.parametrize("squash", [False, True])
def test_gaussian_log_std_forms_give_the_same_bits(squash: bool) -> None:
    """[A], a broadcast [N, A] view and a per-env copy of one row (both taken as
    [A], no copy) and a per-env [N, A] of other rows run different loops with
    the same exp64 and densities: the same bits."""
    g = np.random.default_rng(12)
    mean = g.standard_normal((300, 5)).astype(np.float32)
    ls = (0.3 * g.standard_normal(5)).astype(np.float32)
    ls[2] = 0.0
    want = S.sample_gaussian(mean, ls, seed=5, counter=6, squash=squash)
    view = np.broadcast_to(ls, mean.shape)
    signed = np.ascontiguousarray(view)
    signed[1::2, 2] = -0.0  # equal by ==, other bits: still the one-row path's bits
    assert same_rows(signed)
    per_env = np.ascontiguousarray(view)
    per_env[0] += 0.25  # a different row 0: the per-env loop; rows 1.. are [A]'s
    assert not same_rows(per_env)
    for form in (view, np.ascontiguousarray(view), signed, per_env):
        got = S.sample_gaussian(mean, form, seed=5, counter=6, squash=squash)
        rows = slice(1, None) if form is per_env else slice(None)
        np.testing.assert_array_equal(got[0][rows], want[0][rows])
        np.testing.assert_array_equal(got[1][rows], want[1][rows])
        if form is per_env:
            continue
        lp, ent = S.gaussian_logp_entropy(mean, form, want[0], squash=squash)
        lp0, ent0 = S.gaussian_logp_entropy(mean, ls, want[0], squash=squash)
        np.testing.assert_array_equal(lp, lp0)
        np.testing.assert_array_equal(ent, ent0)
