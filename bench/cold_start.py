"""What a fresh install pays: first calls, ``warmup()`` and a first training run.

Each row runs in its own interpreter with an empty ``NUMBA_CACHE_DIR``, so it
measures compilation (and nothing a previous row left in a cache), pinned to
one core with ``NUMBA_NUM_THREADS=1``. With ``--installed PYTHON`` each row
runs that interpreter's installed fastppo with its own on-disk cache instead
(what a user of a default install, whose build compiled the kernels, pays)::

    taskset -c 0 python bench/cold_start.py            # this checkout
    taskset -c 0 python bench/cold_start.py --src DIR  # another checkout (before/after)
    # an install whose build compiled the kernels (the default):
    taskset -c 0 python bench/cold_start.py --installed VENV/bin/python
    # time `pip install .` of this checkout's HEAD (a clone, a fresh venv; both
    # cores, as a user's install), then measure that install as --installed does:
    python bench/cold_start.py --pip-install

Prints a markdown table (seconds) and, with ``--json PATH``, writes the rows.
Issue 11's targets: every first call <= 2 s, ``warmup()`` <= 30 s, a first
``fastppo train CartPole-v1`` compiling for <= 8 s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_SETUP = """
import numpy as np
T, N = 8, 4
rng = np.random.default_rng(0)
r = rng.standard_normal((T, N)).astype(np.float32)
lv = r[0].copy()
te = np.zeros((T, N), bool)
lg = rng.standard_normal((N, 3)).astype(np.float32)
mk = np.ones((N, 3), bool)
act = np.zeros(N, np.int64)
"""

# name -> the first call (after `import fastppo` and _SETUP)
CALLS = {
    "gae": "fastppo.gae(r, r, lv, te)",
    "vtrace": "fastppo.vtrace(r, r, r, r, lv, te)",
    "discounted_returns": "fastppo.discounted_returns(r, lv, te)",
    "sample_categorical": "fastppo.sample_categorical(lg, seed=0, counter=0)",
    "sample_categorical (mask)": "fastppo.sample_categorical(lg, mk, seed=0, counter=0)",
    "sample_multi_categorical": "fastppo.sample_multi_categorical(lg, [1, 2], seed=0, counter=0)",
    "sample_gaussian": "fastppo.sample_gaussian(lg, lg[0], seed=0, counter=0)",
    "sample_gaussian (squash)": (
        "fastppo.sample_gaussian(lg, lg[0], seed=0, counter=0, squash=True)"
    ),
    "categorical_logp_entropy": "fastppo.categorical_logp_entropy(lg, act)",
    "gaussian_logp_entropy": "fastppo.gaussian_logp_entropy(lg, lg[0], lg)",
    "sample_categorical_bytes": (
        "fastppo.sample_categorical_bytes(lg.astype(np.float16).tobytes(), n_envs=N, "
        "n_actions=3, dtype='float16', seed=0, counter=0)"
    ),
    "sample_gaussian_bytes": (
        "fastppo.sample_gaussian_bytes(lg[:, :2].astype(np.float16).tobytes(), n_envs=N, "
        "action_dim=1, dtype='float16', seed=0, counter=0)"
    ),
    "RunningMeanStd.update": "fastppo.RunningMeanStd((3,)).update(lg)",
    "ReturnNormalizer.normalize": "fastppo.ReturnNormalizer(N).normalize(r[0], te[0], te[0])",
    "codec.encode": "fastppo.codec.encode(lg, 'bfloat16')",
    "warmup()": "fastppo.warmup()",
}

_SNIPPET = """
import time, json, sys
t0 = time.perf_counter()
import fastppo
t1 = time.perf_counter()
{setup}
t2 = time.perf_counter()
{call}
t3 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "first_call_s": t3 - t2}}))
"""


#: ``--installed``: the interpreter of an install to measure as it is
_INSTALLED: str | None = None


def _python() -> str:
    return _INSTALLED or sys.executable


def _env(src: Path, cache: str) -> dict[str, str]:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, NUMBA_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    if _INSTALLED:  # the install's own package and cache, not this checkout's
        env.pop("NUMBA_CACHE_DIR")
        env.pop("PYTHONPATH")
    return env


def first_call(src: Path, call: str, timeout_s: float = 900.0) -> dict[str, float]:
    """Seconds for ``import fastppo`` and for ``call``, in a fresh process and cache."""
    with tempfile.TemporaryDirectory(prefix="fastppo-cold-") as cache:
        code = _SNIPPET.format(setup=_SETUP, call=call)
        out = subprocess.run(
            [_python(), "-c", code],
            env=_env(src, cache),
            cwd=cache if _INSTALLED else src,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    if out.returncode:
        raise RuntimeError(f"{call} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_train(src: Path, timeout_s: float = 900.0) -> dict[str, float]:
    """A first ``fastppo train CartPole-v1`` (short run): wall time, cold then warm cache.

    The compile time is the difference: the same run, the same work, once
    with an empty cache and once loading what the first one wrote.
    """
    args = [_python(), "-m", "fastppo.cli", "train", "CartPole-v1"]
    args += ["--total-timesteps", "4096", "--quiet", "--eval-episodes", "1"]
    times = []
    with tempfile.TemporaryDirectory(prefix="fastppo-cold-") as cache:
        with tempfile.TemporaryDirectory(prefix="fastppo-run-") as runs:
            for i in range(2):
                t0 = time.perf_counter()
                subprocess.run(
                    [*args, "--out", str(Path(runs) / f"run{i}")],
                    env=_env(src, cache),
                    cwd=runs if _INSTALLED else src,
                    capture_output=True,
                    text=True,
                    timeout=timeout_s,
                    check=True,
                )
                times.append(time.perf_counter() - t0)
    return {"cold_s": times[0], "warm_s": times[1], "compile_s": times[0] - times[1]}


def pip_install(src: Path, work: Path) -> tuple[float, str]:
    """Seconds for ``python -m venv`` + ``pip install .`` of a clone of ``src``'s HEAD
    in ``work`` (a clean tree: no build directory or kernel cache of earlier
    builds), and the new venv's interpreter. Uses pip's wheel cache as it is."""
    clone = work / "src"
    subprocess.run(["git", "clone", "-q", str(src), str(clone)], check=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "venv", str(clone / ".venv")], check=True)
    python = str(clone / ".venv" / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", "."], cwd=clone, check=True)
    return time.perf_counter() - t0, python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--only", nargs="*", help="row names to run (default: all)")
    ap.add_argument("--no-train", action="store_true", help="skip the training row")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    ap.add_argument("--installed", metavar="PYTHON", help="measure this interpreter's install")
    ap.add_argument(
        "--pip-install",
        action="store_true",
        help="time venv + `pip install .` of a clone of --src's HEAD, then measure that install",
    )
    a = ap.parse_args(argv)
    global _INSTALLED
    _INSTALLED = a.installed
    if a.pip_install:
        work = Path(tempfile.mkdtemp(prefix="fastppo-install-"))
        seconds, _INSTALLED = pip_install(a.src, work)
        print(f"venv + pip install . of {a.src} HEAD: {seconds:.1f} s (in {work})\n")
    rows: dict[str, dict[str, float]] = {}
    cache = "the install's cache" if _INSTALLED else "an empty cache"
    print(f"| first call in a fresh process, {cache} | import s | call s |")
    print("|---|---|---|")
    for name, call in CALLS.items():
        if a.only and name not in a.only:
            continue
        rows[name] = res = first_call(a.src, call)
        print(f"| {name} | {res['import_s']:.2f} | {res['first_call_s']:.2f} |", flush=True)
    if not a.no_train and (not a.only or "train" in a.only):
        rows["train"] = res = first_train(a.src)
        print(
            f"| fastppo train CartPole-v1 (4096 steps) | cold {res['cold_s']:.1f} / "
            f"warm {res['warm_s']:.1f} | compile {res['compile_s']:.1f} |"
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
