"""Per-environment defaults for ``fastppo train`` (tuned values from rl-baselines3-zoo).

Each entry overrides :class:`~fastppo.ppo.config.PPOConfig` fields and sets the
step budget. Sources: rl-baselines3-zoo ``hyperparams/ppo.yml`` (Raffin et al.),
without state-dependent exploration (gSDE), which this trainer does not implement.
"""

from __future__ import annotations

from typing import Any

DEFAULT_TIMESTEPS = 100_000

ENV_DEFAULTS: dict[str, dict[str, Any]] = {
    "CartPole-v1": {
        "total_timesteps": 100_000,
        "n_envs": 8,
        "n_steps": 32,
        "batch_size": 256,
        "n_epochs": 20,
        "gamma": 0.98,
        "gae_lambda": 0.8,
        "learning_rate": 1e-3,
        "ent_coef": 0.0,
        "clip_range": 0.2,
    },
    "Acrobot-v1": {
        "total_timesteps": 200_000,
        "n_envs": 16,
        "n_steps": 256,
        "batch_size": 64,
        "n_epochs": 4,
        "gamma": 0.99,
        "gae_lambda": 0.94,
        "ent_coef": 0.0,
        "normalize_obs": True,
        "normalize_reward": True,
    },
    "Pendulum-v1": {
        "total_timesteps": 200_000,
        "n_envs": 4,
        "n_steps": 1024,
        "batch_size": 64,
        "n_epochs": 10,
        "gamma": 0.9,
        "gae_lambda": 0.95,
        "learning_rate": 1e-3,
        "ent_coef": 0.0,
        "clip_range": 0.2,
        "normalize_reward": True,
    },
}


def env_defaults(env_id: str) -> dict[str, Any]:
    """A copy of the defaults for ``env_id`` (empty for unknown envs)."""
    return dict(ENV_DEFAULTS.get(env_id, {}))
