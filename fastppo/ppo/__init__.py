"""PPO on the torch-free MLP actor-critic: config, rollout buffer, update, trainer."""

from __future__ import annotations

from fastppo.ppo.buffer import RolloutBatch, RolloutBuffer
from fastppo.ppo.config import PPOConfig
from fastppo.ppo.trainer import PPOTrainer, evaluate_policy
from fastppo.ppo.update import loss_and_grad, ppo_update

__all__ = [
    "PPOConfig",
    "PPOTrainer",
    "RolloutBatch",
    "RolloutBuffer",
    "evaluate_policy",
    "loss_and_grad",
    "ppo_update",
]
