"""The runner behind ``fastppo bench``, its timing core, and the pytest-benchmark glue.

The runner is driven with fake suite modules (tiny numpy or spin-wait
groups) injected into ``sys.modules``, so these tests need neither the real
suites nor Numba compilation. Timing arithmetic is checked exactly with a
fake clock; the one run on real time only checks that a 4x slower impl comes
out clearly slower, with a wide margin.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from fastppo import cli
from fastppo_bench import pytest_glue, runner, timing
from fastppo_bench.core import Group

FAKE = "fastppo_test_fake_suite"
MISSING = "fastppo_bench.suites.does_not_exist_yet"


def spin(ns: int) -> Callable[[], int]:
    """A callable that busy-waits ``ns`` nanoseconds: a known, stable cost."""

    def f() -> int:
        end = time.perf_counter_ns() + ns
        while time.perf_counter_ns() < end:
            pass
        return ns

    return f


def install_suite(monkeypatch: pytest.MonkeyPatch, groups: list[Group], name: str = FAKE) -> None:
    mod = types.ModuleType(name)
    seen: dict[str, Any] = {}

    def make(quick: bool, full: bool = False) -> list[Group]:
        seen["args"] = (quick, full)
        return groups

    mod.groups = make  # type: ignore[attr-defined]
    mod.seen = seen  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, mod)


def run_main(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, suites: tuple[str, ...], **kw: Any
) -> tuple[int, str, str, str]:
    monkeypatch.setattr(runner, "SUITES", suites)
    out, err = io.StringIO(), io.StringIO()
    outdir = os.path.join(tmp_path, "out")
    kw.setdefault("quick", True)
    kw.setdefault("startup", False)
    rc = runner.main(out=outdir, stdout=out, stderr=err, **kw)
    return rc, out.getvalue(), err.getvalue(), outdir


def numpy_groups() -> list[Group]:
    a = np.arange(4096, dtype=np.float64)

    def check(res: dict[str, Any]) -> None:
        np.testing.assert_allclose(res["numpy"], res["python"])

    return [
        Group(
            "sum [4096] float64",
            "numpy",
            {
                "numpy": lambda: float(a.sum()),
                "python": lambda: float(sum(a[:64].tolist()) + a[64:].sum()),
                "torch": "not installed: pip install torch",
            },
            check=check,
            target="numpy >= 1x python",
            bytes_moved=a.nbytes,
        ),
        Group("copy [4096] float64", "np.copy", {"np.copy": lambda: a.copy()}),
    ]


# --------------------------------------------------------------------------- timing core


def test_summarize_median_and_quartiles() -> None:
    t = timing.summarize([3.0, 1.0, 2.0, 10.0, 4.0], calls_per_round=7)
    assert t.median_s == 3.0 and t.min_s == 1.0
    assert t.q1_s == 2.0 and t.q3_s == 4.0
    assert t.spread == pytest.approx(2.0 / 3.0)
    assert t.calls_per_round == 7 and t.per_round_s == (3.0, 1.0, 2.0, 10.0, 4.0)
    assert timing.summarize([1.0, 2.0], 1).median_s == 1.5
    with pytest.raises(ValueError, match="summarize: per_call must be non-empty"):
        timing.summarize([], 1)


def test_interleaved_timing_with_fake_clock_gives_exact_medians(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    orig = timing.estimate_per_call
    cost_ns = {"fast": 1_000, "slow": 4_000}
    fns = {k: (lambda k=k: k) for k in cost_ns}
    order: list[str] = []
    batches: dict[str, int] = {"fast": 0, "slow": 0}
    timed = False

    def clock(fn: Callable[[], Any], n: int) -> int:
        label = fn()
        slow_down = 1.0
        if timed:
            order.append(label)
            batches[label] += 1
            # One preempted batch must not move the median.
            slow_down = 1.5 if (label, batches[label]) == ("slow", 2) else 1.0
        return int(n * cost_ns[label] * slow_down)

    def calibrated(fn: Callable[[], Any], max_s: float, clk: Any = None) -> float:
        nonlocal timed
        per_call = orig(fn, max_s, clock)
        if fn() == "slow":
            timed = True  # both impls calibrated: the rounds start now
        return per_call

    monkeypatch.setattr(timing, "estimate_per_call", calibrated)
    res = timing.time_interleaved(fns, timing.QUICK, clock=clock)
    assert res["fast"].median_s == pytest.approx(1e-6)
    assert res["slow"].median_s == pytest.approx(4e-6)
    assert res["slow"].per_round_s[1] == pytest.approx(6e-6)
    assert res["fast"].median_s / res["slow"].median_s == pytest.approx(0.25)
    # Each impl ran its planned rounds; per call x calls ~ the budget per round.
    for t in res.values():
        assert len(t.per_round_s) == timing.QUICK.rounds
        per_round = t.median_s * t.calls_per_round
        assert per_round == pytest.approx(timing.QUICK.per_impl_s / timing.QUICK.rounds, rel=0.01)
    # Interleaved: the rounds alternate and the order rotates.
    assert order[:4] == ["fast", "slow", "slow", "fast"]
    assert len(order) == 2 * timing.QUICK.rounds


def test_interleaved_timing_replans_when_an_impl_slows_down(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Calibrated at 1 us per call, then 100x slower in the rounds (another
    # thread pool spinning): the batch size shrinks instead of the run taking
    # 100x its budget.
    orig = timing.estimate_per_call
    state = {"calibrating": True, "timed_s": 0.0}

    def clock(fn: Callable[[], Any], n: int) -> int:
        per_call_ns = 1_000 if state["calibrating"] else 100_000
        if not state["calibrating"]:
            state["timed_s"] += n * per_call_ns * 1e-9
        return n * per_call_ns

    def calibrated(fn: Callable[[], Any], max_s: float, clk: Any = None) -> float:
        per_call = orig(fn, max_s, clock)
        state["calibrating"] = False
        return per_call

    monkeypatch.setattr(timing, "estimate_per_call", calibrated)
    res = timing.time_interleaved({"a": lambda: None}, timing.QUICK, clock=clock)
    assert res["a"].median_s == pytest.approx(1e-4)
    round_s = timing.QUICK.per_impl_s / timing.QUICK.rounds
    assert res["a"].calls_per_round == round(round_s / 1e-4)
    # First batch overran (it was planned at 1 us/call); the rest kept to budget.
    assert state["timed_s"] < 100 * round_s + 2 * timing.QUICK.per_impl_s


def test_plan_bounds_rounds_for_slow_calls() -> None:
    b = timing.Budget(per_impl_s=1.0, rounds=9, min_rounds=3)
    assert timing.plan(1e-6, b) == (9, round(1.0 / 9 / 1e-6))
    assert timing.plan(0.2, b) == (5, 1)  # 5 calls fill the budget
    assert timing.plan(5.0, b) == (3, 1)  # never under min_rounds


def test_format_time_units() -> None:
    assert timing.format_time(812e-9) == "812 ns"
    assert timing.format_time(12.34e-6) == "12.3 us"
    assert timing.format_time(999.7e-6) == "1.00 ms"
    assert timing.format_time(2.0) == "2.00 s"


# --------------------------------------------------------------------------- runner


def test_main_times_groups_and_writes_report(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    install_suite(monkeypatch, numpy_groups())
    rc, out, err, outdir = run_main(monkeypatch, tmp_path, (FAKE, MISSING))
    assert rc == 0, err
    assert sys.modules[FAKE].seen["args"] == (True, False)  # type: ignore[attr-defined]
    # The missing suite is reported, not fatal.
    assert f"{MISSING}: suite not available" in out
    # Markdown table: header and one row per (group, impl).
    assert "| group | impl | median" in out
    assert "| sum [4096] float64 | numpy |" in out
    assert "1.00x (base)" in out
    assert "| sum [4096] float64 | torch | n/a (not installed: pip install torch) |" in out
    assert "[1/2] sum [4096] float64" in err and "[2/2] copy [4096] float64" in err

    with open(os.path.join(outdir, "bench.json")) as f:
        rep = json.load(f)
    assert {"schema", "mode", "machine", "suites", "rows", "failures", "startup"} <= set(rep)
    assert rep["mode"] == "quick" and rep["failures"] == [] and rep["startup"] is None
    m = rep["machine"]
    for key in ("platform", "cpu_model", "cpu_count", "numba_threads", "threading_layer"):
        assert key in m
    for key in ("python", "numpy", "numba", "torch"):
        assert key in m
    assert [s["status"] for s in rep["suites"]] == ["ok", "suite not available"]
    rows = {(r["group"], r["impl"]): r for r in rep["rows"]}
    assert len(rows) == 4
    base, py = rows[("sum [4096] float64", "numpy")], rows[("sum [4096] float64", "python")]
    assert base["is_baseline"] and base["ratio"] == 1.0
    assert py["ratio"] == pytest.approx(base["median_s"] / py["median_s"])
    assert base["gb_per_s"] == pytest.approx(4096 * 8 / base["median_s"] / 1e9)
    assert base["target"] == "numpy >= 1x python"
    assert base["median_s"] > 0 and base["rounds"] >= 3
    assert len(base["per_round_s"]) == base["rounds"]
    torch_row = rows[("sum [4096] float64", "torch")]
    assert torch_row["status"] == "unavailable"
    assert torch_row["reason"] == "not installed: pip install torch"
    assert torch_row["median_s"] is None and torch_row["ratio"] is None

    with open(os.path.join(outdir, "bench.png"), "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", png[16:24])
    assert w > 100 and h > 100
    assert not [n for n in os.listdir(outdir) if n.startswith(".tmp")]


def test_slower_impl_has_proportional_ratio(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    # Busy-waits cost wall time by construction: 4x the spin is ~4x the
    # median. The bound is loose on purpose (a shared, noisy 2-core machine);
    # the exact arithmetic is checked with a fake clock above.
    g = Group("spin", "base", {"base": spin(20_000), "slow": spin(80_000)})
    install_suite(monkeypatch, [g])
    rc, _, err, outdir = run_main(monkeypatch, tmp_path, (FAKE,))
    assert rc == 0, err
    with open(os.path.join(outdir, "bench.json")) as f:
        rows = {r["impl"]: r for r in json.load(f)["rows"]}
    assert 0.12 < rows["slow"]["ratio"] < 0.5
    assert rows["slow"]["ratio"] == pytest.approx(
        rows["base"]["median_s"] / rows["slow"]["median_s"]
    )


def test_check_failure_exits_nonzero_and_names_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def check(res: dict[str, Any]) -> None:
        assert res["a"] == res["b"], f"a={res['a']} b={res['b']}"

    bad = Group("disagree [3]", "a", {"a": lambda: 1, "b": lambda: 2}, check=check)
    install_suite(monkeypatch, [bad, *numpy_groups()])
    rc, out, err, outdir = run_main(monkeypatch, tmp_path, (FAKE,))
    assert rc == 1
    assert "FAILED group 'disagree [3]'" in err and "a=1 b=2" in err
    assert "| disagree [3] | a | NOT TIMED |" in out
    with open(os.path.join(outdir, "bench.json")) as f:
        rep = json.load(f)
    assert rep["failures"][0]["group"] == "disagree [3]"
    assert "AssertionError: a=1 b=2" in rep["failures"][0]["error"]
    # The other groups are still timed and reported.
    ok = [r for r in rep["rows"] if r["group"] == "copy [4096] float64"]
    assert ok[0]["status"] == "ok" and ok[0]["median_s"] > 0


def test_raising_impl_and_bad_baseline_are_failures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def boom() -> None:
        raise RuntimeError("kernel exploded")

    g1 = Group("raises", "ok", {"ok": lambda: 0, "boom": boom})
    g2 = Group("no baseline", "numpy", {"fast": lambda: 0})
    install_suite(monkeypatch, [g1, g2])
    rc, out, err, _ = run_main(monkeypatch, tmp_path, (FAKE,))
    assert rc == 1
    assert "'raises': impl 'boom' raised RuntimeError: kernel exploded" in err
    assert "'no baseline': baseline 'numpy' must be one of the impls ['fast']" in err
    assert "| raises | boom | ERROR |" in out


def test_only_filters_groups(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    install_suite(monkeypatch, numpy_groups())
    rc, out, err, _ = run_main(monkeypatch, tmp_path, (FAKE,), only="COPY")
    assert rc == 0, err
    assert "copy [4096] float64" in out and "sum [4096]" not in out
    rc, _, err, _ = run_main(monkeypatch, tmp_path, (FAKE,), only="nothing-matches")
    assert rc == 1 and "--only 'nothing-matches' matched no group" in err


def test_other_import_errors_propagate(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    # The suite module exists but needs a missing package: that is a bug,
    # not "suite not available".
    d = os.path.join(tmp_path, "pkg")
    os.makedirs(d)
    with open(os.path.join(d, "fastppo_test_broken_suite.py"), "w") as f:
        f.write("import fastppo_test_no_such_dependency\n")
    monkeypatch.syspath_prepend(d)
    with pytest.raises(ModuleNotFoundError, match="fastppo_test_no_such_dependency"):
        run_main(monkeypatch, tmp_path, ("fastppo_test_broken_suite",))
    monkeypatch.delitem(sys.modules, "fastppo_test_broken_suite", raising=False)


def test_suite_returning_non_groups_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    install_suite(monkeypatch, ["not a group"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="groups\\(\\) must return Group objects"):
        run_main(monkeypatch, tmp_path, (FAKE,))


@pytest.mark.parametrize(
    ("kw", "exc", "match"),
    [
        ({"quick": True, "full": True}, ValueError, "quick and full must not both be set"),
        ({"quick": 1}, TypeError, "quick must be a bool, got 1"),
        ({"only": 3}, TypeError, "only must be a str or None, got 3"),
        ({"out": None}, TypeError, "out must be a directory path, got None"),
    ],
)
def test_main_rejects_bad_arguments(kw: dict[str, Any], exc: type, match: str) -> None:
    args: dict[str, Any] = {"quick": False, "full": False, "out": "x", "only": None}
    args.update(kw)
    with pytest.raises(exc, match=f"fastppo bench: {match}"):
        runner.main(**args)


def test_no_suites_available_still_writes_json(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    rc, out, _, outdir = run_main(monkeypatch, tmp_path, (MISSING,))
    assert rc == 0
    assert "suite not available" in out
    assert os.path.exists(os.path.join(outdir, "bench.json"))
    assert not os.path.exists(os.path.join(outdir, "bench.png"))  # nothing to chart


# --------------------------------------------------------------------------- start-up


def test_startup_snippet_results_are_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = 'print("noise"); print("FASTPPO_STARTUP " + \'{"import_fastppo_s": 0.01}\')'
    monkeypatch.setattr(runner, "_STARTUP_SNIPPET", fake)
    res = runner.measure_startup(timeout_s=60)
    assert res == {
        "first_process": {"import_fastppo_s": 0.01},
        "warm_cache": {"import_fastppo_s": 0.01},
    }


def test_startup_snippet_failure_and_timeout_are_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(runner, "_STARTUP_SNIPPET", "raise SystemExit('broken fastppo')")
    assert runner._run_snippet(60) == {"error": "exit code 1: broken fastppo"}
    monkeypatch.setattr(runner, "_STARTUP_SNIPPET", "import time; time.sleep(30)")
    assert runner._run_snippet(0.5) == {"error": "timed out after 0.5 s"}


def test_startup_snippet_is_valid_python_measuring_the_contract() -> None:
    # The real snippet runs in --quick; here only its text is checked, since
    # running it compiles kernels (seconds), which bench/ is for.
    compile(runner._STARTUP_SNIPPET, "<startup>", "exec")
    for needle in ("import fastppo", "fastppo.gae(", "(T, N)", "float32", "fastppo.warmup()"):
        assert needle in runner._STARTUP_SNIPPET
    assert "T, N = 128, 8" in runner._STARTUP_SNIPPET


def test_startup_snippet_skips_warmup_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    # The real snippet's control flow, with a stand-in fastppo that needs no Numba.
    fake = runner._STARTUP_SNIPPET.replace("import fastppo\n", "import types\n").replace(
        "res = {",
        "fastppo = types.SimpleNamespace(gae=lambda *a: None, warmup=lambda: None)\nres = {",
    )
    monkeypatch.setattr(runner, "_STARTUP_SNIPPET", fake)
    res = runner.measure_startup(timeout_s=60, warmup=False)
    for d in res.values():
        assert d.get("warmup_skipped") is True and "warmup_s" not in d
        assert {"import_fastppo_s", "first_gae_s", "second_gae_s"} <= set(d)
    table = runner.format_startup(res)
    assert "| fastppo.warmup() | skipped (--quick) | skipped (--quick) |" in table
    res = runner.measure_startup(timeout_s=60)
    assert all("warmup_s" in d and "warmup_skipped" not in d for d in res.values())


def test_startup_table() -> None:
    res = {
        "first_process": {"import_fastppo_s": 0.002, "first_gae_s": 1.5, "warmup_s": 20.0},
        "warm_cache": {"import_fastppo_s": 0.002, "gae_error": "AttributeError: no gae"},
    }
    table = runner.format_startup(res)
    assert "| start-up | first process | warm cache |" in table
    assert "| import fastppo | 2.00 ms | 2.00 ms |" in table
    assert "| first fastppo.gae [128x8] float32 | 1.50 s | n/a (AttributeError: no gae) |" in table
    assert "| fastppo.warmup() | 20.0 s | n/a |" in table


# --------------------------------------------------------------------------- CLI


def test_cli_routes_bench_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_main(**kw: Any) -> int:
        seen.update(kw)
        return 3

    monkeypatch.setattr(runner, "main", fake_main)
    rc = cli.main(["bench", "--quick", "--out", "o", "--only", "gae", "--no-startup"])
    assert rc == 3
    assert seen == {"quick": True, "full": False, "out": "o", "only": "gae", "startup": False}
    cli.main(["bench"])
    assert seen["startup"] is True and seen["out"] == "bench_out"


def test_cli_quick_and_full_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["bench", "--quick", "--full"])
    assert "not allowed with argument" in capsys.readouterr().err


# --------------------------------------------------------------------------- pytest glue


def test_suite_params_ids_marks_and_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    install_suite(monkeypatch, numpy_groups())
    params = pytest_glue.suite_params(FAKE)
    ids = [p.id for p in params]
    assert ids == [
        "sum [4096] float64::numpy",
        "sum [4096] float64::python",
        "sum [4096] float64::torch",
        "copy [4096] float64::np.copy",
    ]
    skip = [m for m in params[2].marks if m.name == "skip"]
    assert skip and skip[0].kwargs["reason"] == "not installed: pip install torch"
    bench = [m for m in params[0].marks if m.name == "benchmark"]
    assert bench[0].kwargs == {"group": "sum [4096] float64"}
    assert callable(params[0].values[0])
    missing = pytest_glue.suite_params(MISSING)
    assert len(missing) == 1 and missing[0].marks[0].name == "skip"


def test_ensure_checked_runs_each_group_check_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"check": 0, "a": 0}

    def a() -> int:
        calls["a"] += 1
        return 1

    def check(res: dict[str, Any]) -> None:
        calls["check"] += 1
        assert res["a"] == res["b"], "a and b disagree"

    good = Group("good", "a", {"a": a, "b": lambda: 1}, check=check)
    bad = Group("bad", "x", {"x": lambda: 1, "y": lambda: 2}, check=lambda r: check(
        {"a": r["x"], "b": r["y"]}
    ))  # fmt: skip
    install_suite(monkeypatch, [good, bad])
    params = pytest_glue.suite_params(FAKE)
    fns = [p.values[0] for p in params]
    pytest_glue.ensure_checked(fns[0])
    pytest_glue.ensure_checked(fns[1])
    assert calls == {"check": 1, "a": 1}
    with pytest.raises(pytest.fail.Exception, match=r"bench group 'bad': check failed: .*disagree"):
        pytest_glue.ensure_checked(fns[2])
    with pytest.raises(pytest.fail.Exception, match="bench group 'bad'"):
        pytest_glue.ensure_checked(fns[3])
    assert calls["check"] == 2
    pytest_glue.ensure_checked(object())  # not ours: ignored


pytest_plugins = ["pytester"]


def test_bench_conftest_under_pytest_benchmark(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real bench/conftest.py with a fake suite, run by pytest-benchmark.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shutil.copy(os.path.join(root, "bench", "conftest.py"), pytester.path)
    # The subprocess must import this checkout's fastppo, installed or not.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    pytester.makepyfile(
        fastppo_test_glue_suite="""
        from fastppo_bench.core import Group
        def check(res):
            assert res["a"] == res["b"], "disagree"
        def groups(quick, full=False):
            return [
                Group("ok", "a", {"a": lambda: 1, "b": lambda: 1, "c": "not installed: x"},
                      check=check),
                Group("bad", "a", {"a": lambda: 1, "b": lambda: 2}, check=check),
            ]
        """,
        test_bench_fake="""
        import pytest
        from conftest import suite_params
        @pytest.mark.parametrize("fn", suite_params("fastppo_test_glue_suite"))
        def test_bench(benchmark, fn):
            benchmark(fn)
        """,
    )
    res = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--benchmark-enable",
        "--benchmark-min-rounds=2",
        "--benchmark-max-time=0.001",
        "--benchmark-warmup=off",
        "-q",
    )
    # A failed check fails the fixture, so pytest reports the tests as errors.
    res.assert_outcomes(passed=2, skipped=1, errors=2)
    res.stdout.fnmatch_lines(["*bench group 'bad': check failed: AssertionError: disagree*"])
