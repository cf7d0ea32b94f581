"""A one-call replacement for the GAE block of CleanRL-style PPO loops.

CleanRL's ``ppo.py`` (and the many loops written after it) stores, per step
``t``, ``dones[t]`` = "was ``obs[t]`` the first of an episode" (the done flag
returned by the previous ``env.step``), and after the rollout computes (line breaks added)::

    with torch.no_grad():
        next_value = agent.get_value(next_obs).reshape(1, -1)
        advantages = torch.zeros_like(rewards).to(device)
        lastgaelam = 0
        for t in reversed(range(args.num_steps)):
            if t == args.num_steps - 1:
                nextnonterminal = 1.0 - next_done
                nextvalues = next_value
            else:
                nextnonterminal = 1.0 - dones[t + 1]
                nextvalues = values[t + 1]
            delta = rewards[t] + args.gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = (
                delta + args.gamma * args.gae_lambda * nextnonterminal * lastgaelam
            )
        returns = advantages + values

:func:`cleanrl_gae` computes the same thing in one compiled sweep::

    advantages, returns = cleanrl_gae(rewards, values, dones, next_value, next_done,
                                      gamma=args.gamma, gae_lambda=args.gae_lambda)

Like CleanRL it treats every done (``terminations | truncations``) as the end
of the return, with no bootstrap for truncated episodes. For the correct
time-limit bootstrap use :func:`fastppo.gae` with ``terminated``/``truncated``
and :class:`fastppo.compat.gym.RolloutFlags` (see docs/recipes.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _checks as C

__all__ = ["cleanrl_gae"]


def cleanrl_gae(
    rewards: Any,
    values: Any,
    dones: Any,
    next_value: Any,
    next_done: Any,
    *,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    out: tuple[Any, Any] | None = None,
) -> tuple[Any, Any]:
    """CleanRL's GAE block as one call (same inputs, same results).

    Parameters
    ----------
    rewards : float32 or float64, [num_steps, num_envs]
        torch CPU tensor or array-like.
    values : same dtype and shape as ``rewards``
        ``V(obs[t])``.
    dones : bool or float 0/1, [num_steps, num_envs]
        CleanRL's ``dones[t]``: 1 where ``obs[t]`` starts a new episode (the
        done flag of the previous step). Row 0 is not read.
    next_value : ``rewards``' dtype, [num_envs] or [1, num_envs]
        ``V(next_obs)``, the observation after the last step.
    next_done : flags, [num_envs]
        Done flag of the last step.
    gamma, gae_lambda : float in [0, 1]
    out : (advantages, returns), optional
        Preallocated ``[num_steps, num_envs]`` tensors or arrays of
        ``rewards``' dtype, written in place (no allocation).

    Returns
    -------
    advantages, returns
        torch tensors sharing memory with fastppo's output arrays when
        ``rewards`` is a torch tensor (so the rest of the loop runs unchanged),
        else numpy arrays; the ``out`` objects themselves when ``out`` is given.

    Notes
    -----
    ``delta_t = r_t + gamma * (1 - d_{t+1}) * V_{t+1} - V_t``,
    ``A_t = delta_t + gamma * lambda * (1 - d_{t+1}) * A_{t+1}``, with
    ``d_T = next_done`` and ``V_T = next_value``; ``returns = A + V``.
    """
    fn = "cleanrl_gae"
    r = C.float_array(fn, "rewards", rewards, ndims=(2,))
    T, N = r.shape
    if T == 0 or N == 0:
        C.fail(fn, "rewards", "non-empty [num_steps, num_envs]", f"shape {r.shape}")
    d = C.flag_array(fn, "dones", dones, (T, N))
    nd = C.flag_array(fn, "next_done", C.as_array(fn, "next_done", next_done).reshape(-1), (N,))
    nv = C.as_array(fn, "next_value", next_value)
    if nv.ndim == 2 and nv.shape[0] == 1:
        nv = nv.reshape(-1)  # CleanRL reshapes V(next_obs) to [1, num_envs]
    # CleanRL's dones[t + 1] is "step t ended an episode"; as fastppo's per-step
    # `terminated` it zeroes the bootstrap and cuts the trace, as CleanRL does.
    terminated = np.empty((T, N), np.uint8)
    terminated[:-1] = d[1:]
    terminated[-1] = nd
    from fastppo.advantages import gae

    # errors from gae name this function and its own arguments
    with C.reported_as(fn, {"last_values": "next_value", "terminated": "dones"}):
        adv, ret = gae(r, values, nv, terminated, gamma=gamma, gae_lambda=gae_lambda, out=out)
    if out is not None:
        return out[0], out[1]
    if type(rewards).__module__.startswith("torch"):
        import torch

        return torch.from_numpy(adv), torch.from_numpy(ret)
    return adv, ret
