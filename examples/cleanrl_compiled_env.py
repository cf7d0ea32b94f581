"""A CleanRL-style PPO loop on fastppo's compiled CartPole-v1: one env call per step.

    python examples/cleanrl_compiled_env.py [--total-timesteps 50000]

The loop is examples/cleanrl_ppo.py's (CleanRL's ppo.py: same storage, same
names); only the env line changes::

    envs = fastppo.envs.make_vec("CartPole-v1", num_envs, seed=1, autoreset_mode="same_step")

``make_vec`` returns a ``gymnasium.vector.VectorEnv`` with gymnasium's
spaces, time limit, autoreset and dynamics, whose ``step`` runs all the envs
in one compiled call instead of one Python ``CartPoleEnv.step`` each. Needs
``pip install torch``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from torch import nn

from fastppo import envs as fenvs
from fastppo.compat.cleanrl import cleanrl_gae


def layer(i: int, o: int, std: float = float(np.sqrt(2))) -> nn.Linear:
    lin = nn.Linear(i, o)
    nn.init.orthogonal_(lin.weight, std)
    nn.init.constant_(lin.bias, 0.0)
    return lin


class Agent(nn.Module):
    def __init__(self, n_obs: int, n_act: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(
            layer(n_obs, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0)
        )
        self.actor = nn.Sequential(
            layer(n_obs, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_act, 0.01)
        )

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        dist = torch.distributions.Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--total-timesteps", type=int, default=50_000)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    args = p.parse_args()
    torch.manual_seed(1)
    torch.set_num_threads(1)

    # CleanRL's ppo.py expects same-step autoreset (the step that ends an
    # episode returns the reset observation): the compiled env offers it.
    envs = fenvs.make_vec("CartPole-v1", args.num_envs, seed=1, autoreset_mode="same_step")
    n_obs = envs.single_observation_space.shape[0]  # type: ignore[index]
    agent = Agent(n_obs, int(envs.single_action_space.n))  # type: ignore[attr-defined]
    opt = torch.optim.Adam(agent.parameters(), lr=2.5e-4, eps=1e-5)
    S, E = args.num_steps, args.num_envs
    obs = torch.zeros((S, E, n_obs))
    actions = torch.zeros((S, E))
    logprobs, rewards, dones, values = (torch.zeros((S, E)) for _ in range(4))

    next_obs = torch.tensor(envs.reset(seed=1)[0])
    next_done = torch.zeros(E)
    episodic: list[float] = []
    ep_ret = np.zeros(E)
    env_s = 0.0
    t0 = time.perf_counter()
    for _ in range(args.total_timesteps // (S * E)):
        for step in range(S):
            obs[step], dones[step] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            values[step], actions[step], logprobs[step] = value.flatten(), action, logprob
            t_env = time.perf_counter()
            o, r, term, trunc, _ = envs.step(action.numpy())
            env_s += time.perf_counter() - t_env
            ep_ret += r
            for i in np.flatnonzero(term | trunc):
                episodic.append(float(ep_ret[i]))
                ep_ret[i] = 0.0
            rewards[step] = torch.as_tensor(r, dtype=torch.float32)
            next_obs = torch.from_numpy(o)  # float32 already, a fresh array each step
            next_done = torch.as_tensor(term | trunc, dtype=torch.float32)

        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages, returns = cleanrl_gae(
            rewards, values, dones, next_value, next_done,
            gamma=args.gamma, gae_lambda=args.gae_lambda,
        )  # fmt: skip

        b_obs, b_act = obs.reshape(-1, n_obs), actions.reshape(-1)
        b_logp, b_adv, b_ret = logprobs.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        for _epoch in range(4):
            for mb in torch.randperm(S * E).split(S * E // 4):
                _, newlogp, ent, newv = agent.get_action_and_value(b_obs[mb], b_act[mb].long())
                ratio = (newlogp - b_logp[mb]).exp()
                adv = (b_adv[mb] - b_adv[mb].mean()) / (b_adv[mb].std() + 1e-8)
                pg = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
                v_loss = 0.5 * ((newv.flatten() - b_ret[mb]) ** 2).mean()
                loss = pg + 0.5 * v_loss - 0.01 * ent.mean()
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                opt.step()
    recent = np.mean(episodic[-20:]) if episodic else float("nan")
    print(
        f"{len(episodic)} episodes in {time.perf_counter() - t0:.1f} s "
        f"({env_s:.2f} s in env.step); mean return of the last 20: {recent:.1f}"
    )
    envs.close()


if __name__ == "__main__":
    main()
