"""The branch-free exp/tanh behind the Gaussian sampler and the float32 squash."""

from __future__ import annotations

import numpy as np
import pytest

from fastppo._jit import kernel
from fastppo.kernels.fastmath import exp64, tanh32, tanh64
from fastppo.kernels.squash import A_LIMIT, unsquash
from fastppo.reference import fastmath as R


@kernel("void(f8_1, i8, f8_1w, f8_1w)")
def _apply(x, which, out, out2):  # pragma: no cover - compiled
    for i in range(x.shape[0]):
        if which == 0:
            out[i] = exp64(x[i])
        elif which == 1:
            out[i] = tanh32(np.float32(x[i]))
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


def test_tanh32_equals_its_twin_and_saturates_at_one() -> None:
    """The squashed sampler's action is tanh32(float32(u)); the reference reproduces it."""
    x = np.concatenate([_G.standard_normal(400_000) * 4, [0.0, 1e-30, -3e-4, 7.9, -9.0, 1e30]])
    got = _run(x, 1)[0]
    np.testing.assert_array_equal(got, R.tanh32(x.astype(np.float32)))
    assert got[-1] == 1.0 and got[-2] == -1.0 and np.all(np.abs(got) <= 1.0)


@pytest.mark.parametrize("scale", [3.0, 0.5, 1e-3])
def test_unsquash_is_atanh_and_the_log_det(scale: float) -> None:
    """float32 ``atanh`` within 2 ulp; the log-det within 1 ulp of its value + 1.5e-7."""
    a = np.tanh(_G.standard_normal(400_000) * scale).astype(np.float32)
    edges = [1.0, -1.0, 0.0, A_LIMIT, -A_LIMIT, 2.0**-40, 0.5, -0.5, np.nextafter(0.5, 0.0)]
    a = np.concatenate([a, np.float32(edges)]).astype(np.float64)
    u, ld = _run(a, 3)
    assert np.all(u == u.astype(np.float32)) and np.all(ld == ld.astype(np.float32))
    ac = np.clip(a, -A_LIMIT, A_LIMIT)
    want_u, want_ld = np.arctanh(ac), np.log1p(-ac * ac)
    ulp_u = np.spacing(np.abs(want_u).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(u - want_u) <= 2 * ulp_u)
    assert np.all(np.abs(ld - want_ld) <= np.abs(want_ld) * 2.0**-23 + 1.5e-7)
    assert np.all(np.isfinite(u)) and np.all(np.isfinite(ld))
    assert np.all(np.sign(u) == np.sign(ac)) and ld[-9] == ld[-8] < -15.9
    # a float64 action is evaluated at float32(a), the samplers' action dtype
    np.testing.assert_array_equal(_run(a * (1 + 2.0**-40), 3)[0], u)
