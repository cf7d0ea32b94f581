"""Stable-Baselines3 PPO with rl-baselines3-zoo's hyperparameters, measured as bench/learning.py
measures fastppo: the same envs, step budgets, 20 deterministic evaluation episodes (with the
trained VecNormalize statistics, rewards unnormalised) and wall time inside ``learn()``.

Values: rl-baselines3-zoo ``hyperparams/ppo.yml`` (entries for v1 / v2 / v3 ids carried to the
ids gymnasium 1.x registers); ``lin_X`` is a schedule from X to 0, ``normalize`` is SB3's
``VecNormalize``, ``policy_kwargs`` as the zoo writes them. Pendulum's entry uses gSDE, which
SB3 has. One torch thread; pin the process for timings::

    taskset -c 1 python bench/sb3_learning.py --env CartPole-v1 --seeds 0 1 2

Needs ``pip install ".[bench,compat-test]"`` (torch, Box2D, MuJoCo; stable-baselines3). Writes
``<out>/sb3_learning.json`` beside bench/learning.py's results. Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np
from learning import TARGETS, budget_of, solved_at

_MUJOCO_NET = {"log_std_init": -2, "ortho_init": False, "activation_fn": "relu",
               "net_arch": {"pi": [256, 256], "vf": [256, 256]}}  # fmt: skip
ZOO: dict[str, dict[str, Any]] = {
    "CartPole-v1": {"n_envs": 8, "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8,
                    "gamma": 0.98, "n_epochs": 20, "ent_coef": 0.0,
                    "learning_rate": "lin_0.001", "clip_range": "lin_0.2"},
    "Acrobot-v1": {"normalize": True, "n_envs": 16, "n_steps": 256, "gae_lambda": 0.94,
                   "gamma": 0.99, "n_epochs": 4, "ent_coef": 0.0},
    "Pendulum-v1": {"n_envs": 4, "n_steps": 1024, "gae_lambda": 0.95, "gamma": 0.9,
                    "n_epochs": 10, "ent_coef": 0.0, "learning_rate": 1e-3,
                    "clip_range": 0.2, "use_sde": True, "sde_sample_freq": 4},
    "LunarLander-v3": {"n_envs": 16, "n_steps": 1024, "batch_size": 64, "gae_lambda": 0.98,
                       "gamma": 0.999, "n_epochs": 4, "ent_coef": 0.01},
    "Hopper-v5": {"normalize": True, "n_envs": 1, "batch_size": 32, "n_steps": 512,
                  "gamma": 0.999, "learning_rate": 9.80828e-05, "ent_coef": 0.00229519,
                  "clip_range": 0.2, "n_epochs": 5, "gae_lambda": 0.99,
                  "max_grad_norm": 0.7, "vf_coef": 0.835671, "policy_kwargs": _MUJOCO_NET},
    "HalfCheetah-v5": {"normalize": True, "n_envs": 1, "batch_size": 64, "n_steps": 512,
                       "gamma": 0.98, "learning_rate": 2.0633e-05, "ent_coef": 0.000401762,
                       "clip_range": 0.1, "n_epochs": 20, "gae_lambda": 0.92,
                       "max_grad_norm": 0.8, "vf_coef": 0.58096, "policy_kwargs": _MUJOCO_NET},
}  # fmt: skip


def _schedule(v: Any) -> Any:
    if isinstance(v, str) and v.startswith("lin_"):
        x = float(v[4:])
        return lambda progress_remaining: progress_remaining * x
    return v


def run_one(env_id: str, seed: int, steps: int | None, episodes: int) -> dict:
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    torch.set_num_threads(1)
    hp = dict(ZOO[env_id])
    normalize, n_envs = hp.pop("normalize", False), hp.pop("n_envs")
    kw = dict(hp.pop("policy_kwargs", {}))
    if kw.get("activation_fn") == "relu":
        kw["activation_fn"] = torch.nn.ReLU
    budget = budget_of(env_id, steps)
    env = make_vec_env(env_id, n_envs=n_envs, seed=seed)
    if normalize:
        env = VecNormalize(env)
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", policy_kwargs=kw or None,
                **{k: _schedule(v) for k, v in hp.items()})  # fmt: skip
    returns: list[tuple[int, float]] = []
    progress: list[tuple[int, float, float]] = []
    t0 = time.perf_counter()

    class Track(BaseCallback):
        def _on_step(self) -> bool:
            returns.extend((self.num_timesteps, i["episode"]["r"])
                           for i in self.locals["infos"] if "episode" in i)  # fmt: skip
            return True

        def _on_rollout_end(self) -> None:
            last = [r for _, r in returns[-20:]]
            progress.append((self.num_timesteps, time.perf_counter() - t0,
                             float(np.mean(last)) if last else -np.inf))  # fmt: skip

    model.learn(budget, callback=Track())
    wall = time.perf_counter() - t0
    eval_env = make_vec_env(env_id, n_envs=1, seed=seed + 10_000)
    if normalize:
        assert isinstance(env, VecNormalize)
        eval_env = VecNormalize(eval_env, training=False, norm_reward=False)
        eval_env.obs_rms = env.obs_rms
    rets, _ = evaluate_policy(model, eval_env, n_eval_episodes=episodes, deterministic=True,
                              return_episode_rewards=True)  # fmt: skip
    mean = float(np.mean(rets))
    return {"env_id": env_id, "seed": seed, "impl": "sb3-zoo", "steps": model.num_timesteps,
            "wall_s": wall, "eval": {"mean_return": mean, "std_return": float(np.std(rets))},
            "target": TARGETS.get(env_id), "passed": mean >= TARGETS.get(env_id, -np.inf),
            "solved_at": solved_at(progress, TARGETS.get(env_id))}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", nargs="*", default=list(ZOO), choices=list(ZOO))
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None, help="override the per-env budget")
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--out", default="bench_out/learning")
    a = ap.parse_args()
    gym.make(a.env[0]).close()  # a missing Box2D / MuJoCo fails here, before any training
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "sb3_learning.json")
    results = json.load(open(path)) if os.path.exists(path) else []
    for env_id in a.env:
        for seed in a.seeds:
            r = run_one(env_id, seed, a.steps, a.episodes)
            results = [x for x in results if (x["env_id"], x["seed"]) != (env_id, seed)]
            results.append(r)
            print(f"{env_id:14s} seed {seed} sb3-zoo: {r['steps']} steps in {r['wall_s']:6.1f} s, "
                  f"eval {r['eval']['mean_return']:8.1f} +- {r['eval']['std_return']:6.1f} "
                  f"(target >= {r['target']}: {'PASS' if r['passed'] else 'FAIL'}; "
                  f"training mean crossed it at {r['solved_at']})", flush=True)  # fmt: skip
            with open(path, "w") as f:
                json.dump(results, f)


if __name__ == "__main__":
    main()
