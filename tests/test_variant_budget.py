"""The compile budget: every kernel holds exactly its declared signatures.

Numba compiles one variant per distinct argument type tuple unless told
otherwise, and each sampler variant costs seconds to compile. ``fastppo._jit``
declares the signatures (one per float dtype) and disables compilation of
anything else; these tests state that budget and that callers in every form
still reach the declared variants.
"""

from __future__ import annotations

import importlib

import numba
import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

import fastppo
from fastppo import _jit
from fastppo._warmup import _MODULES


def _ro(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def _declared(disp) -> set[tuple]:
    return {tuple(s.args) for s in disp.declared}


def _every_form_of_call() -> None:
    """Public calls with writable, read-only, literal and numpy-scalar arguments."""
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        for T, N in ((3, 2), (64, 1024)):  # fast path / serial, and parallel
            r = rng.standard_normal((T, N)).astype(dt)
            lv = r[0].copy()
            te = np.zeros((T, N), bool)
            for form in (lambda a: a, _ro):
                fastppo.gae(form(r), form(r), form(lv), form(te), gamma=dt(0.9))
                fastppo.vtrace(form(r), form(r), form(r), form(r), form(lv), form(te), gamma=1)
                fastppo.discounted_returns(form(r), form(lv), te.view(np.uint8), gamma=0.5)
        # mixed log-prob widths run the variant of the rewards' dtype
        fastppo.vtrace(r.astype(np.float64), r, r, r, r[0], np.zeros_like(r, bool))
        fastppo.vtrace(r, r.astype(np.float32), r, r, r[0], np.zeros_like(r, bool))
        for n in (1, 300_000):
            lg = rng.standard_normal((n, 2)).astype(dt)
            for form in (lambda a: a, _ro):
                fastppo.sample_categorical(form(lg), seed=np.uint64(3), counter=np.int32(1))
                fastppo.sample_gaussian(form(lg), form(lg[0]), seed=1, counter=2, squash=True)
        rms = fastppo.RunningMeanStd((3,))
        x = rng.standard_normal((5, 3)).astype(dt)
        rms.update(_ro(x))
        rms.normalize(_ro(x), clip=np.float32(5.0))


def test_every_kernel_is_declared() -> None:
    """Each compiled function of the kernel modules is declared, IR-inlined or a subroutine."""
    for name in _MODULES:
        mod = importlib.import_module(name)
        for attr, v in vars(mod).items():
            if isinstance(v, CPUDispatcher) and v.py_func.__module__ == name:
                inlined = v.targetoptions.get("inline") == "always"
                known = v in _jit.REGISTRY or v in _jit.SUBROUTINES
                assert inlined or known, f"{name}.{attr} has no declared signatures"


def test_after_warmup_and_calls_in_every_form_each_kernel_holds_its_declared_signatures():
    fastppo.warmup()
    _every_form_of_call()
    assert _jit.REGISTRY
    for disp in _jit.REGISTRY:
        assert set(disp.signatures) == _declared(disp), disp.py_func.__qualname__
    # one variant per float dtype (the single-dimension samplers add the uint16
    # bits of float16/bfloat16)
    assert max(len(d.declared) for d in _jit.REGISTRY) <= 3
    # a subroutine is typed by its declared callers only (none when they load
    # from the cache): no more variants than they have
    assert _jit.SUBROUTINES
    for sub in _jit.SUBROUTINES:
        assert len(sub.signatures) <= 3, (sub.py_func.__qualname__, sub.signatures)


def test_an_undeclared_type_is_refused_not_compiled() -> None:
    from fastppo.kernels import checks

    disp = checks.all_finite_serial
    before = set(disp.signatures)
    with pytest.raises(TypeError, match="No matching definition"):
        disp(np.zeros(4, np.int32))
    assert set(disp.signatures) == before


def test_a_kernel_called_from_a_kernel_runs_the_declared_variant() -> None:
    from fastppo.kernels import checks

    inner = checks.all_finite_serial

    @numba.njit
    def outer(x):  # pragma: no cover - compiled
        return inner(x)

    assert outer(np.ones(3))  # writable float64 -> the read-only declaration
    assert set(inner.signatures) <= _declared(inner)


def test_signature_vocabulary() -> None:
    from numba import types as nt

    f32, f64 = _jit.signatures("i8(F_2, u1_1w, f8, Tup(i8, f8))", _jit.FLOATS)
    assert f32.args[0] == nt.Array(nt.float32, 2, "C", readonly=True)
    assert f64.args[0] == nt.Array(nt.float64, 2, "C", readonly=True)
    assert f32.args[1] == nt.Array(nt.uint8, 1, "C")
    assert f32.args[2] is nt.float64 and f32.args[3] == nt.Tuple((nt.int64, nt.float64))
    # a declaration without the variant's names is one signature, not two
    assert len(_jit.signatures("i8(i8, i8)", _jit.FLOATS)) == 1


def test_warmup_tasks_cover_every_kernel_module_and_run_after_their_dependencies() -> None:
    # The workers take tasks as their dependencies finish: a task that calls
    # another task's declared kernels must find them in the cache, or two
    # processes would compile (and write the cache index of) one kernel.
    from fastppo._warmup import EXTENSIONS, INSTALL, TASKS, schedule

    assert {t.split(":")[0] for t in TASKS} == set(_MODULES)
    # the install leaves out the float64 fused rollouts only, and nothing depends on them
    left_out = set(TASKS) - set(INSTALL)
    assert left_out and all(t.endswith(":float64") and "rollout" in t for t in left_out)
    assert not any(set(TASKS[t][0]) & left_out for t in INSTALL)
    for deps, _ in TASKS.values():
        assert set(deps) <= set(TASKS) | {EXTENSIONS}
    for jobs in (1, 2, 3, 16):
        order = schedule(jobs)
        assert 1 <= len(order) <= jobs
        flat = [t for worker in order for t in worker]
        assert sorted(flat) == sorted(TASKS)  # each task once
        for worker in order:  # a worker's own tasks: dependencies first
            for i, task in enumerate(worker):
                assert not set(TASKS[task][0]) & set(worker[i + 1 :])


def test_a_warmup_task_that_compiles_another_tasks_kernel_fails(monkeypatch) -> None:
    # What keeps TASKS' dependencies true: gae's kernels call kernels.sweep's.
    from fastppo import _warmup

    monkeypatch.setattr(
        _warmup, "cache_misses", _fake_misses(["fastppo.kernels.sweep.validate(float32)"])
    )
    with pytest.raises(RuntimeError, match=r"task fastppo.kernels.gae compiled kernels of other"):
        _warmup._run_task("fastppo.kernels.gae")


def test_warmup_build_holds_the_tasks_that_need_the_extensions_until_they_are_built(
    tmp_path, monkeypatch
) -> None:
    # setup.py compiles the kernels beside the Cython build and writes the file
    # once the extensions exist; the fused rollout (running statistics) waits.
    import threading
    import time

    from fastppo import _warmup

    monkeypatch.setattr(_warmup, "TASKS", {"fastppo.kernels.checks": ((_warmup.EXTENSIONS,), 1.0)})
    built = tmp_path / "extensions-built"
    timer = threading.Timer(1.5, built.touch)
    t0 = time.monotonic()
    timer.start()
    _warmup._compile_in_children(1, False, built)
    assert time.monotonic() - t0 >= 1.5  # handed out only once the file existed


def test_a_fused_rollout_task_compiles_the_variant_of_its_policy_dtype() -> None:
    from fastppo import _warmup

    for suffix, dtype in (("", "float32"), (":float64", "float64")):
        [(disp, sigs)] = _warmup._kernels_of(f"fastppo.ppo.rollout:Pendulum-v1{suffix}")
        assert len(sigs) == 1 and str(sigs[0].args[0].dtype) == dtype
        assert set(sigs) < set(disp.declared)


def _fake_misses(extra: list[str]):
    calls = []

    def misses() -> list[str]:
        calls.append(1)
        return [] if len(calls) == 1 else extra  # nothing before the task, extra after

    return misses


@pytest.mark.parametrize("jobs", [0, -1, 1.5, True, "2"])
def test_warmup_refuses_a_bad_job_count(jobs) -> None:
    with pytest.raises(ValueError, match=r"warmup: jobs must be an int >= 1, got"):
        fastppo.warmup(jobs=jobs)


@pytest.mark.slow
def test_warmup_in_worker_processes_leaves_nothing_to_compile(tmp_path) -> None:
    import subprocess
    import sys

    # The workers write the on-disk cache; the parent then loads every
    # variant (or compiles none it has not been handed), cache_misses() is
    # what --check reports.
    code = (
        "import fastppo; from fastppo import _warmup; fastppo.warmup(jobs=2);"
        "print(len(_warmup.cache_misses()))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=900
    )
    assert out.stdout.split()[-1] == "0", out.stdout
