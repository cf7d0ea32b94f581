"""Actor-learner results: throughput per backend, CartPole to 475, policy lag.

Run from the repository root::

    python bench/actor_learner.py                 # everything (several minutes)
    python bench/actor_learner.py --only throughput --cost-us 500
    python bench/actor_learner.py --only cartpole --backend processes
    python bench/actor_learner.py --quick         # a smoke pass

Throughput uses CartPole with a real per-step cost: every ``env.step`` also
runs ``--cost-us`` microseconds of compiled, GIL-free arithmetic, as a
simulator written in C would. Rates are steady-state (start-up of processes,
Ray workers and JIT loading excluded: see ``ActorLearnerReport.steady_sps``)
and are compared, in the same run, with the synchronous ``PPOTrainer`` at the
same rollout size. The figures are only comparable within one run: the
machine's other load moves them all.

Writes ``--out`` (JSON) with every figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from fastppo._jit import kernel
from fastppo.actor_learner import ActorLearnerConfig, run
from fastppo.ppo.config import PPOConfig


@kernel("f8(i8, f8)")
def _spin(n: int, x: float) -> float:  # pragma: no cover - compiled
    # a dependent chain the compiler cannot fold away: ~1 ns per iteration
    for _ in range(n):
        x = x * 0.999999 + 1e-9
    return x


class CostlyStep(gym.Wrapper):
    """Adds ``cost_us`` microseconds of GIL-free compute to every step."""

    def __init__(self, env: gym.Env, cost_us: float, iters_per_us: float) -> None:
        super().__init__(env)
        self.n = int(cost_us * iters_per_us)
        self.sink = 0.0

    def step(self, action: Any) -> Any:
        self.sink = _spin(self.n, self.sink)
        return self.env.step(action)


def _calibrate() -> float:
    _spin(10, 0.0)
    n = 2_000_000
    best = min(_timed(lambda: _spin(n, 0.0)) for _ in range(5))
    return n / (best * 1e6)


def _timed(f: Any) -> float:
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def costly_cartpole(cost_us: float, iters_per_us: float) -> gym.Env:
    return CostlyStep(gym.make("CartPole-v1"), cost_us, iters_per_us)


# ---------------------------------------------------------------- throughput
def throughput(args: argparse.Namespace) -> dict[str, Any]:
    ipu = _calibrate()
    env_fn = functools.partial(costly_cartpole, args.cost_us, ipu)
    n_steps = 256
    ppo = PPOConfig(batch_size=256, n_epochs=2, hidden_sizes=(64, 64))
    rows: list[dict[str, Any]] = []
    updates = 6 if args.quick else 16
    for n in (1, 2):
        # the synchronous baseline: the same rollout (n envs x n_steps), stepped in turn
        from fastppo.ppo.trainer import PPOTrainer

        def sync_sps(n: int) -> float:
            tr = PPOTrainer(env_fn, ppo.replace(n_envs=n, n_steps=n_steps, batch_size=256))
            tr.learn(2 * n * n_steps)  # compile / warm up
            t = time.perf_counter()
            tr.learn((2 + updates) * n * n_steps)
            dt = time.perf_counter() - t
            tr.envs.close()
            return updates * n * n_steps / dt

        samples = [sync_sps(n) for _ in range(args.repeat)]
        rows.append({"impl": "PPOTrainer (sync)", "actors": n, "sps": float(np.median(samples)),
                     "samples": samples})  # fmt: skip
        print(_row(rows[-1]), flush=True)
        for backend in args.backends:
            cfg = ActorLearnerConfig(
                num_actors=n,
                num_steps=n_steps,
                total_env_steps=(2 + updates) * n * n_steps,
                seed=0,
            )
            reps = [run(env_fn, cfg, ppo, backend=backend)[1] for _ in range(args.repeat)]
            samples = [r.steady_sps(skip=2) for r in reps]
            rows.append(
                {
                    "impl": f"actor_learner[{backend}]",
                    "actors": n,
                    "sps": float(np.median(samples)),
                    "samples": samples,
                    "lag": reps[-1].lag_stats(),
                    "restarts": sum(r.actor_restarts for r in reps),
                }
            )
            print(_row(rows[-1]), flush=True)
    base = {r["actors"]: r["sps"] for r in rows if r["impl"].startswith("PPOTrainer")}
    for r in rows:
        r["vs_sync_same_actors"] = r["sps"] / base[r["actors"]]
        one = next(x for x in rows if x["impl"] == r["impl"] and x["actors"] == 1)
        r["vs_own_1_actor"] = r["sps"] / one["sps"]
    return {"cost_us": args.cost_us, "iters_per_us": ipu, "rows": rows}


def _row(r: dict[str, Any]) -> str:
    lag = r.get("lag")
    extra = f"  lag mean {lag['mean']:.2f} max {lag['max']:.0f}" if lag else ""
    spread = " ".join(f"{x:.0f}" for x in r.get("samples", []))
    return f"{r['impl']:<28} actors={r['actors']}  {r['sps']:9.0f} steps/s  [{spread}]{extra}"


# ------------------------------------------------------------------ cartpole
def cartpole(args: argparse.Namespace) -> dict[str, Any]:
    # RL-Zoo's tuned CartPole PPO (8 envs x 32 steps = 256 per update, 20 epochs,
    # lr 1e-3 annealed, gamma 0.98, lambda 0.8), as 2 actors x 128 steps
    cfg = ActorLearnerConfig(
        num_actors=2,
        num_steps=128,
        total_env_steps=40_000 if args.quick else args.cartpole_steps,
        broadcast_every=1,
        use_vtrace=True,
        gamma=0.98,
        gae_lambda=0.8,
        seed=args.seed,
    )
    ppo = PPOConfig(
        batch_size=256,
        n_epochs=20,
        learning_rate=1e-3,
        anneal_lr=True,
        ent_coef=0.0,
        clip_range=0.2,
        hidden_sizes=(64, 64),
        seed=args.seed,
    )
    t = time.perf_counter()
    policy, rep = run("CartPole-v1", cfg, ppo, backend=args.cartpole_backend)
    wall = time.perf_counter() - t
    env = gym.make("CartPole-v1")
    returns = []
    for ep in range(20):
        obs, _ = env.reset(seed=10_000 + ep)
        done, total = False, 0.0
        while not done:
            obs, r, term, trunc, _ = env.step(policy.act(obs, deterministic=True))
            total += float(r)
            done = term or trunc
        returns.append(total)
    last = rep.episode_returns[-50:]
    out = {
        "backend": args.cartpole_backend,
        "env_steps": rep.env_steps,
        "updates": rep.updates,
        "wall_s": wall,
        "eval_mean_return_20_episodes": float(np.mean(returns)),
        "train_mean_return_last_50": float(np.mean(last)) if last else float("nan"),
        "first_episode_moving20_return_ge_475": _first_reaching(rep, 475.0),
        "lag": rep.lag_stats(),
        "lag_histogram": {str(k): v for k, v in sorted(rep.lag_histogram.items())},
        "final_losses": rep.losses,
    }
    print(json.dumps({k: v for k, v in out.items() if k != "final_losses"}, indent=1))
    return out


def _first_reaching(rep: Any, target: float) -> int | None:
    r = np.array(rep.episode_returns)
    if r.size < 20:
        return None
    ma = np.convolve(r, np.ones(20) / 20, mode="valid")
    hit = np.flatnonzero(ma >= target)
    return int(hit[0] + 20) if hit.size else None  # in episodes


# ------------------------------------------------------------- failure speed
def detection(args: argparse.Namespace) -> dict[str, Any]:
    """Seconds from SIGKILL of an actor process to the learner's failure event."""
    import signal

    from fastppo.actor_learner.actor import DefaultPolicyFn, Failure, make_env_fn, spec_for
    from fastppo.actor_learner.processes import ProcessesBackend

    env_fn = make_env_fn("CartPole-v1")
    pfn = DefaultPolicyFn()
    probe = env_fn()
    pol = pfn(probe.observation_space, probe.action_space)
    spec = spec_for(probe, pol)
    cfg = ActorLearnerConfig(num_actors=1, num_steps=64, total_env_steps=64).validate()
    be = ProcessesBackend(cfg, env_fn, pfn, spec)
    from fastppo.actor_learner import encode_weights

    times = []
    try:
        be.start(encode_weights(pol.params, 0), 0, 0, {0: 0})
        for inc in range(3):
            got = False
            deadline = time.monotonic() + 60
            while not got and time.monotonic() < deadline:
                got = any(not isinstance(e, Failure) for e in be.poll(0.05))
            os.kill(be.actors[0].proc.pid, signal.SIGKILL)
            t = time.monotonic()
            while True:
                ev = [e for e in be.poll(cfg.failure_poll_s) if isinstance(e, Failure)]
                if ev or time.monotonic() - t > 30:
                    break
            times.append(time.monotonic() - t)
            be.restart(0, inc + 1, 0)
    finally:
        be.shutdown()
    print(f"processes: SIGKILL seen after {', '.join(f'{x * 1e3:.0f} ms' for x in times)}")
    out: dict[str, Any] = {"processes_sigkill_detect_s": times}
    if "ray" in args.backends:
        out["ray_sigkill_detect_s"] = _ray_detection(cfg, env_fn, pfn, spec, pol)
    return out


def _ray_detection(cfg: Any, env_fn: Any, pfn: Any, spec: Any, pol: Any) -> list[float]:
    import signal

    import ray

    from fastppo.actor_learner import encode_weights
    from fastppo.actor_learner.actor import Failure
    from fastppo.actor_learner.ray_backend import RayBackend

    be = RayBackend(cfg, env_fn, pfn, spec)
    times = []
    try:
        be.start(encode_weights(pol.params, 0), 0, 0, {0: 0})
        for inc in range(3):
            deadline = time.monotonic() + 120
            got = False
            while not got and time.monotonic() < deadline:
                got = any(not isinstance(e, Failure) for e in be.poll(0.05))
            pid = ray.get(be.slots[0].handle.pid.remote(), timeout=60)
            os.kill(pid, signal.SIGKILL)
            t = time.monotonic()
            while time.monotonic() - t < 60:
                if any(isinstance(e, Failure) for e in be.poll(cfg.failure_poll_s)):
                    break
            times.append(time.monotonic() - t)
            be.restart(0, inc + 1, be.slots[0].requested)
    finally:
        be.shutdown()
    print(f"ray: SIGKILL seen after {', '.join(f'{x * 1e3:.0f} ms' for x in times)}")
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--only", choices=["throughput", "cartpole", "detection"], default=None)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cost-us", type=float, default=300.0)
    p.add_argument("--repeat", type=int, default=1, help="runs per figure (median)")
    p.add_argument("--backends", nargs="+", default=["threads", "processes", "ray"])
    p.add_argument("--cartpole-backend", default="processes")
    p.add_argument("--cartpole-steps", type=int, default=150_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="bench/actor_learner_results.json")
    args = p.parse_args()
    if "ray" in args.backends:
        try:
            import ray  # noqa: F401
        except ImportError:
            print('ray not installed (pip install "fastppo[ray]"): skipping the ray backend')
            args.backends = [b for b in args.backends if b != "ray"]
    res: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    if args.only in (None, "detection"):
        res["detection"] = detection(args)
    if args.only in (None, "throughput"):
        res["throughput"] = throughput(args)
    if args.only in (None, "cartpole"):
        res["cartpole"] = cartpole(args)
    with open(args.out, "w") as fh:
        json.dump(res, fh, indent=1, default=float)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
