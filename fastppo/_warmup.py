"""``fastppo.warmup()``: compile (or load from cache) every kernel ahead of time.

``python -m fastppo._warmup --jobs N`` is what ``FASTPPO_BUILD_KERNELS=1 pip
install .`` runs (``setup.py``): it fills the on-disk cache next to the
installed sources, so a fresh install's first call of any kernel loads
machine code instead of compiling it. ``--check`` fails unless every kernel
loads from the cache (CI runs it after such an install).
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time

# Every kernel module: importing one declares its kernels (fastppo._jit.REGISTRY)
# without compiling them; warmup then compiles each declared signature. The C
# entries of the small-call fast path (kernels.cabi) come last, as they embed
# the serial kernels.
_MODULES = (
    "fastppo.kernels.sweep",
    "fastppo.kernels.gae",
    "fastppo.kernels.vtrace",
    "fastppo.kernels.returns",
    "fastppo.kernels.chunks",
    "fastppo.kernels.categorical",
    "fastppo.kernels.gaussian",
    "fastppo.kernels.logp",
    "fastppo.kernels.codec",
    "fastppo.kernels.checks",
    "fastppo.kernels.rng",
    "fastppo.kernels.mlp",
    "fastppo.envs.cartpole",
    "fastppo.envs.acrobot",
    "fastppo.envs.mountain_car",
    "fastppo.envs.mountain_car_continuous",
    "fastppo.envs.pendulum",
    "fastppo.ppo.rollout",
    "fastppo.kernels.cabi",
)

# Relative compile cost of each module (seconds on one znver3 core, rounded),
# used only to balance the modules over worker processes. A kernel calls
# declared kernels of its own module (other modules lend it inlined helpers)
# or of the modules it shares a unit with in _UNITS, and a unit goes to one
# worker: no two workers ever compile, and write the cache index of, one kernel.
_COST = {
    "fastppo.kernels.gae": 14,
    "fastppo.kernels.vtrace": 16,
    "fastppo.kernels.returns": 10,
    "fastppo.kernels.categorical": 40,
    "fastppo.kernels.gaussian": 55,
    "fastppo.kernels.logp": 12,
    "fastppo.kernels.codec": 8,
    "fastppo.kernels.mlp": 12,
    "fastppo.envs.cartpole": 4,
    "fastppo.envs.acrobot": 3,
    "fastppo.envs.mountain_car": 2,
    "fastppo.envs.mountain_car_continuous": 5,
    "fastppo.envs.pendulum": 3,
}


def _compile_modules(names: tuple[str, ...] | list[str], verbose: bool) -> dict[str, float]:
    from fastppo import _jit

    spent: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        mod = importlib.import_module(name)
        for disp in _jit.REGISTRY:
            if disp.py_func.__module__ == name:
                _jit.compile_declared(disp)
        if name == "fastppo.kernels.cabi":
            mod.compile_all()
        if name.startswith("fastppo.envs."):
            from fastppo.envs._loop import step_entry

            step_entry(name)  # the env's step: a C entry, not a declared kernel
        spent[name] = time.perf_counter() - t0
        if verbose:
            print(f"warmup {name}: {spent[name]:.2f} s", flush=True)
    return spent


#: Modules that call one another's declared kernels: the sweeps call the
#: validation kernels of ``kernels.sweep``.
_UNITS = (
    (
        "fastppo.kernels.sweep",
        "fastppo.kernels.gae",
        "fastppo.kernels.vtrace",
        "fastppo.kernels.returns",
    ),
)


#: Modules whose kernels call (or embed) the declared kernels of several other
#: modules: the fused rollout and the fast path's C entries. The workers never
#: compile them; the parent does, after the workers have filled the cache.
_LAST = ("fastppo.ppo.rollout", "fastppo.kernels.cabi")


def _partition(jobs: int) -> list[list[str]]:
    """The kernel modules (all but :data:`_LAST`) in ``jobs`` groups of similar cost,
    each unit of :data:`_UNITS` whole in one group, in the order of ``_MODULES``."""
    grouped = {m for u in _UNITS for m in u}
    units = [list(u) for u in _UNITS]
    units += [[m] for m in _MODULES if m not in grouped and m not in _LAST]
    groups: list[list[str]] = [[] for _ in range(jobs)]
    load = [0] * jobs
    for unit in sorted(units, key=lambda u: -sum(_COST.get(m, 1) for m in u)):
        i = load.index(min(load))
        groups[i].extend(unit)
        load[i] += sum(_COST.get(m, 1) for m in unit)
    return [g for g in groups if g]


def _compile_in_children(jobs: int, verbose: bool) -> None:
    """Compile the kernel modules in ``jobs`` processes into the on-disk cache."""
    cmd = [sys.executable, "-m", "fastppo._warmup"] + (["--verbose"] if verbose else [])
    args = [[*cmd, "--modules", ",".join(group)] for group in _partition(jobs)]
    procs = [
        subprocess.Popen(
            a,
            stdout=None if verbose else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for a in args
    ]
    failed = []
    for a, p in zip(args, procs):
        _, err = p.communicate()
        if p.returncode != 0:
            failed.append(f"{' '.join(a)} exited with {p.returncode}:\n{err}")
    if failed:
        raise RuntimeError("warmup: a compiling process failed\n" + "\n".join(failed))


def warmup(verbose: bool = False, jobs: int = 1) -> dict[str, float]:
    """Compile every kernel now, so no later call pays JIT time.

    Compiles each kernel's declared signatures (one variant per float dtype,
    serial and parallel builds) and the fast path's C entries. With Numba's
    on-disk cache the first process compiles and every later one only loads
    machine code. An install built with ``FASTPPO_BUILD_KERNELS=1``
    filled that cache at build time (``setup.py``), so there this only loads.

    ``jobs > 1`` first compiles the kernel modules in that many child
    processes (Numba compiles on one core), which write the on-disk cache,
    then loads everything into this process. Returns the seconds spent per
    kernel module in this process.
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ValueError(f"warmup: jobs must be an int >= 1, got {jobs!r}")
    if jobs > 1:
        _compile_in_children(jobs, verbose)
    return _compile_modules(_MODULES, verbose)


def cache_misses() -> list[str]:
    """The declared kernel variants this process compiled instead of loading from disk."""
    from fastppo import _jit

    return [
        f"{d.py_func.__module__}.{d.py_func.__qualname__}{sig}"
        for d in _jit.REGISTRY
        for sig in d.stats.cache_misses
    ]


def _main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fastppo._warmup", description=__doc__)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--modules", help="comma-separated kernel modules (a worker's share)")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument(
        "--check", action="store_true", help="fail unless every kernel loads from the cache"
    )
    args = ap.parse_args(argv)
    if args.modules:
        _compile_modules(args.modules.split(","), args.verbose)
        return 0
    t0 = time.perf_counter()
    if args.check:
        warmup(verbose=args.verbose)
        missed = cache_misses()
        print(f"fastppo: {len(missed)} kernel variants compiled instead of loaded")
        print("\n".join(missed))
        return 1 if missed else 0
    warmup(verbose=args.verbose, jobs=args.jobs)
    print(f"fastppo: compiled every kernel in {time.perf_counter() - t0:.0f} s ({args.jobs} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
