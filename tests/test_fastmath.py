"""The branch-free float64 exp/log/tanh behind the squashed Gaussian sampler."""

from __future__ import annotations

import numpy as np
import pytest

from fastppo._jit import kernel
from fastppo.kernels.fastmath import exp64, log64, tanh64
from fastppo.kernels.squash import A_LIMIT, unsquash
from fastppo.reference import fastmath as R


@kernel("void(f8_1, i8, f8_1w, f8_1w)")
def _apply(x, which, out, out2):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        if which == 0:
            out[i] = exp64(x[i])
        elif which == 1:
            out[i] = log64(x[i])
        elif which == 2:
            out[i] = tanh64(x[i])
        else:
            out[i], out2[i] = unsquash(x[i])


def _run(x: np.ndarray, which: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.ascontiguousarray(x, dtype=np.float64)
    out, out2 = np.empty_like(x), np.empty_like(x)
    _apply(x, which, out, out2)
    return out, out2


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got - want) / np.spacing(np.abs(want))


_G = np.random.default_rng(7)


def test_exp64_within_one_ulp_and_equal_to_its_twin() -> None:
    x = np.concatenate([_G.uniform(-708, 709, 400_000), _G.uniform(-2, 2, 400_000), [0.0]])
    got = _run(x, 0)[0]
    assert _ulps(got, np.exp(x)).max() <= 1.0
    np.testing.assert_array_equal(got, R.exp64(x))
    assert _run(np.array([0.0]), 0)[0][0] == 1.0
    # clamped outside the range: finite and positive, never inf or a subnormal
    lo, hi = _run(np.array([-1e4, 1e4]), 0)[0]
    assert lo == np.exp(-708.0) and hi == np.exp(709.0)


def test_log64_within_one_ulp_and_equal_to_its_twin() -> None:
    x = np.concatenate(
        [
            np.exp(_G.uniform(-700, 700, 300_000)),
            _G.uniform(0.5, 2.0, 300_000),
            1.0 + _G.uniform(-1, 1, 300_000).astype(np.float32),  # unsquash's arguments
            [1.0, 2.0, 0.5, np.sqrt(2.0)],
        ]
    )
    got = _run(x, 1)[0]
    want = np.log(x)
    nz = want != 0
    assert _ulps(got[nz], want[nz]).max() <= 1.0 and np.all(got[~nz] == 0)
    np.testing.assert_array_equal(got, R.log64(x))


def test_tanh64_within_two_ulp_signed_and_equal_to_its_twin() -> None:
    x = np.concatenate(
        [
            _G.uniform(-25, 25, 300_000),
            _G.uniform(-0.7, 0.7, 300_000),
            np.exp(_G.uniform(-700, 0, 100_000)) * _G.choice([-1.0, 1.0], 100_000),
        ]
    )
    got = _run(x, 2)[0]
    assert _ulps(got, np.tanh(x)).max() <= 2.0
    np.testing.assert_array_equal(got, R.tanh64(x))
    special = _run(np.array([0.0, -0.0, np.inf, -np.inf, 1e308, -1e308]), 2)[0]
    np.testing.assert_array_equal(special, [0.0, -0.0, 1.0, -1.0, 1.0, -1.0])
    assert np.signbit(special[1]) and not np.signbit(special[0])


def test_tanh64_rounds_to_the_float32_libm_gives() -> None:
    """The sampler stores float32(tanh(u)): 2 ulp of float64 almost never moves it."""
    u = _G.standard_normal(1_000_000) * 3
    same = _run(u, 2)[0].astype(np.float32) == np.tanh(u).astype(np.float32)
    assert same.mean() > 1 - 1e-5


@pytest.mark.parametrize("scale", [3.0, 1e-3])
def test_unsquash_is_atanh_and_the_log_det(scale: float) -> None:
    a = np.tanh(_G.standard_normal(200_000) * scale).astype(np.float32).astype(np.float64)
    a = np.concatenate([a, [1.0, -1.0, 0.0, A_LIMIT, 2.0**-40]])
    u, ld = _run(a, 3)
    ac = np.clip(a, -A_LIMIT, A_LIMIT)
    # a few ulp of float64, plus 1e-16 absolute where 1 +- a is not exact
    np.testing.assert_allclose(u, np.arctanh(ac), rtol=4e-16, atol=1e-16)
    np.testing.assert_allclose(ld, np.log1p(-ac * ac), rtol=4e-16, atol=1e-16)
    assert np.all(np.isfinite(u)) and np.all(np.isfinite(ld))
