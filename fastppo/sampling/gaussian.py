"""Diagonal-Gaussian sampling, optionally tanh-squashed, with log-densities: ``sample_gaussian``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import fail
from fastppo._fastpath import fast as _fast
from fastppo._jit import by_size
from fastppo.kernels import gaussian as _k
from fastppo.kernels.gaussian import LOG_STD_LIMIT
from fastppo.kernels.squash import SQUASH_BOUND
from fastppo.sampling._common import (
    _F32,
    _flag,
    _outs,
    _ro,
    gaussian_params,
    stream,
)


def _bad_gaussian(
    fn: str,
    mean: np.ndarray,
    ls: np.ndarray,
    row: int,
    env_offset: int,
    names: tuple[str, str] = ("mean", "log_std"),
    actions: np.ndarray | None = None,
    squash: bool = False,
) -> None:
    """Raise the house error for the first refused value of a row a kernel reported:
    the mean, the log-std, then (``gaussian_logp_entropy``) the action."""
    where = f"env {row}" if env_offset == 0 else f"row {row} (env {env_offset + row})"
    log_std = ls[0] if ls.shape[0] == 1 else ls[row]
    lim = f"finite and within +-{LOG_STD_LIMIT:g}"
    checks = [(names[0], mean[row], np.inf, "finite"), (names[1], log_std, LOG_STD_LIMIT, lim)]
    if actions is not None:
        checks.append(("actions", actions[row], np.inf, "finite"))
        if squash:
            checks.append(("actions", actions[row], SQUASH_BOUND, "in [-1, 1] with squash=True"))
    for name, arr, bound, want in checks:
        v = np.asarray(arr, dtype=np.float64)
        bad = ~(np.abs(v) < bound)
        if bad.any():
            j = int(np.argmax(bad))
            fail(fn, name, want, f"{float(v[j])!r} at {where}, dimension {j}")
    raise AssertionError(f"{fn}: kernel reported row {row} but it looks valid")  # pragma: no cover


def sample_gaussian(
    mean: Any,
    log_std: Any,
    *,
    seed: int,
    counter: int,
    env_offset: int = 0,
    squash: bool = False,
    deterministic: bool = False,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Sample diagonal-Gaussian actions, optionally tanh-squashed.

    Parameters
    ----------
    mean : float32 or float64 array [N, A]
    log_std : array [N, A] or [A] (state-independent), same dtype as ``mean``;
        finite with ``|log_std| < 700`` (``LOG_STD_LIMIT``: std = exp(log_std)
        stays a positive, finite float64)
    seed, counter, env_offset
        As :func:`sample_categorical`.
    squash : bool, default False
        Return ``tanh(u)`` and correct the log-density for the change of
        variables.
    deterministic : bool, default False
        Return the mean (``tanh(mean)`` when squashed).
    out : (float32 [N, A], float32 [N]), optional

    Returns
    -------
    actions : float32 [N, A]
    logp : float32 [N]
        ``sum_j log N(u_j; mean_j, std_j)`` minus ``sum_j log(1 - tanh(u_j)^2)``
        when squashed.

    Notes
    -----
    ``u = mean + exp(log_std) * z`` (float64) with ``z`` standard normal
    from the env's stream by Box-Muller (pair ``j // 2`` of uniforms; cosine
    for even ``j``, sine for odd). Squashed, the action is float32 ``tanh``
    of ``float32(u)`` (Eigen's rational, within 8 ulp) and ``logp`` is the
    density of that action exactly as :func:`gaussian_logp_entropy` computes
    it: at ``atanh(a)``, minus ``log(1 - a^2)``, both in float32, finite
    even where ``a`` rounds to 1 (Haarnoja et al. 2018).
    Box & Muller, Ann. Math. Statist. 29 (1958) 610-611.
    """
    # plain numpy (or torch CPU) arrays below the parallel size: the C fast path
    res = _fast.sample_gaussian(
        mean, log_std, seed, counter, env_offset, squash, deterministic, out
    )
    if res is not None:
        return res
    fn = "sample_gaussian"
    mu, ls2 = gaussian_params(fn, mean, log_std)
    n, a_dim = mu.shape
    key, det = stream(fn, seed, counter, env_offset, n, deterministic)
    sq = _flag(fn, "squash", squash)
    if out is None:
        act = np.empty((n, a_dim), dtype=np.float32)
        logp = np.empty(n, dtype=np.float32)
    else:
        act, logp = _outs(
            fn,
            out,
            ((n, a_dim), (n,)),
            (_F32, _F32),
            ("actions", "logp"),
            {"mean": mu, "log_std": ls2},
        )
    mu, ls2 = _ro(mu), _ro(ls2)  # one variant per dtype (see _canon)
    kern = by_size(_k.gaussian, n * a_dim, _dispatch.PARALLEL_MIN_GAUSSIAN)
    st = kern(
        mu,
        0,
        ls2,
        0,
        a_dim,
        0 if mu.dtype == _F32 else 1,
        ls2.shape[0] == 1 and n != 1,
        key,
        sq,
        det,
        act,
        logp,
    )
    if st >= 0:
        _bad_gaussian(fn, mu, ls2, st, key[4])
    return act, logp
