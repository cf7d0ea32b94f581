"""fastppo: Numba/Cython kernels for PPO.

Public names are re-exported lazily: ``import fastppo`` does not import Numba
or compile anything, so it stays fast; the first use of a name imports its
module (and ``fastppo.warmup()`` compiles every kernel ahead of time).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    # advantages
    "gae": "fastppo.advantages",
    "vtrace": "fastppo.advantages",
    "discounted_returns": "fastppo.advantages",
    "next_step_valid": "fastppo.advantages",
    # running statistics
    "RunningMeanStd": "fastppo.stats",
    "ReturnNormalizer": "fastppo.stats",
    "normalize_returns": "fastppo.stats",
    "denormalize_values": "fastppo.stats",
    # sampling
    "sample_categorical": "fastppo.sampling",
    "sample_multi_categorical": "fastppo.sampling",
    "sample_gaussian": "fastppo.sampling",
    "categorical_logp_entropy": "fastppo.sampling",
    "gaussian_logp_entropy": "fastppo.sampling",
    "sample_categorical_bytes": "fastppo.sampling",
    "sample_gaussian_bytes": "fastppo.sampling",
    # trainer
    "PPOConfig": "fastppo.ppo",
    "PPOTrainer": "fastppo.ppo",
    # warm-up
    "warmup": "fastppo._warmup",
}

_SUBMODULES = ("codec", "compat", "actor_learner", "reference", "nn", "ppo")

__all__ = ["__version__", *_EXPORTS, *_SUBMODULES]


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is not None:
        value = getattr(importlib.import_module(mod), name)
        globals()[name] = value  # later lookups skip __getattr__
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"fastppo.{name}")
    raise AttributeError(f"module 'fastppo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static view of the lazy exports
    from fastppo._warmup import warmup
    from fastppo.advantages import discounted_returns, gae, next_step_valid, vtrace
    from fastppo.ppo import PPOConfig, PPOTrainer
    from fastppo.sampling import (
        categorical_logp_entropy,
        gaussian_logp_entropy,
        sample_categorical,
        sample_categorical_bytes,
        sample_gaussian,
        sample_gaussian_bytes,
        sample_multi_categorical,
    )
    from fastppo.stats import (
        ReturnNormalizer,
        RunningMeanStd,
        denormalize_values,
        normalize_returns,
    )
