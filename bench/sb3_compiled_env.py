"""SB3's PPO on its own DummyVecEnv vs on fastppo's compiled env: wall time of the same run.

Measures ``PPO.learn`` wall time for rl-zoo3's CartPole-v1 PPO entry (8 envs,
n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, 20 epochs, ent_coef 0,
linear learning rate 1e-3 and clip range 0.2, 1e5 steps, ``device="cpu"``,
``torch.set_num_threads(1)``, the same seed) on two VecEnvs:

* ``dummy``: ``stable_baselines3.common.env_util.make_vec_env("CartPole-v1",
  n_envs=8, seed=seed)`` -- SB3's ``DummyVecEnv`` of gymnasium envs, each in
  SB3's ``Monitor``;
* ``compiled``: ``VecMonitor(fastppo.compat.sb3.make_vec_env("CartPole-v1", 8,
  seed=seed))`` -- the same episode statistics, from one compiled step call.

Runs alternate (dummy, compiled, dummy, compiled, ...), each in a fresh
interpreter so neither inherits the other's warm caches; construction,
compilation (Numba's cache is warmed first) and evaluation are outside the
timed span. After each run the policy is evaluated deterministically on
gymnasium's own CartPole-v1 (``--eval-episodes`` episodes). The env streams
differ between the two (gymnasium's numpy generator vs fastppo's counter-based
one), so the learning curves differ too; the final returns are reported beside
the times. Also reports the part of ``learn`` outside ``PPO.train`` (rollout
collection: env steps plus SB3's policy calls and buffer writes) and
``VecEnv.step`` alone (random actions, 8 envs) for each.

Usage (pin to one core; the runs take ~30-60 s each on a small machine)::

    taskset -c 1 python bench/sb3_compiled_env.py                 # 2 runs each, seed 0
    taskset -c 1 python bench/sb3_compiled_env.py --repeats 3 --seed 1

Prints one line per run and a summary with the medians; ``--json PATH`` also
writes the results. Needs ``pip install stable-baselines3 torch``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("dummy", "compiled")
ZOO = dict(
    n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0
)  # fmt: skip


def _make_env(kind: str, seed: int) -> Any:
    if kind == "dummy":
        from stable_baselines3.common.env_util import make_vec_env

        return make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    from stable_baselines3.common.vec_env import VecMonitor

    from fastppo.compat.sb3 import make_vec_env as compiled_vec_env

    return VecMonitor(compiled_vec_env("CartPole-v1", 8, seed=seed))


def _step_us(kind: str, steps: int = 3000) -> float:
    """Microseconds per ``VecEnv.step`` of 8 envs with random actions."""
    import numpy as np

    env = _make_env(kind, 0)
    env.reset()
    acts = np.random.default_rng(0).integers(0, 2, (steps, 8))
    for a in acts[:100]:
        env.step(a)
    t0 = time.perf_counter()
    for a in acts:
        env.step(a)
    return (time.perf_counter() - t0) / steps * 1e6


def one_run(kind: str, seed: int, timesteps: int, eval_episodes: int) -> dict[str, Any]:
    """Train once in this process; returns the timing and the evaluation."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    torch.set_num_threads(1)
    env = _make_env(kind, seed)
    model = PPO(
        "MlpPolicy",
        env,
        learning_rate=lambda p: p * 1e-3,
        clip_range=lambda p: p * 0.2,
        seed=seed,
        device="cpu",
        **ZOO,  # type: ignore[arg-type]
    )
    train_s = 0.0
    sb3_train = model.train

    def timed_train() -> None:  # the gradient phase; the rest of learn() is collection
        nonlocal train_s
        t = time.perf_counter()
        sb3_train()
        train_s += time.perf_counter() - t

    model.train = timed_train  # type: ignore[method-assign]
    t0 = time.perf_counter()
    model.learn(total_timesteps=timesteps)
    learn_s = time.perf_counter() - t0
    mean, std = cast(
        tuple[float, float],
        evaluate_policy(model, Monitor(gym.make("CartPole-v1")), eval_episodes, deterministic=True),
    )
    return {
        "kind": kind,
        "seed": seed,
        "learn_s": learn_s,
        "collect_s": learn_s - train_s,
        "eval_mean": float(mean),
        "eval_std": float(std),
        "step_us": _step_us(kind),
        "cpus": sorted(os.sched_getaffinity(0)),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2, help="runs of each kind (interleaved)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timesteps", type=int, default=100_000)
    p.add_argument("--eval-episodes", type=int, default=5)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # a child run
    args = p.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.seed, args.timesteps, args.eval_episodes)))
        return 0

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    # compile (or load from Numba's cache) the compiled env once, outside any timed run
    subprocess.run(
        [sys.executable, "-c", "import numpy as np; from fastppo.compat.sb3 import make_vec_env; "
         "e = make_vec_env('CartPole-v1', 8, seed=0); e.reset(); e.step(np.zeros(8, int))"],
        check=True, cwd=ROOT, env=env,
    )  # fmt: skip
    results: list[dict[str, Any]] = []
    for r in range(args.repeats):
        for kind in KINDS:
            cmd = [sys.executable, __file__, "--one", kind, "--seed", str(args.seed),
                   "--timesteps", str(args.timesteps),
                   "--eval-episodes", str(args.eval_episodes)]  # fmt: skip
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(res)
            print(
                f"run {r + 1} {kind:9s} learn {res['learn_s']:6.1f} s "
                f"(collect {res['collect_s']:5.1f} s)  "
                f"eval {res['eval_mean']:6.1f} +- {res['eval_std']:5.1f}  "
                f"step {res['step_us']:6.1f} us  cpus {res['cpus']}",
                flush=True,
            )
    print(f"\nSB3 PPO, rl-zoo3 CartPole-v1, {args.timesteps} steps, seed {args.seed}:")
    med = {}
    for kind in KINDS:
        rs = [x for x in results if x["kind"] == kind]
        med[kind] = statistics.median(x["learn_s"] for x in rs)
        evals = ", ".join(f"{x['eval_mean']:.1f}" for x in rs)
        step = statistics.median(x["step_us"] for x in rs)
        coll = statistics.median(x["collect_s"] for x in rs)
        print(
            f"  {kind:9s} median learn {med[kind]:6.1f} s (collect {coll:5.1f} s)  "
            f"step {step:6.1f} us  evals [{evals}]"
        )
    print(f"  speed-up of the whole run: {med['dummy'] / med['compiled']:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "results": results}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
