"""gymnasium vector envs in either autoreset mode -> fastppo.gae, correctly.

    python examples/gymnasium_autoreset.py [--steps 128]

Under the default NEXT_STEP autoreset, the step after an episode ends is a
reset row (no transition): ``RolloutFlags`` builds the ``valid`` mask for it.
Under SAME_STEP autoreset, the final observation of a truncated episode is in
``infos["final_obs"]``: ``RolloutFlags`` asks the critic for its value. Either
way ``fastppo.gae(..., **flags.gae_kwargs())`` bootstraps truncated episodes
from V(final obs) and never across an episode boundary. The two modes see the
same episodes here, and the advantages of the shared transitions agree.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import fastppo
from fastppo.compat.gym import RolloutFlags

W = np.array([0.5, 0.3, -0.2, 0.1])


def critic(obs: np.ndarray) -> np.ndarray:
    """Stands in for a value network: any function of the observation."""
    return np.tanh(np.asarray(obs, np.float32) @ W.astype(np.float32)) + 1.0


# A short time limit, so that episodes end both ways: the pole falls
# (terminated) or time runs out (truncated).
def collect(mode: AutoresetMode, steps: int, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    envs = SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=9) for _ in range(n_envs)],
        autoreset_mode=mode,
    )
    obs, _ = envs.reset(seed=0)
    flags = RolloutFlags(steps, n_envs, envs)  # reads the env's autoreset mode
    rewards = np.zeros((steps, n_envs), np.float32)
    values = np.zeros((steps, n_envs), np.float32)
    for t in range(steps):
        values[t] = critic(obs)
        actions = (obs @ W > 0).astype(np.int64)
        obs, r, term, trunc, infos = envs.step(actions)
        rewards[t] = r
        flags.record(t, term, trunc, infos, value_fn=critic)
    adv, _ = fastppo.gae(
        rewards, values, critic(obs), **flags.gae_kwargs(), gamma=0.99, gae_lambda=0.95
    )
    valid = flags.valid if flags.valid is not None else np.ones_like(adv, bool)
    print(
        f"{mode.name:9s}: {int(flags.terminated.sum())} terminated, "
        f"{int(flags.truncated.sum())} truncated, {int((~valid).sum())} reset rows masked"
    )
    envs.close()
    return adv, valid


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=128)
    p.add_argument("--n-envs", type=int, default=4)
    args = p.parse_args()
    a_next, valid = collect(AutoresetMode.NEXT_STEP, args.steps, args.n_envs)
    a_same, _ = collect(AutoresetMode.SAME_STEP, args.steps, args.n_envs)
    # Env 0's first transitions are the same in both modes; compare the first
    # 10 (far from the rollout's end, so their traces are complete in both).
    shared = a_next[valid[:, 0], 0][:10]
    print("advantages, next-step:", np.round(shared, 4))
    print("advantages, same-step:", np.round(a_same[:10, 0], 4))
    assert np.allclose(shared, a_same[:10, 0], atol=1e-5)


if __name__ == "__main__":
    main()
