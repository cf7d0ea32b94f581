"""``fastppo.warmup()``: compile (or load from cache) every kernel ahead of time."""

from __future__ import annotations

import importlib
import time

# Every kernel module: importing one declares its kernels (fastppo._jit.REGISTRY)
# without compiling them; warmup then compiles each declared signature. The C
# entries of the small-call fast path (kernels.cabi) come last, as they embed
# the serial kernels.
_MODULES = (
    "fastppo.kernels.advantages",
    "fastppo.kernels.stats",
    "fastppo.kernels.chunks",
    "fastppo.kernels.categorical",
    "fastppo.kernels.gaussian",
    "fastppo.kernels.logp",
    "fastppo.kernels.codec",
    "fastppo.kernels.checks",
    "fastppo.kernels.rng",
    "fastppo.kernels.mlp",
    "fastppo.kernels.cabi",
)


def warmup(verbose: bool = False) -> dict[str, float]:
    """Compile every kernel now, so no later call pays JIT time.

    Compiles each kernel's declared signatures (one variant per float dtype,
    serial and parallel builds) and the fast path's C entries. With Numba's
    on-disk cache the first process compiles and every later one only loads
    machine code. Returns the seconds spent per kernel module.
    """
    from fastppo import _jit

    spent: dict[str, float] = {}
    for name in _MODULES:
        t0 = time.perf_counter()
        mod = importlib.import_module(name)
        for disp in _jit.REGISTRY:
            if disp.py_func.__module__ == name:
                _jit.compile_declared(disp)
        if name == "fastppo.kernels.cabi":
            mod.compile_all()
        spent[name] = time.perf_counter() - t0
        if verbose:
            print(f"warmup {name}: {spent[name]:.2f} s")
    return spent
