"""Before/after kernel timings of two checkouts, in alternating processes.

Neighbours on a shared VM move absolute times by 2x from minute to minute, so
each round runs the same snippet once per checkout, back to back, pinned to
one core with ``NUMBA_NUM_THREADS=1``; each checkout keeps its own Numba cache
(warmed by a first, untimed process). Prints medians over the rounds::

    taskset -c 0 python bench/ab_compare.py --before /tmp/old-checkout --rounds 3

``--after`` defaults to this checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SNIPPET = r"""
import json, time
import numpy as np
import fastppo
rng = np.random.default_rng(0)
def med(f, n, rep=7):
    f()
    ts = []
    for _ in range(rep):
        t = time.perf_counter()
        for _ in range(n):
            f()
        ts.append((time.perf_counter() - t) / n)
    return float(np.median(ts)) * 1e6
T, N = 2048, 64
r = rng.standard_normal((T, N)).astype(np.float32)
v = rng.standard_normal((T, N)).astype(np.float32)
lv = v[0].copy(); te = rng.random((T, N)) < 0.02
blp = (0.3 * rng.standard_normal((T, N))).astype(np.float32)
tlp = (0.3 * rng.standard_normal((T, N))).astype(np.float32)
# batch-major [N, T] data, passed as its [T, N] transpose
rb, vb, teb, blpb, tlpb = (np.ascontiguousarray(a.T).T for a in (r, v, te, blp, tlp))
lg = rng.standard_normal((4096, 18)).astype(np.float32)
mk = rng.random((4096, 18)) < 0.8; mk[:, 0] = True
mu = rng.standard_normal((4096, 6)).astype(np.float32)
ls = (0.1 * rng.standard_normal(6)).astype(np.float32)
mu64k = rng.standard_normal((65536, 6)).astype(np.float32)
lsn = (0.1 * rng.standard_normal((4096, 6))).astype(np.float32)
r11 = np.ones((1, 1), np.float32); te11 = np.zeros((1, 1), bool)
ob17 = rng.standard_normal((16, 17)).astype(np.float32)
big17 = rng.standard_normal((65536, 17)).astype(np.float32)
ob64 = rng.standard_normal((4096, 64)).astype(np.float32)
rms17, rms64 = fastppo.RunningMeanStd((17,)), fastppo.RunningMeanStd((64,))
rn = fastppo.ReturnNormalizer(16); f16 = np.zeros(16, bool)
from fastppo.nn import ActorCritic, Adam
from fastppo.ppo import PPOConfig, PPOTrainer, RolloutBatch, ppo_update
import fastppo.envs
cfg = PPOConfig(batch_size=64, n_epochs=10, ent_coef=0.01, clip_range_vf=0.2)
pol = ActorCritic((4,), "discrete", nvec=[2], seed=0)
opt = Adam(pol.n_params, cfg.learning_rate, eps=cfg.adam_eps, dtype=pol.dtype)
ob = rng.normal(size=(2048, 4)); act = rng.integers(0, 2, 2048)
lp0, _, v0 = pol.evaluate(ob, act)
batch = RolloutBatch(obs=ob, actions=act, logp=lp0, advantages=rng.normal(size=2048),
                     returns=v0 + rng.normal(size=2048), values=v0, valid=np.ones(2048, bool))
sq_a = np.tanh(mu + 0.5).astype(np.float32)
ev8 = fastppo.envs.make_vec("CartPole-v1", 8, seed=0); ev8.reset(seed=0)
a8 = np.zeros(8, np.int64)
evc = fastppo.envs.make_vec("MountainCarContinuous-v0", 4096, seed=0); evc.reset(seed=0)
ac = rng.uniform(-1, 1, (4096, 1)).astype(np.float32)
def train_cartpole():
    t = PPOTrainer("CartPole-v1", PPOConfig(n_envs=8, n_steps=32, seed=0))
    t.learn(8192)
print(json.dumps({
    "gae [2048x64]": med(lambda: fastppo.gae(r, v, lv, te), 20),
    "vtrace [2048x64]": med(lambda: fastppo.vtrace(blp, tlp, r, v, lv, te), 10),
    "discounted_returns [2048x64]": med(lambda: fastppo.discounted_returns(r, lv, te), 20),
    "gae [2048x64] batch-major": med(lambda: fastppo.gae(rb, vb, lv, teb), 20),
    "vtrace [2048x64] batch-major": med(lambda: fastppo.vtrace(blpb, tlpb, rb, vb, lv, teb), 10),
    "discounted_returns [2048x64] batch-major": med(
        lambda: fastppo.discounted_returns(rb, lv, teb), 20),
    "gae [1x1]": med(lambda: fastppo.gae(r11, r11, r11[0], te11), 2000),
    "sample_categorical [4096x18] + mask": med(
        lambda: fastppo.sample_categorical(lg, mk, seed=1, counter=2), 50),
    "sample_categorical N=1": med(lambda: fastppo.sample_categorical(lg[:1], seed=1, counter=2), 2000),
    "sample_gaussian [4096x6]": med(lambda: fastppo.sample_gaussian(mu, ls, seed=1, counter=2), 50),
    "sample_gaussian [65536x6]": med(lambda: fastppo.sample_gaussian(mu64k, ls, seed=1, counter=2), 5),
    "sample_gaussian [4096x6] log_std [N, A]": med(
        lambda: fastppo.sample_gaussian(mu, lsn, seed=1, counter=2), 50),
    "sample_gaussian [4096x6] squash": med(
        lambda: fastppo.sample_gaussian(mu, ls, seed=1, counter=2, squash=True), 50),
    "categorical_logp_entropy [4096x18]": med(
        lambda: fastppo.categorical_logp_entropy(lg, np.zeros(4096, np.int64), mk), 50),
    "RunningMeanStd.update [16x17]": med(lambda: rms17.update(ob17), 2000),
    "RunningMeanStd.update [4096x64]": med(lambda: rms64.update(ob64), 50),
    "RunningMeanStd.normalize [4096x64]": med(lambda: rms64.normalize(ob64, clip=10.0), 50),
    "RunningMeanStd.update [65536x17]": med(lambda: rms17.update(big17), 5),
    "ReturnNormalizer.normalize [16]": med(lambda: rn.normalize(r[0, :16], f16, f16), 2000),
    "gaussian_logp_entropy [4096x6] squash": med(
        lambda: fastppo.gaussian_logp_entropy(mu, ls, sq_a, squash=True), 50),
    "ActorCritic.act N=1 [64x64]": med(lambda: pol.act(ob[:1]), 2000),
    "make_vec CartPole-v1 step N=8": med(lambda: ev8.step(a8), 2000),
    "make_vec MountainCarContinuous-v0 step N=4096": med(lambda: evc.step(ac), 50),
    "PPOTrainer CartPole-v1 8192 steps, compiled env (ms)": med(
        train_cartpole, 1, rep=3) / 1e3,
    "PPO update CartPole 2048x10 epochs mb 64 (ms)": med(
        lambda: ppo_update(pol, opt, batch, cfg, rng), 1, rep=3) / 1e3,
}))
"""  # noqa: E501


def _run(src: Path, cache: str) -> dict[str, float]:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, NUMBA_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", SNIPPET], env=env, cwd=src, capture_output=True, text=True
    )
    if out.returncode:
        raise RuntimeError(f"{src}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        caches = {"before": f"{tmp}/before", "after": f"{tmp}/after"}
        trees = {"before": a.before, "after": a.after}
        for k in trees:  # compile once, untimed
            _run(trees[k], caches[k])
        rows: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
        for _ in range(a.rounds):
            for k in trees:
                rows[k].append(_run(trees[k], caches[k]))
    # the median says what is typical; the best round is the least disturbed
    # by neighbours, so a change shows in both or in neither
    print("| call (us) | before median | after median | ratio | before best | after best | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name in rows["before"][0]:
        b = statistics.median(r[name] for r in rows["before"])
        f = statistics.median(r[name] for r in rows["after"])
        bm = min(r[name] for r in rows["before"])
        fm = min(r[name] for r in rows["after"])
        print(f"| {name} | {b:.1f} | {f:.1f} | {f / b:.2f} | {bm:.1f} | {fm:.1f} | {fm / bm:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
