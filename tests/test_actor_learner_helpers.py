"""Helpers shared by the actor-learner tests (importable by spawned processes).

A tiny numpy linear policy with the ``ActorCritic`` interface, environments
that fail on purpose, and a stand-in PPO update that records what it saw, so
the transports, ordering and failure handling are tested apart from the
trainer's numerics.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import gymnasium as gym
import numpy as np


class LinearPolicy:
    """Softmax-linear actor and linear critic over one flat float64 vector."""

    def __init__(self, obs_dim: int, n_actions: int, seed: int = 0) -> None:
        self.obs_dim, self.n_actions = obs_dim, n_actions
        n = obs_dim * n_actions + obs_dim + 1
        self.params = np.random.default_rng(seed).normal(0.0, 0.1, n)

    def set_params(self, flat: Any) -> None:
        self.params[...] = flat

    def get_params(self) -> np.ndarray:
        return self.params.copy()

    def _split(self) -> tuple[np.ndarray, np.ndarray, float]:
        d, a = self.obs_dim, self.n_actions
        w = self.params[: d * a].reshape(d, a)
        v = self.params[d * a : d * a + d]
        return w, v, float(self.params[-1])

    def _logp_all(self, obs: np.ndarray) -> np.ndarray:
        w, _, _ = self._split()
        z = np.asarray(obs, np.float64).reshape(len(obs), -1) @ w
        z -= z.max(axis=1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=1, keepdims=True))

    def value(self, obs: Any) -> np.ndarray:
        _, v, b = self._split()
        return np.asarray(obs, np.float64).reshape(len(obs), -1) @ v + b

    def step(
        self, obs: Any, *, seed: int, counter: int, env_offset: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lp = self._logp_all(obs)
        acts = np.empty(len(lp), np.int64)
        for i in range(len(lp)):
            u = np.random.default_rng([seed, counter, env_offset + i]).random()
            acts[i] = min(int(np.searchsorted(np.cumsum(np.exp(lp[i])), u)), self.n_actions - 1)
        return acts, lp[np.arange(len(lp)), acts].astype(np.float32), self.value(obs)

    def evaluate(self, obs: Any, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lp = self._logp_all(obs)
        a = np.asarray(actions, np.int64)
        ent = -(np.exp(lp) * lp).sum(axis=1)
        return lp[np.arange(len(lp)), a], ent, self.value(obs)


def linear_policy_fn(observation_space: Any, action_space: Any) -> LinearPolicy:
    return LinearPolicy(int(np.prod(observation_space.shape)), int(action_space.n))


class RecordingUpdate:
    """Stand-in for ``ppo_update``: records the batches, nudges the weights.

    The nudge makes every update produce new weights, so versions differ.
    """

    def __init__(self) -> None:
        self.batches: list[Any] = []
        self.schedule: list[tuple[Any, float]] = []  # (lr, clip_range) per update

    def __call__(
        self, policy: Any, optimizer: Any, batch: Any, config: Any, rng: Any, lr: Any
    ) -> dict[str, float]:
        self.batches.append(batch)
        self.schedule.append((lr, config.clip_range))
        policy.params += 1e-3 * rng.standard_normal(policy.params.shape)
        adv = batch.advantages[batch.valid]
        return {
            "losses/policy_loss": float(-adv.mean()),
            "losses/value_loss": float((adv**2).mean()),
        }


class CountingEnv(gym.Env):
    """Observation = [actor-visible step count, episode step]; 10-step episodes.

    The step count lets a test read back the exact order each actor produced.
    ``fail_at``: after this many steps of the first incarnation, fail with
    ``mode`` ("raise", "exit" for ``os._exit``, "sigkill").
    """

    def __init__(self, fail_at: int = -1, mode: str = "raise", marker: str = "") -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.fail_at, self.mode, self.marker = fail_at, mode, marker
        self.t = 0
        self.ep = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.ep = 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.ep], np.float64)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.ep += 1
        if self.t == self.fail_at and self._first():
            if self.mode == "raise":
                raise RuntimeError("injected env failure")
            if self.mode == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        return self._obs(), 1.0, self.ep >= 10, False, {}

    def _first(self) -> bool:
        # fail only once per run: a marker file remembers that it happened
        if not self.marker:
            return True
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return False
        os.close(fd)
        return True


def counting_env(fail_at: int = -1, mode: str = "raise", marker: str = "") -> CountingEnv:
    return CountingEnv(fail_at, mode, marker)


def test_decode_weights_refuses_a_bad_dtype_argument_in_the_house_format() -> None:
    import numpy as np
    import pytest

    from fastppo.actor_learner import wire

    buf = wire.encode_weights(np.zeros(4, np.float32), 1)
    for bad in ("x", 0, [1.0, 2.0]):
        with pytest.raises(TypeError, match=r"^decode_weights: dtype must be a numpy float dtype"):
            wire.decode_weights(buf, dtype=bad)
