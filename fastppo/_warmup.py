"""``fastppo.warmup()``: compile (or load from cache) every kernel ahead of time."""

from __future__ import annotations

import importlib
import time

# Each module defines ``_warmup()``: it calls its public functions on tiny inputs
# of every supported dtype, through both the serial and the parallel builds.
_MODULES = (
    "fastppo.advantages",
    "fastppo.stats",
    "fastppo.sampling",
    "fastppo.codec",
    "fastppo.ppo",
)


def warmup(verbose: bool = False) -> dict[str, float]:
    """Compile every kernel now, so no later call pays JIT time.

    With Numba's on-disk cache the first process compiles and every later one
    only loads machine code. Returns the seconds spent per module.
    """
    spent: dict[str, float] = {}
    for name in _MODULES:
        t0 = time.perf_counter()
        importlib.import_module(name)._warmup()
        spent[name] = time.perf_counter() - t0
        if verbose:
            print(f"warmup {name}: {spent[name]:.2f} s")
    return spent
