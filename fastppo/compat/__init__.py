"""Drop-in use of fastppo's kernels from other frameworks.

Each adapter imports its framework only when it needs it, so ``import
fastppo.compat`` is cheap and works with none of them installed; a name that
needs a missing framework raises an ``ImportError`` that says what to install.

* :mod:`fastppo.compat.sb3` -- Stable-Baselines3: :func:`sb3_gae`,
  :func:`compute_returns_and_advantage`, :class:`RolloutBuffer`,
  :class:`DictRolloutBuffer`;
* :mod:`fastppo.compat.cleanrl` -- CleanRL-style loops: :func:`cleanrl_gae`;
* :mod:`fastppo.compat.gym` -- gymnasium vector envs (either autoreset mode):
  :func:`autoreset_mode`, :func:`final_obs`, :class:`RolloutFlags`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "sb3_gae": "fastppo.compat.sb3",
    "compute_returns_and_advantage": "fastppo.compat.sb3",
    "RolloutBuffer": "fastppo.compat.sb3",
    "DictRolloutBuffer": "fastppo.compat.sb3",
    "cleanrl_gae": "fastppo.compat.cleanrl",
    "autoreset_mode": "fastppo.compat.gym",
    "final_obs": "fastppo.compat.gym",
    "FinalObs": "fastppo.compat.gym",
    "RolloutFlags": "fastppo.compat.gym",
}

__all__ = [
    "DictRolloutBuffer",
    "FinalObs",
    "RolloutBuffer",
    "RolloutFlags",
    "autoreset_mode",
    "cleanrl_gae",
    "compute_returns_and_advantage",
    "final_obs",
    "sb3_gae",
]


def __getattr__(name: str) -> Any:
    mod = _EXPORTS.get(name)
    if mod is not None:
        value = getattr(importlib.import_module(mod), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'fastppo.compat' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from fastppo.compat.cleanrl import cleanrl_gae
    from fastppo.compat.gym import FinalObs, RolloutFlags, autoreset_mode, final_obs
    from fastppo.compat.sb3 import (
        DictRolloutBuffer,
        RolloutBuffer,
        compute_returns_and_advantage,
        sb3_gae,
    )
