"""Philox4x32-10: known answers, kernel == numpy reference, stream layout, uniformity."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fastppo.kernels import rng as krng
from fastppo.reference import rng as rrng

# Random123 kat_vectors for philox4x32_10: (counter, key, expected output).
KAT = [
    ([0, 0, 0, 0], [0, 0], [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    (
        [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
        [0xA4093822, 0x299F31D0],
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
    ),
]


def _kat_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = np.array([k[0] for k in KAT], dtype=np.uint32)
    k = np.array([k[1] for k in KAT], dtype=np.uint32)
    e = np.array([k[2] for k in KAT], dtype=np.uint32)
    return c, k, e


def test_kernel_known_answers() -> None:
    c, k, expected = _kat_arrays()
    out = np.empty((3, 4), dtype=np.uint32)
    krng.philox_blocks(c, k, out)
    np.testing.assert_array_equal(out, expected)


def test_reference_known_answers() -> None:
    c, k, expected = _kat_arrays()
    np.testing.assert_array_equal(rrng.philox4x32_10(c, k), expected)


def test_kernel_blocks_equal_reference_on_random_inputs() -> None:
    g = np.random.default_rng(0)
    c = g.integers(0, 2**32, size=(500, 4), dtype=np.uint64).astype(np.uint32)
    k = g.integers(0, 2**32, size=(500, 2), dtype=np.uint64).astype(np.uint32)
    out = np.empty((500, 4), dtype=np.uint32)
    krng.philox_blocks(c, k, out)
    np.testing.assert_array_equal(out, rrng.philox4x32_10(c, k))


@pytest.mark.parametrize(
    ("seed", "counter", "env_offset"),
    [(0, 0, 0), (1, 2, 3), (2**64 - 1, 2**64 - 1, 2**32 - 20), (0xDEADBEEF12345678, 2**40 + 7, 11)],
)
def test_env_uniforms_kernel_equals_reference(seed: int, counter: int, env_offset: int) -> None:
    n, k = 17, 5
    got = np.empty((n, k))
    krng.env_uniforms(
        (seed & 0xFFFFFFFF, seed >> 32, counter & 0xFFFFFFFF, counter >> 32, env_offset), got
    )
    np.testing.assert_array_equal(got, rrng.env_uniforms(seed, counter, n, k, env_offset))


def test_stream_layout_counter_words() -> None:
    """Uniform 0 of env n is built from words 0 and 1 of block (0, n, ctr_lo, ctr_hi)."""
    seed, counter, env = 0x0123456789ABCDEF, 0xFEDCBA9876543210, 5
    w = rrng.philox4x32_10(
        np.array([[0, env, counter & 0xFFFFFFFF, counter >> 32]], dtype=np.uint64),
        np.array([[seed & 0xFFFFFFFF, seed >> 32]], dtype=np.uint64),
    )[0].astype(np.uint64)
    u0 = float((w[0] >> 5) * 2**26 + (w[1] >> 6)) * 2.0**-53
    u1 = float((w[2] >> 5) * 2**26 + (w[3] >> 6)) * 2.0**-53
    u = rrng.env_uniforms(seed, counter, 1, 2, env)
    assert (u[0, 0], u[0, 1]) == (u0, u1)


def test_uniform53_extremes() -> None:
    zero = np.array([0], dtype=np.uint32)
    ones = np.array([0xFFFFFFFF], dtype=np.uint32)
    assert rrng.uniform53(zero, zero)[0] == 0.0
    assert rrng.uniform53(ones, ones)[0] == 1.0 - 2.0**-53


def test_streams_differ_across_seed_counter_env() -> None:
    base = rrng.env_uniforms(1, 1, 1000, 2)
    assert np.unique(base[:, 0]).size == 1000  # envs
    assert not np.any(rrng.env_uniforms(2, 1, 1000, 2) == base)  # seeds
    assert not np.any(rrng.env_uniforms(1, 2, 1000, 2) == base)  # counters
    # counter words are not aliased with the env word: (counter=1, env=0) != (counter=0, env=1)
    assert rrng.env_uniforms(1, 1, 1, 1)[0, 0] != rrng.env_uniforms(1, 0, 1, 1, 1)[0, 0]


def test_uniforms_are_uniform() -> None:
    """KS test at a fixed seed; were the seed random, the false-alarm rate would be 1e-4."""
    u = np.empty((50_000, 2))
    krng.env_uniforms((12345, 0, 0, 0, 0), u)
    for col in range(2):
        assert stats.kstest(u[:, col], "uniform").pvalue > 1e-4
    assert abs(np.corrcoef(u[:, 0], u[:, 1])[0, 1]) < 4.5 / np.sqrt(u.shape[0])


def test_env_normals_kernel_equals_reference() -> None:
    seed, counter = 0xABCDEF0123456789, 2**50 + 3
    got = np.empty((300, 5), dtype=np.float32)
    krng.env_normals((seed & 0xFFFFFFFF, seed >> 32, counter & 0xFFFFFFFF, counter >> 32, 17), got)
    np.testing.assert_array_equal(got, rrng.env_normals(seed, counter, 300, 5, 17))


def test_log_and_sincos_are_accurate_and_match_reference() -> None:
    """The vectorisable float32 log / sin / cos behind Box-Muller, against float64 libm."""
    from fastppo._jit import kernel

    @kernel("void(f4_1, i4_1, f4_1w, f4_1w, f4_1w)")
    def run(x, k, lg, c, s):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            lg[i] = krng.log32(x[i])
        for i in range(k.shape[0]):
            c[i], s[i] = krng.sincos24(k[i])

    g = np.random.default_rng(0)
    ia = np.concatenate(
        [g.integers(0, 2**31, 1_000_000), [0, 1, 2, 2**30, 2**31 - 65, 2**31 - 64, 2**31 - 1]]
    )
    # every radius input the sampler can produce is (float32(ia) + 1/2) 2**-31
    x = (ia.astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-31)
    x = np.concatenate([x, np.float32(2.0) ** -np.arange(33, dtype=np.float32)])
    k = np.concatenate(
        [g.integers(0, 2**24, 1_000_000), np.arange(0, 2**24, 2**20), [2**24 - 1, 2**21, 2**21 - 1]]
    ).astype(np.int32)
    lg = np.empty_like(x)
    c = np.empty(k.shape, np.float32)
    s = np.empty_like(c)
    run(x, k, lg, c, s)
    np.testing.assert_array_equal(lg, rrng.log32(x))
    rc, rs = rrng.sincos24(k)
    np.testing.assert_array_equal(c, rc)
    np.testing.assert_array_equal(s, rs)
    ref = np.log(x.astype(np.float64))
    nz = ref != 0
    ulp = np.spacing(np.abs(ref[nz]).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(lg[nz] - ref[nz]) / ulp) <= 1.0
    assert np.all(lg[~nz] == 0)
    ang = 2 * np.pi * k.astype(np.float64) * 2.0**-24
    assert np.max(np.abs(c - np.cos(ang))) < 1.2e-7
    assert np.max(np.abs(s - np.sin(ang))) < 1.2e-7


def test_log32_of_categorical_sums() -> None:
    """log s for the categorical log-probability: s in [1, 2**24], kernel == reference."""
    from fastppo._jit import kernel

    @kernel("void(f8_1, f8_1w)")
    def run(x, out):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            out[i] = krng.log32(np.float32(x[i]))

    g = np.random.default_rng(2)
    s = np.concatenate([1 + 17 * g.random(200_000), np.exp(g.random(200_000) * 24 * np.log(2))])
    got = np.empty_like(s)
    run(s, got)
    np.testing.assert_array_equal(got, rrng.log32(s.astype(np.float32)))
    err = np.abs(got - np.log(s))
    assert err[:200_000].max() < 2e-7
    assert err.max() < 1.2e-6


def test_box_muller32_accuracy_and_range() -> None:
    """float32 normals within 4e-7 relative of the float64 formula on the same words."""
    g = np.random.default_rng(1)
    w0 = g.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    w2 = g.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    w0[:3] = [0, 1, 0xFFFFFFFF]  # the extreme radii: |z| <= sqrt(64 ln 2) and r = 0
    z0, z1 = rrng.box_muller32(w0, w2)
    x = ((w0 >> 1).astype(np.float32) + np.float32(0.5)).astype(np.float64) * 2.0**-31
    r = np.sqrt(-2.0 * np.log(x))
    a = 2 * np.pi * (w2 >> 8).astype(np.float64) * 2.0**-24
    for z, ref in ((z0, r * np.cos(a)), (z1, r * np.sin(a))):
        assert np.max(np.abs(z - ref)) < 1e-6
        big = np.abs(ref) > 1e-3
        assert np.max(np.abs(z - ref)[big] / np.abs(ref[big])) < 4e-7
    assert np.max(np.hypot(z0, z1)) <= np.sqrt(64 * np.log(2)) * (1 + 1e-6)
    assert z0[2] == 0 and z1[2] == 0


def test_log32_fma_is_fused_and_within_one_ulp() -> None:
    """The squash's log (fused multiply-adds): within 1 ulp over the arguments
    ``unsquash`` gives it (``1 + x``, ``1 - x`` for float32 ``x`` in ``[0, 1)``) and
    over ``[2**-32, 1]``; its roundings differ from log32's (no numpy twin)."""
    from fastppo._jit import kernel
    from fastppo.kernels.fastmath import fma32

    @kernel("void(f4_1, f4_1w, f4_1w)")
    def run(x, fused, plain):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            fused[i] = krng.log32_fma(x[i])
            plain[i] = krng.log32(x[i])

    g = np.random.default_rng(3)
    a = g.random(1_000_000).astype(np.float32)
    edge = np.float32([0.0, 0.5, np.nextafter(1, 0)])
    x = np.concatenate([1 + a, 1 - a, 1 + edge, 1 - edge, g.random(200_000).astype(np.float32)])
    x = x[x >= 2.0**-32]
    fused, plain = np.empty_like(x), np.empty_like(x)
    run(x, fused, plain)
    ref = np.log(x.astype(np.float64))
    nz = ref != 0
    ulp = np.spacing(np.abs(ref[nz]).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(fused[nz] - ref[nz]) / ulp) <= 1.0
    assert np.all(fused[~nz] == 0)
    assert np.any(fused != plain)  # rounded once per multiply-add, not twice

    @kernel("void(f4_1, f4_1w)")
    def one(v, out):  # pragma: no cover - compiled
        out[0] = fma32(v[0], v[1], v[2])

    out = np.empty(1, np.float32)
    e = np.float32(2.0**-13)
    # (1 + e)(1 - e) - 1 = -e^2 exactly: rounding the product first gives 0
    one(np.float32([1 + e, 1 - e, -1]), out)
    assert out[0] == -(e * e)


def test_fma32_refuses_float64_arguments() -> None:
    import numba

    from fastppo.kernels.fastmath import fma32

    @numba.njit
    def f(a, b, c):  # pragma: no cover - compiled
        return fma32(a, b, c)

    with pytest.raises(numba.core.errors.TypingError):
        f(1.0, 2.0, 3.0)


def test_fma_rounds_once_in_either_float_type_and_refuses_mixed_ones() -> None:
    """The sweeps' fused multiply-add: one rounding for float32 and float64
    (``(1 + e)(1 - e) - 1 = -e^2`` exactly, where a rounded product gives 0),
    and a typing error for mixed types (nothing narrowed or widened)."""
    import numba

    from fastppo.kernels.fastmath import fma

    @numba.njit
    def f(a, b, c):  # pragma: no cover - compiled
        return fma(a, b, c)

    for dt, e in ((np.float32, 2.0**-13), (np.float64, 2.0**-30)):
        one, x = dt(1), dt(e)
        got = f(one + x, one - x, -one)
        assert type(got) in (dt, float) and got == -(x * x) != 0
        assert (one + x) * (one - x) - one == 0  # the unfused expression rounds to 0
    with pytest.raises(numba.core.errors.TypingError):
        f(np.float32(1), 1.0, 1.0)
