"""The PPO update (10 epochs) and ``policy.act`` against PyTorch at the sizes of issue 14.

Each row builds the same actor-critic in fastppo and in torch (float32, one
thread; :class:`torch_ppo.TorchActorCritic` loads fastppo's weights), then
times the identical update (or ``act``: sample and log-prob) in interleaved
rounds in one process, and prints the ratio torch time / fastppo time (> 1:
fastppo is faster)::

    taskset -c 0 env NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \\
        python bench/ppo_update_matrix.py [--rounds 5] [--json PATH]

``OPENBLAS_NUM_THREADS=1`` keeps the BLAS that fastppo's GEMMs call (SciPy's)
on one thread, as torch is; it must be set before the process starts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch_ppo import TorchActorCritic, torch_ppo_update

from fastppo.nn import ActorCritic, Adam
from fastppo.ppo import PPOConfig, RolloutBatch, ppo_update

#: (name, kind, obs_dim, act (n or dim), hidden, samples, minibatch)
UPDATE_ROWS = (
    ("CartPole shapes, 64x64, 2048, mb 64", "discrete", 4, 2, 64, 2048, 64),
    ("CartPole shapes, 64x64, 2048, mb 512", "discrete", 4, 2, 64, 2048, 512),
    ("obs 17 / act 6, 64x64, 2048, mb 64", "continuous", 17, 6, 64, 2048, 64),
    ("obs 17 / act 6, 256x256, 2048, mb 64", "continuous", 17, 6, 256, 2048, 64),
    ("obs 17 / act 6, 256x256, 4096, mb 1024", "continuous", 17, 6, 256, 4096, 1024),
)
#: (name, n_envs, hidden)
ACT_ROWS = (
    ("act N=1, 64x64", 1, 64),
    ("act N=4096, 64x64", 4096, 64),
    ("act N=4096, 256x256", 4096, 256),
)


def _policy(kind: str, obs_dim: int, na: int, hidden: int, seed: int = 0) -> ActorCritic:
    common = dict(hidden_sizes=(hidden, hidden), seed=seed)
    if kind == "discrete":
        return ActorCritic((obs_dim,), "discrete", nvec=[na], **common)
    return ActorCritic((obs_dim,), "continuous", action_dim=na, log_std_init=-0.5, **common)


def random_batch(p: ActorCritic, n: int, rng: np.random.Generator) -> RolloutBatch:
    """``n`` random rows for ``p``: observations, actions, and noisy log-probs and values."""
    if p.kind == "discrete":
        a = rng.integers(0, int(p.nvec[0]), n)
    else:
        a = rng.normal(size=(n, p.action_dim)).astype(p.dtype)
    obs = rng.normal(size=(n, *p.obs_shape))
    logp, _, v = p.evaluate(obs, a)
    return RolloutBatch(
        obs=obs,
        actions=a,
        logp=logp + rng.normal(0, 0.2, n),
        advantages=rng.normal(size=n),
        returns=v + rng.normal(size=n),
        values=v + rng.normal(0, 0.1, n),
        valid=np.ones(n, bool),
    )


def tensors(batch: RolloutBatch, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    """The batch as torch tensors of ``dtype`` (integer actions stay integer)."""
    acts = torch.from_numpy(np.asarray(batch.actions))
    if acts.dtype.is_floating_point:
        acts = acts.to(dtype)
    f = lambda x: torch.from_numpy(np.asarray(x, np.float64)).to(dtype)  # noqa: E731
    return (
        f(batch.obs),
        acts,
        f(batch.logp),
        f(batch.advantages),
        f(batch.returns),
        f(batch.values),
    )


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each function, run in rotating order, ``rounds`` times."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):
        order = list(fns)[r % len(fns) :] + list(fns)[: r % len(fns)]
        for k in order:
            t0 = time.perf_counter()
            fns[k]()
            times[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def update_row(kind: str, obs_dim: int, na: int, hidden: int, n: int, mb: int, rounds: int):
    rng = np.random.default_rng(0)
    p = _policy(kind, obs_dim, na, hidden)
    batch = random_batch(p, n, rng)
    cfg = PPOConfig(batch_size=mb, n_epochs=10, ent_coef=0.01, clip_range_vf=0.2)
    opt = Adam(p.n_params, cfg.learning_rate, eps=cfg.adam_eps, dtype=p.dtype)
    model = TorchActorCritic(p, torch.float32)
    opt_t = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)
    tt = tensors(batch)
    perms = np.stack([np.random.default_rng(e).permutation(n) for e in range(cfg.n_epochs)])
    fns = {
        "fastppo": lambda: ppo_update(p, opt, batch, cfg, rng),
        "torch": lambda: torch_ppo_update(model, opt_t, tt, cfg, perms),
    }
    for f in fns.values():
        f()  # compile / warm
    return interleaved(fns, rounds)


def act_row(n: int, hidden: int, rounds: int):
    p = _policy("discrete", 8, 4, hidden)
    model = TorchActorCritic(p, torch.float32)
    obs = np.random.default_rng(0).normal(size=(n, 8))
    tobs = torch.from_numpy(obs.astype(np.float32))
    reps = max(1, 20000 // n)

    def ours() -> None:
        for _ in range(reps):
            p.act(obs)

    def theirs() -> None:
        with torch.no_grad():
            for _ in range(reps):
                d = torch.distributions.Categorical(logits=model.actor(tobs))
                a = d.sample()
                d.log_prob(a)

    for f in (ours, theirs):
        f()
    med = interleaved({"fastppo": ours, "torch": theirs}, rounds)
    return {k: v / reps for k, v in med.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", help="substring of the row names to run")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows = {}
    print("| row | fastppo | torch | torch / fastppo |\n|---|---:|---:|---:|")
    for name, *args in UPDATE_ROWS:
        if a.only and a.only not in name:
            continue
        med = update_row(*args, rounds=a.rounds)
        rows[name] = med
        print(f"| update {name} | {med['fastppo'] * 1e3:.1f} ms | {med['torch'] * 1e3:.1f} ms "
              f"| {med['torch'] / med['fastppo']:.2f}x |", flush=True)  # fmt: skip
    for name, n, hidden in ACT_ROWS:
        if a.only and a.only not in name:
            continue
        med = act_row(n, hidden, a.rounds)
        rows[name] = med
        print(f"| {name} | {med['fastppo'] * 1e6:.1f} us | {med['torch'] * 1e6:.1f} us "
              f"| {med['torch'] / med['fastppo']:.2f}x |", flush=True)  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
