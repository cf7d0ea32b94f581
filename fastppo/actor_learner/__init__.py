"""Asynchronous actor-learner PPO: actors collect, one learner updates.

``run(env_fn, ActorLearnerConfig(...), PPOConfig(...), backend=...)`` with the
``threads``, ``processes`` (shared memory, spawn) or ``ray`` (optional extra,
several machines) backend. See ``docs/actor_learner.md``.
"""

from __future__ import annotations

from fastppo.actor_learner.actor import Chunk, Failure, Spec
from fastppo.actor_learner.config import ActorLearnerConfig, proven_steps, step_allowance
from fastppo.actor_learner.learner import ActorFailedError, ActorLearnerReport, ActorStats
from fastppo.actor_learner.run import run
from fastppo.actor_learner.wire import decode_weights, encode_weights

__all__ = [
    "ActorFailedError",
    "ActorLearnerConfig",
    "ActorLearnerReport",
    "ActorStats",
    "Chunk",
    "Failure",
    "Spec",
    "decode_weights",
    "encode_weights",
    "proven_steps",
    "run",
    "step_allowance",
]
