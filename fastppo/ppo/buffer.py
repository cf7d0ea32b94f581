"""Rollout storage: time-major ``[T, N, ...]`` buffers and the flat batch PPO consumes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class RolloutBatch:
    """One update's samples, flattened to ``B = T * N`` rows.

    Attributes
    ----------
    obs : numpy.ndarray
        ``[B, *obs_shape]`` network inputs (normalised if the trainer normalises).
    actions : numpy.ndarray
        int64 ``[B]`` / ``[B, k]`` or float ``[B, A]``, as returned by ``ActorCritic.step``.
    logp : numpy.ndarray
        ``[B]`` log-probabilities at collection time (float32 or float64).
    advantages, returns, values : numpy.ndarray
        float ``[B]``; ``returns = advantages + values``.
    valid : numpy.ndarray
        bool ``[B]``: False rows (next-step autoreset's reset rows) are left out of
        every loss and statistic.
    """

    obs: np.ndarray
    actions: np.ndarray
    logp: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    values: np.ndarray
    valid: np.ndarray

    def __len__(self) -> int:
        return int(self.logp.shape[0])


class RolloutBuffer:
    """Preallocated ``[T, N, ...]`` arrays for one rollout (reused every update)."""

    def __init__(
        self,
        n_steps: int,
        n_envs: int,
        obs_dim: int,
        action_shape: tuple[int, ...],
        action_dtype: Any,
    ) -> None:
        t, n = n_steps, n_envs
        self.obs = np.zeros((t, n, obs_dim), dtype=np.float64)
        self.actions = np.zeros((t, n, *action_shape), dtype=action_dtype)
        self.logp = np.zeros((t, n), dtype=np.float64)
        self.values = np.zeros((t, n), dtype=np.float64)
        self.rewards = np.zeros((t, n), dtype=np.float64)
        self.terminated = np.zeros((t, n), dtype=np.bool_)
        self.truncated = np.zeros((t, n), dtype=np.bool_)
        self.valid = np.ones((t, n), dtype=np.bool_)
        self.advantages = np.zeros((t, n), dtype=np.float64)
        self.returns = np.zeros((t, n), dtype=np.float64)

    def batch(self) -> RolloutBatch:
        """Flat ``[T * N, ...]`` views (no copies)."""
        t, n = self.logp.shape
        b = t * n
        return RolloutBatch(
            obs=self.obs.reshape(b, -1),
            actions=self.actions.reshape(b, *self.actions.shape[2:]),
            logp=self.logp.reshape(b),
            advantages=self.advantages.reshape(b),
            returns=self.returns.reshape(b),
            values=self.values.reshape(b),
            valid=self.valid.reshape(b),
        )
