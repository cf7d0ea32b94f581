"""The BLAS thread hold (``fastppo/_blas.py``): on against off, quiet and beside busy neighbours.

Each round runs, in fresh processes and alternating the two settings, the
fastppo side of ``ppo_update_matrix.py``'s rows (PPO update, ``act``) and a
whole ``fastppo train CartPole-v1``; "off" is ``FASTPPO_BLAS_PARALLEL_MIN=0``
(the BLAS threads as it likes, what fastppo did before the hold). ``--busy K``
starts K spinning processes for the whole run, as a neighbour would::

    python bench/blas_threads.py [--rounds 2] [--busy 0|1|2]

It prints the median time of each row per setting and the CPU time each used
per second of wall time (2.0: both cores busy). Not pinned on purpose: BLAS
threads only exist when the process may use more than one core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Runs in the child: times every row of ppo_update_matrix.py on fastppo's side.
ROWS = """
import json, statistics, sys, time
sys.path.insert(0, {here!r})
import numpy as np
from ppo_update_matrix import ACT_ROWS, UPDATE_ROWS, _policy, random_batch
from fastppo.nn import Adam
from fastppo.ppo import PPOConfig, ppo_update

def timed(f, reps):
    f()
    wall, cpu = [], []
    for _ in range(5):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(reps):
            f()
        wall.append((time.perf_counter() - t0) / reps)
        cpu.append((time.process_time() - c0) / reps)
    return statistics.median(wall), sum(cpu) / sum(wall) * len(wall) / len(cpu)

out = {{}}
for name, kind, od, na, h, n, mb in UPDATE_ROWS:
    rng = np.random.default_rng(0)
    p = _policy(kind, od, na, h)
    b = random_batch(p, n, rng)
    cfg = PPOConfig(batch_size=mb, n_epochs=10, ent_coef=0.01, clip_range_vf=0.2)
    opt = Adam(p.n_params, cfg.learning_rate, eps=cfg.adam_eps, dtype=p.dtype)
    out["update " + name] = timed(lambda: ppo_update(p, opt, b, cfg, rng), 1)
for name, n, h in ACT_ROWS:
    p = _policy("discrete", 8, 4, h)
    obs = np.random.default_rng(0).normal(size=(n, 8))
    out[name] = timed(lambda: p.act(obs), max(1, 20000 // n))
print(json.dumps(out))
"""


def child_rows(env: dict[str, str]) -> dict[str, tuple[float, float]]:
    src = ROWS.format(here=str(HERE))
    res = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(res.stderr)
    return {k: tuple(v) for k, v in json.loads(res.stdout.splitlines()[-1]).items()}


def child_train(env: dict[str, str], out: str) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "fastppo.cli", "train", "CartPole-v1", "--quiet", "--out", out]
    r0 = os.times()
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = os.times()
    if res.returncode:
        raise SystemExit(res.stderr)
    cpu = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    return wall, cpu / wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy", type=int, default=0, help="spinning neighbour processes")
    a = ap.parse_args(argv)
    sides = {"hold (default)": {}, "off (BLAS_PARALLEL_MIN=0)": {"FASTPPO_BLAS_PARALLEL_MIN": "0"}}
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    results: dict[str, dict[str, list[tuple[float, float]]]] = {s: {} for s in sides}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(a.rounds):
                order = list(sides) if r % 2 == 0 else list(sides)[::-1]
                for side in order:
                    env = dict(os.environ, **sides[side])
                    rows = child_rows(env)
                    rows["fastppo train CartPole-v1 (s)"] = child_train(env, f"{tmp}/{r}{side[0]}")
                    for k, v in rows.items():
                        results[side].setdefault(k, []).append(v)
    finally:
        for p in spin:
            p.kill()
    on, off = results.values()
    print(f"busy neighbours: {a.busy}; medians of {a.rounds} rounds; cpu = CPU s per wall s")
    print("| row | hold | cpu | off | cpu | off / hold |\n|---|---:|---:|---:|---:|---:|")
    for k in on:
        t_on = statistics.median(w for w, _ in on[k])
        t_off = statistics.median(w for w, _ in off[k])
        c_on = statistics.median(c for _, c in on[k])
        c_off = statistics.median(c for _, c in off[k])
        unit, f = ("s", 1.0) if "(s)" in k else (("ms", 1e3) if "update" in k else ("us", 1e6))
        print(
            f"| {k} | {t_on * f:.1f} {unit} | {c_on:.2f} | {t_off * f:.1f} {unit} | {c_off:.2f} "
            f"| {t_off / t_on:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
