"""Pure-numpy running statistics: the executable spec of ``fastppo.stats``.

Float64 throughout, plain formulas, written to be obviously right rather than
fast. Only tests and bench import this module.
"""

from __future__ import annotations

import numpy as np


def batch_moments(
    x: np.ndarray, valid: np.ndarray | None = None
) -> tuple[int, np.ndarray, np.ndarray]:
    """``(n, mean, var)`` of the rows of ``x`` [R, *shape] that ``valid`` [R] keeps (ddof 0)."""
    x = np.asarray(x, dtype=np.float64)
    if valid is not None:
        x = x[np.asarray(valid, dtype=bool)]
    n = x.shape[0]
    if n == 0:
        return 0, np.zeros(x.shape[1:]), np.ones(x.shape[1:])
    return n, x.mean(axis=0), x.var(axis=0)


def chan_merge(
    a: tuple[int, np.ndarray, np.ndarray], b: tuple[int, np.ndarray, np.ndarray]
) -> tuple[int, np.ndarray, np.ndarray]:
    """Merge two ``(n, mean, var)`` states (Chan, Golub & LeVeque 1979).

    ``n = n_a + n_b``; ``mean = mean_a + delta * n_b / n``;
    ``M2 = M2_a + M2_b + delta^2 * n_a * n_b / n`` with ``M2 = var * n`` and
    ``delta = mean_b - mean_a``. Counts are Python ints (exact at any size).
    """
    n_a, mean_a, var_a = a
    n_b, mean_b, var_b = b
    if n_b == 0:
        return a
    if n_a == 0:
        return b
    n = n_a + n_b
    delta = np.asarray(mean_b, np.float64) - mean_a
    w_a, w_b = n_a / n, n_b / n
    mean = mean_a + delta * w_b
    var = var_a * w_a + var_b * w_b + delta**2 * (w_a * w_b)
    return n, mean, var


def normalize(
    x: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float, clip: float | None = None
) -> np.ndarray:
    """``(x - mean) / sqrt(var + epsilon)``, clipped to ``[-clip, clip]`` when given."""
    y = (np.asarray(x, np.float64) - mean) / np.sqrt(var + epsilon)
    return y if clip is None else np.clip(y, -clip, clip)


def denormalize(y: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float) -> np.ndarray:
    """``y * sqrt(var + epsilon) + mean``."""
    return np.asarray(y, np.float64) * np.sqrt(var + epsilon) + mean


def return_normalize(
    rewards: np.ndarray,
    terminated: np.ndarray,
    truncated: np.ndarray,
    gamma: float,
    clip: float | None,
    epsilon: float,
    valid: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """SB3 VecNormalize's reward scaling, transcribed as a plain loop over steps.

    Per step: ``R = R * gamma + r`` (valid envs); the statistics are the exact
    moments of every valid ``R`` seen so far (``np.var`` of the history, no
    prior); ``r' = clip(r / sqrt(var + epsilon))``; ``R = 0`` where the valid
    step terminated or truncated. Returns ``(scaled [T, N], final R [N],
    history of counted R)``.
    """
    rewards = np.asarray(rewards, np.float64)
    t_max, n_envs = rewards.shape
    ret = np.zeros(n_envs)
    history: list[float] = []
    out = np.empty((t_max, n_envs))
    for t in range(t_max):
        for i in range(n_envs):
            if valid is None or valid[t, i]:
                ret[i] = ret[i] * gamma + rewards[t, i]
                history.append(float(ret[i]))
        var = np.var(history) if history else 1.0
        for i in range(n_envs):
            y = rewards[t, i] / np.sqrt(var + epsilon)
            out[t, i] = y if clip is None else min(max(y, -clip), clip)
        for i in range(n_envs):
            if (valid is None or valid[t, i]) and (terminated[t, i] or truncated[t, i]):
                ret[i] = 0.0
    return out, ret, history
