"""Goodness of fit of the samplers.

Every test uses a fixed seed, so it is deterministic; the threshold
``ALPHA = 1e-3`` is the false-alarm rate each test would have if the seed were
drawn at random (about 1% over the ten tests here). A genuine bias of the
size these sample sizes resolve (probability errors of ~1%, a mean shift of
~0.03 sd) fails by many orders of magnitude, not marginally.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from fastppo import sampling as S

ALPHA = 1e-3
N = 20_000


def _chi2_pvalue(actions: np.ndarray, probs: np.ndarray) -> float:
    counts = np.bincount(actions, minlength=probs.size)
    keep = probs > 0
    assert counts[~keep].sum() == 0, "a zero-probability action was sampled"
    return float(stats.chisquare(counts[keep], probs[keep] * actions.size).pvalue)


def test_categorical_chi_square_unmasked() -> None:
    row = np.array([0.5, -1.0, 2.0, 0.0, 1.0, -3.0], np.float32)
    act, _ = S.sample_categorical(np.tile(row, (N, 1)), seed=101, counter=0)
    probs = special.softmax(row.astype(np.float64))
    assert _chi2_pvalue(act, probs) > ALPHA
    # power: the same draws reject a distribution off by 0.03 of mass
    wrong = probs.copy()
    wrong[2] -= 0.03
    wrong[5] += 0.03
    assert _chi2_pvalue(act, wrong) < ALPHA


def test_categorical_chi_square_masked_and_minus_inf() -> None:
    row = np.array([0.5, -1.0, 2.0, 0.0, 1.0, -np.inf, 0.3], np.float64)
    mask = np.array([1, 1, 0, 1, 1, 1, 1], bool)  # the largest logit is masked
    act, _ = S.sample_categorical(np.tile(row, (N, 1)), np.tile(mask, (N, 1)), seed=7, counter=3)
    probs = special.softmax(np.where(mask, row, -np.inf))
    assert _chi2_pvalue(act, probs) > ALPHA


def test_categorical_chi_square_across_counters_for_one_env() -> None:
    """The per-step pattern: one env, the counter bumped every call."""
    row = np.array([[0.0, 1.0, -0.5, 0.7]], np.float32)
    act = np.array([S.sample_categorical(row, seed=5, counter=c)[0][0] for c in range(5000)])
    assert _chi2_pvalue(act, special.softmax(row[0].astype(np.float64))) > ALPHA


def test_multi_categorical_marginals_and_independence() -> None:
    nvec = [3, 4]
    logits = np.array([0.2, -0.7, 1.1, 0.0, 0.5, -0.5, 1.0], np.float32)
    act, _ = S.sample_multi_categorical(np.tile(logits, (N, 1)), nvec, seed=9, counter=9)
    p0 = special.softmax(logits[:3].astype(np.float64))
    p1 = special.softmax(logits[3:].astype(np.float64))
    assert _chi2_pvalue(act[:, 0], p0) > ALPHA
    assert _chi2_pvalue(act[:, 1], p1) > ALPHA
    table = np.zeros((3, 4))
    np.add.at(table, (act[:, 0], act[:, 1]), 1)
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_gaussian_kolmogorov_smirnov_every_dimension() -> None:
    a_dim = 5  # dims 0, 2, 4 use the Box-Muller cosine, 1 and 3 the sine; 4 is unpaired
    mean = np.tile(np.array([0.0, 1.0, -2.0, 0.5, 3.0], np.float32), (N, 1))
    log_std = np.array([0.0, -0.5, 0.7, 0.1, -1.0], np.float32)
    act, _ = S.sample_gaussian(mean, log_std, seed=11, counter=1)
    z = (act.astype(np.float64) - mean) / np.exp(log_std.astype(np.float64))
    for j in range(a_dim):
        assert stats.kstest(z[:, j], "norm").pvalue > ALPHA, j
    assert stats.kstest(z[:, 0] + 0.05, "norm").pvalue < ALPHA  # power against a shifted mean
    # the two normals of a Box-Muller pair are uncorrelated
    for j in (0, 2):
        assert abs(np.corrcoef(z[:, j], z[:, j + 1])[0, 1]) < 4.5 / np.sqrt(N)


def test_squashed_gaussian_kolmogorov_smirnov() -> None:
    mu, sigma = 0.3, 0.8
    mean = np.full((N, 1), mu, np.float64)
    act, logp = S.sample_gaussian(mean, np.array([np.log(sigma)]), seed=12, counter=4, squash=True)
    a = act[:, 0].astype(np.float64)
    assert np.all(np.abs(a) <= 1)

    def cdf(x: np.ndarray) -> np.ndarray:
        return stats.norm.cdf((np.arctanh(np.clip(x, -1 + 1e-15, 1 - 1e-15)) - mu) / sigma)

    assert stats.kstest(a, cdf).pvalue > ALPHA
    # the log-density integrates the change of variables: density of a = tanh(u)
    ok = np.abs(a) < 0.999
    u = np.arctanh(a[ok])
    ref = stats.norm.logpdf(u, mu, sigma) - np.log1p(-(a[ok] ** 2))
    np.testing.assert_allclose(logp[ok], ref, rtol=2e-3, atol=2e-3)
