"""Stable-Baselines3 PPO with fastppo's compiled GAE: one keyword argument.

    python examples/sb3_rollout_buffer.py [--timesteps 20000]

``rollout_buffer_class=fastppo.compat.sb3.RolloutBuffer`` swaps SB3's Python
GAE loop for fastppo's kernel; everything else (collection, the time-limit
bootstrap, training) is SB3's own, and the advantages equal SB3's to float32
rounding. Needs ``pip install stable-baselines3``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timesteps", type=int, default=20_000)
    p.add_argument("--n-envs", type=int, default=8)
    p.add_argument("--n-steps", type=int, default=256)
    args = p.parse_args()

    import torch

    torch.set_num_threads(1)  # small MLP: threads cost more than they give

    from stable_baselines3 import PPO
    from stable_baselines3.common.buffers import RolloutBuffer as SB3Buffer
    from stable_baselines3.common.env_util import make_vec_env

    from fastppo.compat.sb3 import RolloutBuffer

    env = make_vec_env("CartPole-v1", n_envs=args.n_envs, seed=0)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=args.n_steps,
        seed=0,
        device="cpu",
        rollout_buffer_class=RolloutBuffer,
    )
    t0 = time.perf_counter()
    model.learn(total_timesteps=args.timesteps)
    print(
        f"trained {args.timesteps} steps in {time.perf_counter() - t0:.1f} s "
        f"with {type(model.rollout_buffer).__module__}.RolloutBuffer"
    )

    # The last rollout's arrays through SB3's loop and through fastppo's kernel.
    buf = model.rollout_buffer
    ref = SB3Buffer(
        buf.buffer_size,
        buf.observation_space,
        buf.action_space,
        device="cpu",
        gae_lambda=buf.gae_lambda,
        gamma=buf.gamma,
        n_envs=buf.n_envs,
    )
    mine = RolloutBuffer(
        buf.buffer_size,
        buf.observation_space,
        buf.action_space,
        device="cpu",
        gae_lambda=buf.gae_lambda,
        gamma=buf.gamma,
        n_envs=buf.n_envs,
    )
    T, N = buf.buffer_size, buf.n_envs

    def time_major(a: np.ndarray) -> np.ndarray:
        # SB3's training pass flattens some arrays env-major to [N * T, 1]
        return a if a.shape == (T, N) else a.reshape(N, T).T

    for b in (ref, mine):
        b.rewards[:] = time_major(buf.rewards)
        b.values[:] = time_major(buf.values)
        b.episode_starts[:] = time_major(buf.episode_starts)
    last = torch.zeros(buf.n_envs, 1)
    dones = np.zeros(buf.n_envs, bool)
    ref.compute_returns_and_advantage(last, dones)
    mine.compute_returns_and_advantage(last, dones)
    diff = float(np.abs(ref.advantages - mine.advantages).max())
    print(f"max |SB3 - fastppo| advantage difference: {diff:.2e}")
    assert diff < 1e-4


if __name__ == "__main__":
    main()
