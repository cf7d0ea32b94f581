"""The fused rollout (fastppo.ppo.rollout) against the step-by-step path: the same bits."""

from __future__ import annotations

import numpy as np
import pytest

from fastppo import PPOConfig, PPOTrainer
from fastppo.envs import ids

_BUFFERS = ("obs", "actions", "logp", "values", "rewards", "terminated", "truncated", "valid",
            "advantages", "returns")  # fmt: skip


def _pair(env_id: str, **cfg: object) -> tuple[PPOTrainer, PPOTrainer]:
    config = PPOConfig(n_envs=5, n_steps=64, batch_size=80, n_epochs=2, seed=4, **cfg)  # type: ignore[arg-type]
    fused, steps = PPOTrainer(env_id, config), PPOTrainer(env_id, config)
    steps.fused_rollout = False
    return fused, steps


def _same(a: PPOTrainer, b: PPOTrainer) -> None:
    for name in _BUFFERS:
        x, y = getattr(a.buffer, name), getattr(b.buffer, name)
        assert np.array_equal(x, y), name
    assert np.array_equal(a.envs.state, b.envs.state)
    assert np.array_equal(a.envs.elapsed_steps, b.envs.elapsed_steps)
    assert a.episodes == b.episodes and a.counter == b.counter
    assert np.array_equal(a.policy.params, b.policy.params)
    for rms in ("obs_rms", "ret_norm"):
        x, y = getattr(a, rms), getattr(b, rms)
        if x is not None:
            assert x.state_dict() == y.state_dict(), rms


@pytest.mark.parametrize("env_id", ids())
def test_fused_and_step_paths_train_identically(env_id: str) -> None:
    fused, steps = _pair(env_id, normalize_obs=True, normalize_reward=True)
    with fused, steps:
        for total in (320, 640, 1280):
            fused.learn(total)
            steps.learn(total)
            _same(fused, steps)
            for tr in (fused, steps):  # truncations (and their autoresets) in the next rollout
                tr.envs.elapsed_steps[:3] = tr.envs.max_episode_steps - 10
            assert [h["losses/value_loss"] for h in fused.history] == [
                h["losses/value_loss"] for h in steps.history
            ]
        assert len(fused.episodes) >= 6


@pytest.mark.parametrize(("env_id", "cfg"), [
    ("CartPole-v1", {}),
    ("Pendulum-v1", {"squash": True}),
    ("MountainCarContinuous-v0", {"dtype": "float64"}),
    ("Acrobot-v1", {"normalize_reward": True}),
])  # fmt: skip
def test_fused_rollout_matches_in_every_configuration(env_id: str, cfg: dict) -> None:
    fused, steps = _pair(env_id, **cfg)
    with fused, steps:
        for _ in range(3):
            fused.collect_rollout()
            steps.collect_rollout()
            _same(fused, steps)


def test_a_non_finite_policy_is_refused_by_the_fused_rollout() -> None:
    with PPOTrainer("CartPole-v1", PPOConfig(n_envs=2, n_steps=8, batch_size=16)) as tr:
        tr.policy.params[:] = np.nan
        with pytest.raises(ValueError, match=r"PPOTrainer\.collect_rollout: policy must be finite"):
            tr.collect_rollout()
