"""The trainer on fastppo's compiled envs: chosen by default where one exists."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from fastppo import PPOConfig, PPOTrainer
from fastppo.envs import CompiledVectorEnv

_SMALL = PPOConfig(n_envs=4, n_steps=16, batch_size=32, n_epochs=1, seed=3)


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_classic_control_ids_step_the_compiled_env_by_default(env_id: str) -> None:
    with PPOTrainer(env_id, _SMALL) as tr:
        assert tr.compiled_env and isinstance(tr.envs, CompiledVectorEnv)
        tr.learn(128)
        assert tr.num_timesteps == 128 and np.isfinite(tr.history[-1]["losses/value_loss"])
    with PPOTrainer(env_id, _SMALL.replace(env_backend="gymnasium")) as tr:
        assert not tr.compiled_env and isinstance(tr.envs, gym.vector.SyncVectorEnv)


def test_other_envs_and_kwargs_fall_back_to_gymnasium() -> None:
    with PPOTrainer("CartPole-v1", _SMALL, env_kwargs={"sutton_barto_reward": True}) as tr:
        assert not tr.compiled_env and isinstance(tr.envs, gym.vector.SyncVectorEnv)
    with PPOTrainer(lambda: gym.make("CartPole-v1"), _SMALL) as tr:
        assert not tr.compiled_env
        assert tr.env_description() == "custom env, gymnasium SyncVectorEnv"


def test_env_backend_is_validated() -> None:
    rule = "PPOConfig: env_backend must be 'compiled' or 'gymnasium'"
    with pytest.raises(ValueError, match=rule):
        PPOConfig(env_backend="envpool").validate()


def test_a_checkpoint_naming_the_old_backend_value_loads(tmp_path) -> None:
    """Checkpoints written before the value was renamed say env_backend "fastppo"."""
    import json

    with PPOTrainer("CartPole-v1", _SMALL) as tr:
        tr.save(tmp_path)
    meta_path = tmp_path / "checkpoint.json"
    meta = json.loads(meta_path.read_text())
    assert meta["config"]["env_backend"] == "compiled"
    meta["config"]["env_backend"] = "fastppo"
    meta_path.write_text(json.dumps(meta))
    with PPOTrainer.load(tmp_path, env="CartPole-v1") as lo:
        assert lo.config.env_backend == "compiled" and lo.compiled_env
