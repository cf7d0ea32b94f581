"""Learning results of ``fastppo train``'s defaults: final evaluation return per env and seed.

Targets (issue 4): CartPole-v1 mean evaluation return >= 475 within 100k env
steps (3 of 3 seeds); Acrobot-v1 >= -100 within 200k; Pendulum-v1 >= -250
within 200k. Issue 14: LunarLander-v3 >= 200 within 500k, Hopper-v5 >= 1500
within 300k, HalfCheetah-v5 >= 3000 within 300k (``pip install ".[bench]"``
brings Box2D and MuJoCo; they run only when named with ``--env``).
Evaluation: 20 deterministic episodes on fresh envs after training, with
the trained observation statistics.

Usage::

    python bench/learning.py                          # all three envs, seeds 0 1 2
    python bench/learning.py --env CartPole-v1 --seeds 0 1 2
    python bench/learning.py --env Pendulum-v1 --seeds 0 --steps 200000
    python bench/learning.py --backend compiled gymnasium  # both env backends, alternating

``--backend``: ``compiled`` (the default: the compiled env and fused rollout
where the id has one) and/or ``gymnasium`` (gymnasium's own envs, as before
the compiled envs); given both, each seed runs on one then the other, so
the wall times compare in one session.

``bench/sb3_learning.py`` runs Stable-Baselines3 with the zoo's values on the
same envs, budgets and evaluation, for the comparison issue 14 asks for.

Writes ``<out>/learning.json`` and one ``<out>/<env>.png`` learning curve per env.
Not part of CI (minutes per run on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from fastppo.plots import line_chart
from fastppo.ppo import PPOConfig, PPOTrainer
from fastppo.ppo.defaults import env_defaults

TARGETS = {"CartPole-v1": 475.0, "Acrobot-v1": -100.0, "Pendulum-v1": -250.0}
#: issue 14's targets and budgets (steps); not in the default ``--env`` list
HEAVY = {"LunarLander-v3": (200.0, 500_000), "Hopper-v5": (1500.0, 300_000),
         "HalfCheetah-v5": (3000.0, 300_000)}  # fmt: skip
TARGETS.update({k: t for k, (t, _) in HEAVY.items()})


def budget_of(env_id: str, steps: int | None = None) -> int:
    """The step budget of ``env_id``: ``steps`` if given, else issue 14's for the
    heavy envs, else the per-env default's ``total_timesteps``."""
    if steps:
        return int(steps)
    return HEAVY[env_id][1] if env_id in HEAVY else int(env_defaults(env_id)["total_timesteps"])


def run_one(
    env_id: str, seed: int, steps: int | None, episodes: int, backend: str = "compiled"
) -> dict:
    d = env_defaults(env_id)
    budget = budget_of(env_id, steps)
    d.pop("total_timesteps", None)
    cfg = PPOConfig(**d, seed=seed, env_backend=backend)
    # Whole updates only, never past the budget ("within N steps" is strict).
    budget -= budget % cfg.rollout_size
    progress: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()
    with PPOTrainer(env_id, cfg) as tr:
        # (steps, wall s, mean of the last 20 training episodes) after each update
        tr.learn(budget, lambda rec: progress.append(
            (tr.num_timesteps, time.perf_counter() - t0, tr.recent_return())))  # fmt: skip
        wall = time.perf_counter() - t0
        ev = tr.evaluate(n_episodes=episodes)
        curve = [(int(s), float(r)) for s, r, _ in tr.episodes]
        return {
            "env_id": env_id,
            "seed": seed,
            "backend": backend,
            "steps": tr.num_timesteps,
            "wall_s": wall,
            "eval": ev,
            "target": TARGETS.get(env_id),
            "passed": ev["mean_return"] >= TARGETS.get(env_id, -np.inf),
            "curve": curve,
            "solved_at": solved_at(progress, TARGETS.get(env_id)),
        }


def solved_at(
    progress: list[tuple[int, float, float]], target: float | None
) -> tuple[int, float] | None:
    """(steps, wall s) of the first update after which the mean of the last 20
    training episodes reached ``target``: the time-to-solve both scripts report."""
    for step, wall, ret in progress:
        if target is not None and ret >= target:
            return step, wall
    return None


def _smooth(ys: list[float], k: int = 20) -> list[float]:
    c = np.cumsum(np.insert(np.asarray(ys, float), 0, 0.0))
    return [(c[i + 1] - c[max(0, i - k + 1)]) / (i + 1 - max(0, i - k + 1)) for i in range(len(ys))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", nargs="*", default=[k for k in TARGETS if k not in HEAVY])
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="override the per-env budget")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--backend", nargs="*", default=["compiled"], choices=("compiled", "gymnasium"))
    ap.add_argument("--out", default="bench_out/learning")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "learning.json")
    results = json.load(open(path)) if os.path.exists(path) else []
    for env_id in a.env:
        for seed, backend in [(s, b) for s in a.seeds for b in a.backend]:
            r = run_one(env_id, seed, a.steps, a.episodes, backend)
            key = (env_id, seed, backend)
            results = [x for x in results if (x["env_id"], x["seed"], x.get("backend")) != key]
            results.append(r)
            ev = r["eval"]
            print(
                f"{env_id:12s} seed {seed} {backend:9s}: {r['steps']} steps in "
                f"{r['wall_s']:6.1f} s, eval "
                f"{ev['mean_return']:8.1f} +- {ev['std_return']:6.1f} over {a.episodes} episodes "
                f"(target >= {r['target']}: {'PASS' if r['passed'] else 'FAIL'}; "
                f"training mean crossed it at {r['solved_at']})",
                flush=True,
            )
            with open(path, "w") as f:
                json.dump(results, f)
        series = {
            f"seed {x['seed']} {x.get('backend', 'compiled')}": (
                [s for s, _ in x["curve"]],
                _smooth([v for _, v in x["curve"]]),
            )
            for x in results
            if x["env_id"] == env_id and x["curve"]
        }
        if series:
            line_chart(
                os.path.join(a.out, f"{env_id}.png"),
                f"{env_id}: fastppo PPO, mean of last 20 training episodes",
                "env steps",
                "episode return",
                series,
            )


if __name__ == "__main__":
    main()
