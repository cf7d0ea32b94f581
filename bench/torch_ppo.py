"""PyTorch twins of fastppo's PPO pieces, for the speed comparison and the gradient check.

* :class:`TorchActorCritic` -- the same two tanh/relu MLP stacks, loaded from a
  :class:`fastppo.nn.ActorCritic` (weights transposed: torch stores ``[out, in]``).
* :func:`torch_ppo_loss` -- the identical loss (minibatch advantage normalisation,
  clamped log-ratio, clipped surrogate, optional value clipping, entropy bonus).
* :func:`torch_ppo_update` -- the identical update loop (epochs x shuffled
  minibatches, ``clip_grad_norm_``, ``torch.optim.Adam`` with eps 1e-5), written the
  way CleanRL writes it.
* :func:`cleanrl_train` -- a CleanRL-style end-to-end PPO (``ppo.py``, discrete
  actions) on a gymnasium ``SyncVectorEnv`` with the same hyperparameters as a
  :class:`fastppo.PPOConfig`.

Install torch from the ``bench`` extra: ``pip install torch==2.13.0`` (CPU wheel).
Run the end-to-end comparison: ``python bench/torch_ppo.py --e2e [--steps N]``.
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from fastppo.nn import ActorCritic
from fastppo.ppo import PPOConfig


class TorchActorCritic(nn.Module):
    """Actor and critic ``nn.Sequential`` stacks mirroring a fastppo ``ActorCritic``."""

    def __init__(self, policy: ActorCritic, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        act = nn.Tanh if policy.activation == "tanh" else nn.ReLU
        self.kind = policy.kind
        self.nvec = [int(n) for n in policy.nvec]

        def stack(layers: list[tuple[np.ndarray, np.ndarray]]) -> nn.Sequential:
            mods: list[nn.Module] = []
            for i, (w, b) in enumerate(layers):
                lin = nn.Linear(w.shape[0], w.shape[1], dtype=dtype)
                with torch.no_grad():
                    lin.weight.copy_(torch.from_numpy(w.T.copy()))
                    lin.bias.copy_(torch.from_numpy(b.copy()))
                mods.append(lin)
                if i < len(layers) - 1:
                    mods.append(act())
            return nn.Sequential(*mods)

        self.actor = stack(policy.actor_layers)
        self.critic = stack(policy.critic_layers)
        if policy.log_std is not None:
            self.log_std = nn.Parameter(torch.tensor(policy.log_std.copy(), dtype=dtype))
            self.ls_bounds = (policy.log_std_min, policy.log_std_max)

    def flat_grad(self) -> np.ndarray:
        """Gradients in fastppo's flat layout (actor W^T, b..., log_std, critic W^T, b...)."""
        parts: list[np.ndarray] = []
        for seq in (self.actor, self.critic):
            for m in seq:
                if isinstance(m, nn.Linear):
                    assert m.weight.grad is not None and m.bias.grad is not None
                    parts += [
                        m.weight.grad.detach().numpy().T.ravel(),
                        m.bias.grad.detach().numpy(),
                    ]
            if seq is self.actor and hasattr(self, "log_std"):
                assert self.log_std.grad is not None
                parts.append(self.log_std.grad.detach().numpy())
        return np.concatenate(parts).astype(np.float64)

    def dist_logp_entropy(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[Any, Any]:
        out = self.actor(obs)
        if self.kind == "continuous":
            ls = torch.clamp(self.log_std, *self.ls_bounds).expand_as(out)
            d = torch.distributions.Normal(out, ls.exp())
            return d.log_prob(actions).sum(-1), d.entropy().sum(-1)
        logp = torch.zeros(out.shape[0], dtype=out.dtype)
        ent = torch.zeros(out.shape[0], dtype=out.dtype)
        acts = actions.reshape(out.shape[0], -1)
        for c, z in enumerate(torch.split(out, self.nvec, dim=1)):
            d = torch.distributions.Categorical(logits=z)
            logp = logp + d.log_prob(acts[:, c])
            ent = ent + d.entropy()
        return logp, ent


def torch_ppo_loss(
    model: TorchActorCritic,
    obs: torch.Tensor,
    actions: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    ret: torch.Tensor,
    old_val: torch.Tensor,
    cfg: PPOConfig,
) -> torch.Tensor:
    """The PPO loss exactly as fastppo defines it (all rows valid)."""
    logp, ent = model.dist_logp_entropy(obs, actions)
    logratio = torch.clamp(logp - old_logp, -20.0, 20.0)
    ratio = logratio.exp()
    if cfg.normalize_advantage:
        mean = adv.mean()
        std = adv.std() if adv.numel() > 1 else torch.zeros((), dtype=adv.dtype)
        if float(std) > 1e-8 + 1e-6 * abs(float(mean)):
            adv = (adv - mean) / (std + 1e-8)
        else:
            adv = adv - mean
    pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_range, 1 + cfg.clip_range))
    v = model.critic(obs).squeeze(-1)
    if cfg.clip_range_vf is None:
        v_loss = 0.5 * ((v - ret) ** 2).mean()
    else:
        vc = old_val + torch.clamp(v - old_val, -cfg.clip_range_vf, cfg.clip_range_vf)
        v_loss = 0.5 * torch.max((v - ret) ** 2, (vc - ret) ** 2).mean()
    return pg.mean() - cfg.ent_coef * ent.mean() + cfg.vf_coef * v_loss


def torch_ppo_update(
    model: TorchActorCritic,
    optimizer: torch.optim.Optimizer,
    tensors: tuple[torch.Tensor, ...],
    cfg: PPOConfig,
    perms: np.ndarray,
) -> None:
    """CleanRL's update loop: ``perms[e]`` orders epoch ``e``'s rows."""
    obs, actions, old_logp, adv, ret, old_val = tensors
    params = [p for p in model.parameters()]
    n = perms.shape[1]
    for e in range(perms.shape[0]):
        perm = torch.from_numpy(perms[e])
        for start in range(0, n, cfg.batch_size):
            i = perm[start : start + cfg.batch_size]
            loss = torch_ppo_loss(
                model, obs[i], actions[i], old_logp[i], adv[i], ret[i], old_val[i], cfg
            )
            optimizer.zero_grad()
            loss.backward()
            if cfg.max_grad_norm is not None:
                nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            optimizer.step()


class _CleanRLAgent(nn.Module):
    def __init__(self, obs_dim: int, n_actions: int, hidden: tuple[int, ...], act: str) -> None:
        super().__init__()
        a = nn.Tanh if act == "tanh" else nn.ReLU

        def layer(i: int, o: int, std: float) -> nn.Linear:
            lin = nn.Linear(i, o)
            nn.init.orthogonal_(lin.weight, std)
            nn.init.constant_(lin.bias, 0.0)
            return lin

        def stack(out: int, std: float) -> nn.Sequential:
            sizes = [obs_dim, *hidden]
            mods: list[nn.Module] = []
            for i, o in itertools.pairwise(sizes):
                mods += [layer(i, o, np.sqrt(2)), a()]
            mods.append(layer(sizes[-1], out, std))
            return nn.Sequential(*mods)

        self.critic = stack(1, 1.0)
        self.actor = stack(n_actions, 0.01)

    def get_value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def get_action_and_value(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        probs = torch.distributions.Categorical(logits=self.actor(x))
        if action is None:
            action = probs.sample()
        return action, probs.log_prob(action), probs.entropy(), self.critic(x)


def cleanrl_train(env_id: str, total_timesteps: int, cfg: PPOConfig) -> dict[str, float]:
    """CleanRL ``ppo.py`` (discrete) with ``cfg``'s hyperparameters; returns timing and returns."""
    import gymnasium as gym

    torch.manual_seed(cfg.seed)
    shuffle_rng = np.random.default_rng(cfg.seed)
    envs = gym.vector.SyncVectorEnv([lambda: gym.make(env_id)] * cfg.n_envs)
    agent = _CleanRLAgent(
        int(np.prod(envs.single_observation_space.shape)),
        int(envs.single_action_space.n),
        cfg.hidden_sizes,
        cfg.activation,
    )
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)
    T, N = cfg.n_steps, cfg.n_envs
    obs = torch.zeros((T, N, *envs.single_observation_space.shape))
    actions = torch.zeros((T, N))
    logprobs = torch.zeros((T, N))
    rewards = torch.zeros((T, N))
    dones = torch.zeros((T, N))
    values = torch.zeros((T, N))
    global_step = 0
    t0 = time.perf_counter()
    next_obs_np, _ = envs.reset(seed=cfg.seed)
    next_obs = torch.Tensor(next_obs_np)
    next_done = torch.zeros(N)
    num_iterations = -(-total_timesteps // (T * N))
    ep_ret = np.zeros(N)
    finished: list[float] = []
    for iteration in range(1, num_iterations + 1):
        if cfg.anneal_lr:
            optimizer.param_groups[0]["lr"] = (
                1.0 - (iteration - 1.0) / num_iterations
            ) * cfg.learning_rate
        for step in range(T):
            global_step += N
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs_np, reward, term, trunc, _ = envs.step(action.cpu().numpy())
            next_done_np = np.logical_or(term, trunc)
            ep_ret += reward
            for i in np.flatnonzero(next_done_np):
                finished.append(float(ep_ret[i]))
                ep_ret[i] = 0.0
            rewards[step] = torch.tensor(reward).view(-1)
            next_obs, next_done = torch.Tensor(next_obs_np), torch.Tensor(next_done_np)
        with torch.no_grad():
            next_value = agent.get_value(next_obs).reshape(1, -1)
            advantages = torch.zeros_like(rewards)
            lastgaelam = 0
            for t in reversed(range(T)):
                if t == T - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + cfg.gamma * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = (
                    delta + cfg.gamma * cfg.gae_lambda * nextnonterminal * lastgaelam
                )
            returns = advantages + values
        b_obs = obs.reshape((-1, *envs.single_observation_space.shape))
        b_logprobs = logprobs.reshape(-1)
        b_actions = actions.reshape(-1)
        b_advantages = advantages.reshape(-1)
        b_returns = returns.reshape(-1)
        b_values = values.reshape(-1)
        b_inds = np.arange(T * N)
        for _ in range(cfg.n_epochs):
            shuffle_rng.shuffle(b_inds)
            for start in range(0, T * N, cfg.batch_size):
                mb = b_inds[start : start + cfg.batch_size]
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(
                    b_obs[mb], b_actions.long()[mb]
                )
                logratio = newlogprob - b_logprobs[mb]
                ratio = logratio.exp()
                mb_adv = b_advantages[mb]
                if cfg.normalize_advantage:
                    mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8)
                pg_loss = torch.max(
                    -mb_adv * ratio,
                    -mb_adv * torch.clamp(ratio, 1 - cfg.clip_range, 1 + cfg.clip_range),
                ).mean()
                newvalue = newvalue.view(-1)
                v_loss = 0.5 * ((newvalue - b_returns[mb]) ** 2).mean()
                loss = pg_loss - cfg.ent_coef * entropy.mean() + v_loss * cfg.vf_coef
                optimizer.zero_grad()
                loss.backward()
                if cfg.max_grad_norm is not None:
                    nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                optimizer.step()
        del b_values
    wall = time.perf_counter() - t0
    envs.close()
    return {
        "wall_s": wall,
        "steps": float(global_step),
        "sps": global_step / wall,
        "recent_return": float(np.mean(finished[-20:])) if finished else float("nan"),
    }


def _e2e(steps: int, seed: int, threads: int) -> None:
    from fastppo.ppo import PPOTrainer
    from fastppo.ppo.defaults import env_defaults

    torch.set_num_threads(threads)
    d = env_defaults("CartPole-v1")
    d.pop("total_timesteps")
    cfg = PPOConfig(**d, seed=seed)
    # Compile (or load) fastppo's kernels outside the timed run, as torch's are prebuilt.
    with PPOTrainer("CartPole-v1", cfg.replace(n_steps=8, batch_size=64)) as warm:
        warm.learn(64)
    t0 = time.perf_counter()
    with PPOTrainer("CartPole-v1", cfg) as tr:
        tr.learn(steps)
        ours = time.perf_counter() - t0
        ev = tr.evaluate(10)
    theirs = cleanrl_train("CartPole-v1", steps, cfg)
    print(
        f"CartPole-v1 {steps} steps, {cfg.n_envs} envs x {cfg.n_steps}, batch {cfg.batch_size}, "
        f"{cfg.n_epochs} epochs, torch threads {threads}\n"
        f"fastppo : {ours:7.1f} s  ({steps / ours:6.0f} SPS)  eval return {ev['mean_return']:.1f}\n"
        f"cleanrl : {theirs['wall_s']:7.1f} s  ({theirs['sps']:6.0f} SPS)  "
        f"last-20 train return {theirs['recent_return']:.1f}\n"
        f"speed-up: {theirs['wall_s'] / ours:.2f}x"
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--e2e", action="store_true", help="end-to-end CartPole wall-clock comparison")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    a = ap.parse_args()
    if a.e2e:
        _e2e(a.steps, a.seed, a.threads)
    else:
        ap.print_help()
