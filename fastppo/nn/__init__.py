"""Torch-free networks: MLP actor-critic, orthogonal init, Adam."""

from __future__ import annotations

from fastppo.nn.init import orthogonal
from fastppo.nn.optim import Adam
from fastppo.nn.policy import ActorCritic

__all__ = ["ActorCritic", "Adam", "orthogonal"]
