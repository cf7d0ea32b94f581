"""``fastppo.warmup()``: compile (or load from cache) every kernel ahead of time.

``python -m fastppo._warmup --build FILE`` is what ``pip install .`` runs
(``setup.py``): it fills the on-disk cache next to the installed sources in
one worker process per core, so a fresh install's first call of any kernel
loads machine code instead of compiling it. ``--check`` fails unless every
kernel the install compiles (:data:`INSTALL`) loads from the cache (CI runs
it after an install).
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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

_ROLLOUT = "fastppo.ppo.rollout"
_SWEEP = ("fastppo.kernels.sweep",)
_SWEEPS = ("fastppo.kernels.gae", "fastppo.kernels.vtrace", "fastppo.kernels.returns")
_CAT, _GAUSS = "fastppo.kernels.categorical", "fastppo.kernels.gaussian"
_CHUNKS = "fastppo.kernels.chunks"
_MLP = "fastppo.kernels.mlp"
#: Not a task: the built Cython extensions, which the fused rollout calls (the
#: running statistics). An install compiles the kernels beside the Cython
#: build (``setup.py``), and the rollout tasks wait for it.
EXTENSIONS = "fastppo._cy"

#: The compile tasks of the worker processes: a kernel module, or one env's
#: fused rollout (``fastppo.ppo.rollout:<env id>``). Each names the tasks whose
#: declared kernels its own kernels call (they must be in the on-disk cache
#: first, so the call loads them instead of compiling them a second time, in
#: a second process that would write the same cache index) and its compile
#: cost (seconds on one core, rounded; it orders the ready tasks only). A task
#: that compiles another task's kernel anyway fails (:func:`_run_task`).
TASKS: dict[str, tuple[tuple[str, ...], float]] = {
    "fastppo.kernels.sweep": ((), 2),
    "fastppo.kernels.gae": (_SWEEP, 6),
    "fastppo.kernels.vtrace": (_SWEEP, 11),
    "fastppo.kernels.returns": (_SWEEP, 5),
    _CHUNKS: ((), 2.5),
    _CAT: ((_CHUNKS,), 21),
    _GAUSS: ((_CHUNKS,), 16),
    "fastppo.kernels.logp": ((_CHUNKS, _GAUSS), 9),
    "fastppo.kernels.codec": ((), 4.5),
    "fastppo.kernels.checks": ((), 2),
    "fastppo.kernels.rng": ((), 1),
    _MLP: ((), 10.5),
    "fastppo.envs.cartpole": ((), 3),
    "fastppo.envs.acrobot": ((), 4),
    "fastppo.envs.mountain_car": ((), 3),
    "fastppo.envs.mountain_car_continuous": ((), 4.5),
    "fastppo.envs.pendulum": ((), 2.5),
    **{
        f"{_ROLLOUT}:{env_id}{dtype}": ((_MLP, head, EXTENSIONS), cost)
        for env_id, head, cost in (
            ("CartPole-v1", _CAT, 3),
            ("Acrobot-v1", _CAT, 4),
            ("MountainCar-v0", _CAT, 3),
            ("MountainCarContinuous-v0", _GAUSS, 4),
            ("Pendulum-v1", _GAUSS, 3.3),
        )
        for dtype in ("", ":float64")
    },
    "fastppo.kernels.cabi": ((*_SWEEPS, _CAT, _GAUSS), 3),
}

#: What ``pip install`` compiles (``--build``): every task but the float64
#: fused rollouts. The trainer's policy is float32 unless asked otherwise; a
#: float64 policy on a compiled env compiles its env's rollout (about 3 s) on
#: its first rollout, or in ``warmup()``. Leaving them out takes about 10 s off
#: the install on 2 cores.
INSTALL = tuple(t for t in TASKS if not t.endswith(":float64"))


def _module_of(task: str) -> str:
    return task.split(":", 1)[0]


def _kernels_of(task: str) -> list[tuple[Any, tuple[Any, ...]]]:
    """The declared dispatchers ``task`` compiles (its module imported), each
    with the signatures it compiles: all declared, or for a fused rollout the
    variant of its policy dtype (``...:float64``, else float32)."""
    from fastppo import _jit

    name, _, rest = task.partition(":")
    mod = importlib.import_module(name)
    if rest:
        env_id, _, dtype = rest.partition(":")
        disp = mod.KERNELS[env_id]
        return [
            (disp, tuple(s for s in disp.declared if str(s.args[0].dtype) == (dtype or "float32")))
        ]
    return [(d, d.declared) for d in _jit.REGISTRY if d.py_func.__module__ == name]


def _run_task(task: str) -> None:
    """Compile (or load) every kernel of ``task``, and the C entries it owns."""
    from fastppo import _jit

    name = _module_of(task)
    before = set(cache_misses())
    kernels = _kernels_of(task)
    for disp, sigs in kernels:
        for sig in sigs:
            _jit._compile(disp, sig)
    if name == "fastppo.kernels.cabi":
        importlib.import_module(name).compile_all()
    if name.startswith("fastppo.envs."):
        from fastppo.envs._loop import step_entry

        step_entry(name)  # the env's step: a C entry, not a declared kernel
    own = {f"{d.py_func.__module__}.{d.py_func.__qualname__}" for d, _ in kernels}
    stray = [m for m in set(cache_misses()) - before if m.split("(", 1)[0] not in own]
    if stray:
        raise RuntimeError(
            f"warmup: task {task} compiled kernels of other tasks (add them to its "
            f"dependencies in fastppo._warmup.TASKS): {sorted(stray)}"
        )


def _compile_modules(names: tuple[str, ...] | list[str], verbose: bool) -> dict[str, float]:
    """Compile (or load) the kernels of ``names`` (modules or tasks) in this process."""
    spent: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        tasks = [t for t in TASKS if _module_of(t) == name] if ":" not in name else [name]
        for task in tasks:
            _run_task(task)
        spent[name] = time.perf_counter() - t0
        if verbose:
            print(f"warmup {name}: {spent[name]:.2f} s", flush=True)
    return spent


def _ranks() -> dict[str, float]:
    """Each task's cost plus the longest chain of tasks waiting on it: the order
    in which ready tasks are handed out (the critical path first)."""
    rank: dict[str, float] = {}

    def of(task: str) -> float:
        if task == EXTENSIONS:
            return 0.0
        if task not in rank:
            after = [of(t) for t, (deps, _) in TASKS.items() if task in deps]
            rank[task] = TASKS[task][1] + max(after, default=0.0)
        return rank[task]

    for task in TASKS:
        of(task)
    return rank


def schedule(jobs: int) -> list[list[str]]:
    """The order in which ``jobs`` workers would take the tasks, by their costs:
    each task after every task it depends on has finished (a simulation of
    :func:`_compile_in_children`, for the tests)."""
    rank = _ranks()
    done_at: dict[str, float] = {EXTENSIONS: 0.0}
    free_at = [0.0] * jobs
    order: list[list[str]] = [[] for _ in range(jobs)]
    todo = set(TASKS)
    while todo:
        w = free_at.index(min(free_at))
        now = free_at[w]
        ready = [t for t in todo if all(d in done_at and done_at[d] <= now for d in TASKS[t][0])]
        if not ready:  # wait for the next dependency to finish
            free_at[w] = min(v for v in done_at.values() if v > now)
            continue
        task = max(ready, key=lambda t: (rank[t], t))
        todo.remove(task)
        free_at[w] = done_at[task] = now + TASKS[task][1]
        order[w].append(task)
    return [o for o in order if o]


def _compile_in_children(
    jobs: int, verbose: bool, extensions: Path | None = None, tasks: tuple[str, ...] = ()
) -> None:
    """Compile every task in ``jobs`` worker processes into the on-disk cache.

    Each worker (``python -m fastppo._warmup --worker``) compiles the tasks it
    reads on stdin, one per line, and answers each with a line on stdout; a
    task is handed out once every task it depends on has been answered,
    highest :func:`_ranks` first. With ``extensions``, the tasks that need
    the Cython extensions wait until that file exists (the build writes it
    once they are built). ``tasks``: those to run (default: all of TASKS).
    """
    import threading

    rank = _ranks()
    done: set[str] = set() if extensions is not None else {EXTENSIONS}
    todo = set(tasks or TASKS)
    missing = {d for t in todo for d in TASKS[t][0]} - todo - {EXTENSIONS}
    if missing:
        raise ValueError(f"warmup: the tasks depend on tasks not given: {sorted(missing)}")
    failed: list[str] = []
    cond = threading.Condition()

    def next_task() -> str | None:
        with cond:
            while True:
                if failed or not todo:
                    return None
                if extensions is not None and extensions.exists():
                    done.add(EXTENSIONS)
                ready = [t for t in todo if all(d in done for d in TASKS[t][0])]
                if ready:
                    task = max(ready, key=lambda t: (rank[t], t))
                    todo.remove(task)
                    return task
                cond.wait(timeout=0.2)  # a worker's answer, or the extensions' file

    def drive() -> None:
        cmd = [sys.executable, "-m", "fastppo._warmup", "--worker"]
        # stderr to a file: a pipe nobody reads until the end could fill and block
        with (
            tempfile.TemporaryFile("w+") as err,
            subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
            ) as proc,
        ):
            assert proc.stdin is not None and proc.stdout is not None
            while (task := next_task()) is not None:
                proc.stdin.write(task + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                if not line.startswith("done "):
                    proc.wait()
                    err.seek(0)
                    with cond:
                        failed.append(f"{task} (exit {proc.returncode}):\n{err.read()}")
                        cond.notify_all()
                    return
                if verbose:
                    print(f"warmup {task}: {line.split()[-1]} s", flush=True)
                with cond:
                    done.add(task)
                    cond.notify_all()

    threads = [threading.Thread(target=drive) for _ in range(min(jobs, len(todo)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise RuntimeError("warmup: a compiling process failed\n" + "\n".join(failed))


def _worker() -> int:
    """Compile the tasks named on stdin, answering ``done <task> <seconds>`` for each."""
    for line in sys.stdin:
        task = line.strip()
        t0 = time.perf_counter()
        _run_task(task)
        print(f"done {task} {time.perf_counter() - t0:.2f}", flush=True)
    return 0


def warmup(verbose: bool = False, jobs: int = 1) -> dict[str, float]:
    """Compile every kernel now, so no later call pays JIT time.

    Compiles each kernel's declared signatures (one variant per float dtype,
    serial and parallel builds) and the fast path's C entries. With Numba's
    on-disk cache the first process compiles and every later one only loads
    machine code. ``pip install`` fills that cache at build time (``setup.py``)
    unless built with ``FASTPPO_BUILD_KERNELS=0``, so there this only loads.

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
    ap.add_argument("--worker", action="store_true", help="compile the tasks named on stdin")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument(
        "--build",
        metavar="FILE",
        type=Path,
        help="fill the cache in --jobs workers only; the fused rollout waits for FILE "
        "(setup.py writes it once the Cython extensions are built)",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="fail unless every kernel the install compiles (INSTALL) loads from the cache",
    )
    args = ap.parse_args(argv)
    if args.worker:
        return _worker()
    t0 = time.perf_counter()
    if args.build:
        _compile_in_children(max(1, args.jobs), args.verbose, args.build, INSTALL)
    elif args.check:
        _compile_modules(INSTALL, args.verbose)
        missed = cache_misses()
        print(f"fastppo: {len(missed)} kernel variants compiled instead of loaded")
        print("\n".join(missed))
        return 1 if missed else 0
    else:
        warmup(verbose=args.verbose, jobs=args.jobs)
    print(f"fastppo: compiled every kernel in {time.perf_counter() - t0:.0f} s ({args.jobs} jobs)")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
