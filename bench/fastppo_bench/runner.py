"""The comparison runner behind ``fastppo bench``.

For every group that the suites declare (see :class:`fastppo_bench.core.Group`):

1. call every runnable impl once -- this compiles Numba code and warms caches,
   so no JIT time is ever timed;
2. run ``group.check`` on those results: impls that disagree are a hard error
   (the group is not timed, the run exits non-zero and names the group);
3. time the impls in interleaved rounds and report the median per call
   (:mod:`fastppo_bench.timing`), and ratio = baseline median / impl median,
   both from the same run.

Then it measures start-up latency in fresh interpreters (``import fastppo``,
the first ``fastppo.gae`` call, ``fastppo.warmup()``), prints markdown tables
to stdout (progress goes to stderr), and writes ``bench.json`` and
``bench.png`` (ratios, log scale) into the output directory.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from fastppo_bench.core import Group
from fastppo_bench.timing import DEFAULT, FULL, QUICK, Budget, format_time, time_interleaved

SUITES: tuple[str, ...] = (
    "fastppo_bench.suites.advantages",
    "fastppo_bench.suites.stats",
    "fastppo_bench.suites.sampling",
    "fastppo_bench.suites.compat",
    "fastppo_bench.suites.forms",
    "fastppo_bench.suites.envs",
)

SCHEMA_VERSION = 1
NOT_AVAILABLE = "suite not available"


@dataclass
class SuiteResult:
    """One suite module: loaded with its groups, or not available."""

    module: str
    groups: list[Group] = field(default_factory=list)
    error: str | None = None  # set when the module is not available

    def as_dict(self) -> dict[str, Any]:
        status = "ok" if self.error is None else NOT_AVAILABLE
        return {
            "module": self.module,
            "status": status,
            "groups": len(self.groups),
            "error": self.error,
        }


@dataclass
class GroupResult:
    """Rows of one timed group, or why it failed."""

    group: Group
    rows: list[dict[str, Any]]
    failure: str | None = None
    seconds: float = 0.0


# --------------------------------------------------------------------------- suites


def load_suite(module: str, quick: bool, full: bool) -> SuiteResult:
    """Import ``module`` and collect its groups.

    Only a ``ModuleNotFoundError`` for ``module`` itself (a suite not written
    yet) is turned into "suite not available"; a suite that exists but fails
    to import or to build its groups is a bug and propagates.
    """
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module:
            raise
        return SuiteResult(module, error=str(e))
    groups = mod.groups(quick=quick, full=full)
    if not isinstance(groups, list):
        raise TypeError(f"bench: {module}.groups() must return a list of Group, got {groups!r}")
    for g in groups:
        if not isinstance(g, Group):
            raise TypeError(f"bench: {module}.groups() must return Group objects, got {g!r}")
    return SuiteResult(module, groups=groups)


def _group_error(group: Group) -> str | None:
    """Why ``group`` is malformed, or None."""
    if group.baseline not in group.impls:
        return f"baseline {group.baseline!r} must be one of the impls {list(group.impls)}"
    for label, impl in group.impls.items():
        if not (callable(impl) or isinstance(impl, str)):
            return f"impl {label!r} must be a callable or a str, got {type(impl).__name__}"
    return None


# --------------------------------------------------------------------------- one group

_TIMING_KEYS = (
    "reason", "median_s", "min_s", "q1_s", "q3_s", "spread",
    "calls_per_round", "rounds", "per_round_s", "ratio", "gb_per_s",
)  # fmt: skip


def run_group(group: Group, budget: Budget) -> GroupResult:
    """Warm up, check and time one group; never raises for impl or check errors."""
    t_start = time.perf_counter()
    base: dict[str, Any] = {"group": group.name, "target": group.target}
    base["bytes_moved"] = group.bytes_moved

    def row(label: str, status: str, **kw: Any) -> dict[str, Any]:
        r = dict(base, impl=label, is_baseline=label == group.baseline, status=status)
        # Every row has every key, so JSON consumers need no .get().
        r.update(dict.fromkeys(_TIMING_KEYS))
        r.update(kw)
        return r

    bad = _group_error(group)
    if bad is not None:
        rows = [row(k, "not timed") for k in group.impls]
        return GroupResult(group, rows, failure=bad, seconds=time.perf_counter() - t_start)

    runnable: dict[str, Callable[[], Any]] = {}
    unavailable: dict[str, str] = {}
    for label, impl in group.impls.items():
        if isinstance(impl, str):
            unavailable[label] = impl
        else:
            runnable[label] = impl

    def failed(reason: str, who: str | None = None) -> GroupResult:
        rows = []
        for label in group.impls:
            if label in unavailable:
                rows.append(row(label, "unavailable", reason=unavailable[label]))
            else:
                rows.append(row(label, "error" if label == who else "not timed"))
        return GroupResult(group, rows, failure=reason, seconds=time.perf_counter() - t_start)

    # First call: compiles and warms, and gives the results the check compares.
    results: dict[str, Any] = {}
    for label, fn in runnable.items():
        try:
            results[label] = fn()
        except Exception as e:
            return failed(f"impl {label!r} raised {_one_line(e)}", who=label)
    if group.check is not None and results:
        try:
            group.check(results)
        except Exception as e:
            return failed(f"check failed: {_one_line(e)}")

    timings = time_interleaved(runnable, budget) if runnable else {}
    base_t = timings.get(group.baseline)
    rows = []
    for label in group.impls:
        if label in unavailable:
            rows.append(row(label, "unavailable", reason=unavailable[label]))
            continue
        t = timings[label]
        extra = t.as_dict()
        del extra["per_round_s"]
        ratio = base_t.median_s / t.median_s if base_t is not None and t.median_s > 0 else None
        gbps = group.bytes_moved / t.median_s / 1e9 if group.bytes_moved and t.median_s else None
        rows.append(
            row(label, "ok", ratio=ratio, gb_per_s=gbps, per_round_s=list(t.per_round_s), **extra)
        )
    return GroupResult(group, rows, seconds=time.perf_counter() - t_start)


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().replace("\n", " | ")
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


# --------------------------------------------------------------------------- start-up latency

# Runs in a fresh interpreter. numpy is imported after the timed
# ``import fastppo`` (which must not need it), and the first gae call includes
# importing the public module, Numba and loading (or compiling) its kernels:
# the latency a new process really sees. ``--no-warmup`` skips warmup().
_STARTUP_SNIPPET = r"""
import json, sys, time
t0 = time.perf_counter()
import fastppo
res = {"import_fastppo_s": time.perf_counter() - t0}
import numpy as np
rng = np.random.default_rng(0)
T, N = 128, 8
rewards = rng.standard_normal((T, N)).astype(np.float32)
values = rng.standard_normal((T, N)).astype(np.float32)
last_values = rng.standard_normal(N).astype(np.float32)
terminated = rng.random((T, N)) < 0.02
try:
    t0 = time.perf_counter()
    fastppo.gae(rewards, values, last_values, terminated)
    res["first_gae_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fastppo.gae(rewards, values, last_values, terminated)
    res["second_gae_s"] = time.perf_counter() - t0
except Exception as e:
    res["gae_error"] = f"{type(e).__name__}: {e}"
if "--no-warmup" in sys.argv:
    res["warmup_skipped"] = True
else:
    try:
        t0 = time.perf_counter()
        fastppo.warmup()
        res["warmup_s"] = time.perf_counter() - t0
    except Exception as e:
        res["warmup_error"] = f"{type(e).__name__}: {e}"
print("FASTPPO_STARTUP " + json.dumps(res))
"""

STARTUP_METRICS: tuple[tuple[str, str], ...] = (
    ("import_fastppo_s", "import fastppo"),
    ("first_gae_s", "first fastppo.gae [128x8] float32"),
    ("second_gae_s", "second fastppo.gae [128x8] float32"),
    ("warmup_s", "fastppo.warmup()"),
)


def _run_snippet(timeout_s: float, warmup: bool = True) -> dict[str, Any]:
    """Run the start-up snippet in a fresh interpreter; errors become an ``error`` key."""
    env = dict(os.environ)
    # The child must import this very fastppo, installed or not.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _STARTUP_SNIPPET, *([] if warmup else ["--no-warmup"])],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:g} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("FASTPPO_STARTUP "):
            return dict(json.loads(line[len("FASTPPO_STARTUP ") :]))
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit code {proc.returncode}: {tail}"}


def measure_startup(timeout_s: float = 300.0, warmup: bool = True) -> dict[str, dict[str, Any]]:
    """Start-up latency in two fresh interpreters.

    The first process populates Numba's on-disk cache (so it shows compile
    time if the cache was cold); the second one measures what every later
    process pays: loading cached machine code.

    With ``warmup=False`` (``--quick``) neither process runs ``warmup()``:
    on a cold cache it compiles every kernel of every module, which alone can
    take longer than the whole quick run may.
    """
    return {
        "first_process": _run_snippet(timeout_s, warmup=warmup),
        "warm_cache": _run_snippet(timeout_s, warmup=warmup),
    }


# --------------------------------------------------------------------------- machine


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """Where the numbers come from: hardware, threads and library versions."""
    import numba
    import numpy

    layer: str
    try:
        layer = numba.threading_layer()
    except ValueError:  # only known once a parallel kernel has run
        layer = "not initialised (no parallel kernel ran)"
    usable: int | None
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    import fastppo

    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "numba_threads": int(numba.get_num_threads()),
        "threading_layer": layer,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "torch": _version("torch"),
        "fastppo": fastppo.__version__,
        "env": {
            k: os.environ[k]
            for k in ("NUMBA_NUM_THREADS", "NUMBA_THREADING_LAYER", "OMP_NUM_THREADS")
            if k in os.environ
        },
    }


# --------------------------------------------------------------------------- report


def _fmt_ratio(r: dict[str, Any]) -> str:
    if r["is_baseline"] and r["status"] == "ok":
        return "1.00x (base)"
    if r["ratio"] is None:
        return "-"
    v = r["ratio"]
    return f"{v:.3g}x" if v < 1000 else f"{v:.0f}x"


def _fmt_status(r: dict[str, Any]) -> str:
    if r["status"] == "ok":
        spread = r["spread"] or 0.0
        return f"{format_time(r['median_s'])} +-{spread * 50:.0f}%"
    if r["status"] == "unavailable":
        return f"n/a ({r['reason']})"
    return r["status"].upper()


def format_table(results: list[GroupResult]) -> str:
    """Markdown table: one row per (group, impl)."""
    lines = [
        "| group | impl | median (+-IQR/2) | ratio vs baseline | GB/s | target |",
        "|---|---|---:|---:|---:|---|",
    ]
    for gr in results:
        for i, r in enumerate(gr.rows):
            gbps = f"{r['gb_per_s']:.2f}" if r["gb_per_s"] is not None else "-"
            target = gr.group.target if i == 0 else ""
            cells = [gr.group.name, r["impl"], _fmt_status(r), _fmt_ratio(r), gbps, target]
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def format_startup(startup: dict[str, dict[str, Any]]) -> str:
    """Markdown table of the start-up measurements (two processes side by side)."""
    cols = list(startup)
    lines = [
        "| start-up | " + " | ".join(c.replace("_", " ") for c in cols) + " |",
        "|---|" + "---:|" * len(cols),
    ]
    for key, name in STARTUP_METRICS:
        cells = []
        for c in cols:
            d = startup[c]
            if key in d:
                cells.append(format_time(d[key]))
            elif key == "warmup_s" and d.get("warmup_skipped"):
                cells.append("skipped (--quick)")
            else:
                err = d.get("error") or d.get("gae_error" if "gae" in key else "warmup_error")
                cells.append(f"n/a ({err})" if err else "n/a")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _chart(results: list[GroupResult], path: str) -> bool:
    """Bar chart of ratios, one bar per timed non-baseline impl; False if none."""
    from fastppo import plots

    if not plots.available():
        return False

    labels: list[str] = []
    values: list[float] = []
    groups: list[str] = []
    for gr in results:
        for r in gr.rows:
            if r["status"] == "ok" and not r["is_baseline"] and r["ratio"]:
                labels.append(r["impl"])
                values.append(r["ratio"])
                groups.append(f"{gr.group.name} (vs {gr.group.baseline})")
    if not values:
        return False
    plots.bar_chart(
        path,
        "fastppo bench: speed-up over baseline",
        labels,
        values,
        "ratio = baseline median / impl median (log scale; > 1 is faster)",
        log=True,
        groups=groups,
        ref_line=1.0,
        unit="x",
    )
    return True


# --------------------------------------------------------------------------- main


def main(
    quick: bool = False,
    full: bool = False,
    out: str = "bench_out",
    only: str | None = None,
    *,
    startup: bool = True,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the benchmark suites, print the tables, write ``bench.json`` and ``bench.png``.

    Parameters
    ----------
    quick : bool
        Small inputs and short timing (the whole run stays under a minute).
    full : bool
        Every size and every installed peer, longer timing.
    out : str
        Output directory (created if missing).
    only : str, optional
        Run only groups whose name contains this text (case-insensitive).
    startup : bool, default True
        Also measure import, first-call and warm-up latency in fresh processes.
    stdout, stderr : text streams, optional
        Where tables and progress go (default: ``sys.stdout``/``sys.stderr``).

    Returns
    -------
    int
        0 on success; 1 if a check failed, an impl raised, a group is
        malformed, or ``only`` matched no group.
    """
    fn = "fastppo bench"
    for name, v in (("quick", quick), ("full", full), ("startup", startup)):
        if not isinstance(v, bool):
            raise TypeError(f"{fn}: {name} must be a bool, got {v!r}")
    if quick and full:
        raise ValueError(f"{fn}: quick and full must not both be set, got quick=True, full=True")
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"{fn}: out must be a directory path, got {out!r}")
    if only is not None and not isinstance(only, str):
        raise TypeError(f"{fn}: only must be a str or None, got {only!r}")
    so = stdout if stdout is not None else sys.stdout
    se = stderr if stderr is not None else sys.stderr
    budget = QUICK if quick else FULL if full else DEFAULT
    mode = "quick" if quick else "full" if full else "default"
    t_run = time.perf_counter()

    suites = []
    for m in SUITES:
        t0 = time.perf_counter()
        suites.append(load_suite(m, quick=quick, full=full))
        # Suites import their peers (torch, ...) here: often a large share of --quick.
        print(
            f"suite {m}: {len(suites[-1].groups)} groups, {time.perf_counter() - t0:.1f} s", file=se
        )
    todo = [g for s in suites for g in s.groups]
    if only is not None:
        todo = [g for g in todo if only.lower() in g.name.lower()]

    for s in suites:
        if s.error is not None:
            print(f"{s.module}: {NOT_AVAILABLE} ({s.error})", file=so)
    results: list[GroupResult] = []
    for i, g in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {g.name} ...", file=se, end="", flush=True)
        gr = run_group(g, budget)
        status = "ok" if gr.failure is None else "FAILED"
        print(f" {status} ({gr.seconds:.1f} s)", file=se, flush=True)
        results.append(gr)

    startup_res: dict[str, dict[str, Any]] | None = None
    if startup:
        print("start-up latency (2 fresh processes) ...", file=se, end="", flush=True)
        t0 = time.perf_counter()
        # --quick keeps its time bound: no warmup() and a short timeout.
        startup_res = measure_startup(60.0 if quick else 300.0, warmup=not quick)
        print(f" done ({time.perf_counter() - t0:.1f} s)", file=se, flush=True)

    if results:
        print(f"\n## fastppo bench ({mode})\n", file=so)
        print(format_table(results), file=so)
    if startup_res is not None:
        print("\n" + format_startup(startup_res), file=so)

    os.makedirs(out, exist_ok=True)
    json_path = os.path.join(out, "bench.json")
    png_path = os.path.join(out, "bench.png")
    failures = [{"group": r.group.name, "error": r.failure} for r in results if r.failure]
    report = {
        "schema": SCHEMA_VERSION,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "only": only,
        "budget": {"per_impl_s": budget.per_impl_s, "rounds": budget.rounds},
        "machine": machine_info(),
        "suites": [s.as_dict() for s in suites],
        "rows": [r for gr in results for r in gr.rows],
        "failures": failures,
        "startup": startup_res,
        "wall_s": time.perf_counter() - t_run,
    }
    from fastppo._files import write_atomic

    write_atomic(json_path, (json.dumps(report, indent=1, allow_nan=False) + "\n").encode())
    wrote_png = _chart(results, png_path)
    print(f"\nwrote {json_path}" + (f" and {png_path}" if wrote_png else ""), file=so)

    code = 0
    if only is not None and not todo:
        print(f"{fn}: --only {only!r} matched no group", file=se)
        code = 1
    for f in failures:
        print(f"{fn}: FAILED group {f['group']!r}: {f['error']}", file=se)
        code = 1
    return code
