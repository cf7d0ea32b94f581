"""Comparison groups: fastppo's GAE and V-trace against other RL frameworks.

Every peer gets the same rollout (``[T, N]`` float32, about 1 % terminated
and 0.5 % truncated steps, same-step autoreset so truncated steps come with
``V(final obs)``), converted to its own conventions *outside* the timed call,
and every result is checked equal to fastppo's (float32 rounding) before
anything is timed. A peer that is not installed appears as a row saying what
to install; impl labels carry the installed peer's version.

What each impl computes, and how the peer's conventions were met:

``numpy loop`` (baseline)
    The loop over T vectorised across envs that SB3 and CleanRL run, with the
    time-limit bootstrap folded into the reward as SB3 does.
``fastppo``
    ``fastppo.gae(rewards, values, last_values, terminated, truncated,
    final_values=..., out=...)``.
``PyTorch loop (CleanRL)``
    CleanRL's GAE block on torch CPU tensors (``dones[t]`` = episode start,
    the bootstrap folded into the reward).
``stable-baselines3``
    ``RolloutBuffer.compute_returns_and_advantage`` on a filled buffer (SB3
    folds the bootstrap into the reward while collecting; done here in setup).
``tianshou``
    ``Algorithm.compute_episodic_return`` on tianshou's flat, env-major layout
    (``[N * T]``; ``v_s_`` = value of ``obs_next``, which for truncated steps is
    the final obs). A minimal stand-in buffer supplies ``terminated`` and
    ``unfinished_index()`` (the last row of each env), the two things it reads.
``torchrl GAE`` / ``torchrl vec GAE``
    ``generalized_advantage_estimate`` / ``vec_generalized_advantage_estimate``
    with ``next_state_value`` (``V(final obs)`` at truncated steps), ``done =
    terminated | truncated`` and ``terminated``; the ``[T, N]`` arrays are
    passed as torchrl's ``[T, F]`` (time at dim -2), its fastest layout here.

V-trace: ``torchrl V-trace`` is ``vtrace_advantage_estimate``; it has no
``lam`` (it is 1) and clips the policy-gradient ratio with ``rho_thresh``, so
the comparison uses ``lam = 1`` and ``pg_rho_bar = rho_bar`` -- where the
semantics agree. ``rlax`` (when jax is installed) cannot tell truncation from
termination (one ``discount_t`` both bootstraps and cuts the trace), so its
group uses a rollout with terminations only, ``lam = 1`` and ``c_bar = 1``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from fastppo_bench.core import Group

GAMMA, LAM = 0.99, 0.95
RHO_BAR, C_BAR = 1.0, 1.0
SIZES_QUICK = [(2048, 64)]
SIZES_FULL = [(2048, 8), (2048, 64), (2048, 256)]

_INSTALL = {
    "torch": "pip install torch",
    "stable_baselines3": "pip install stable-baselines3",
    "tianshou": "pip install tianshou",
    "torchrl": "pip install torchrl",
    "rlax": "pip install rlax jax",
    "jax": "pip install rlax jax",
}


def _v(dist: str) -> str:
    """Installed version of ``dist`` for an impl label ('' when not installed)."""
    try:
        return " " + importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _missing(*modules: str) -> str | None:
    """'not installed: pip install X' for the first missing module, else None."""
    for m in modules:
        if importlib.util.find_spec(m) is None:
            return f"not installed: {_INSTALL[m]}"
    return None


class Rollout:
    """One synthetic rollout in fastppo's terms, plus derived views peers need."""

    def __init__(self, T: int, N: int, seed: int = 0, truncations: bool = True) -> None:
        rng = np.random.default_rng(seed)
        f32 = np.float32
        self.T, self.N = T, N
        self.rewards = rng.standard_normal((T, N)).astype(f32)
        self.values = rng.standard_normal((T, N)).astype(f32)
        self.last_values = rng.standard_normal(N).astype(f32)
        self.terminated = rng.random((T, N)) < 0.01
        p_trunc = 0.005 if truncations else 0.0
        self.truncated = (rng.random((T, N)) < p_trunc) & ~self.terminated
        self.final_values = rng.standard_normal((T, N)).astype(f32)
        self.behavior_logp = (-rng.random((T, N)) - 0.5).astype(f32)
        self.target_logp = (self.behavior_logp + 0.3 * rng.standard_normal((T, N))).astype(f32)
        self.done = self.terminated | self.truncated
        # V of the observation each step led to (final obs at truncated steps).
        nxt = np.concatenate([self.values[1:], self.last_values[None]])
        self.next_values = np.where(self.truncated, self.final_values, nxt).astype(f32)
        # SB3/CleanRL fold the time-limit bootstrap into the reward while collecting.
        self.folded_rewards = (
            self.rewards + np.float32(GAMMA) * self.final_values * self.truncated
        ).astype(f32)
        self.episode_starts = np.zeros((T, N), f32)
        self.episode_starts[1:] = self.done[:-1]

    @property
    def bytes_moved(self) -> int:
        # read rewards, values, flags (+ final values); write advantages, returns
        return 5 * self.rewards.nbytes + self.terminated.nbytes + self.truncated.nbytes


# --------------------------------------------------------------------------- GAE impls


def numpy_gae(ro: Rollout, gamma: float = GAMMA, lam: float = LAM) -> tuple[np.ndarray, ...]:
    """SB3/CleanRL's loop over T, vectorised across envs (bootstrap folded in)."""
    r, v, T = ro.folded_rewards, ro.values, ro.T
    nonterm = 1.0 - ro.done.astype(np.float32)
    adv = np.empty_like(r)
    last = np.zeros(ro.N, np.float32)
    for t in range(T - 1, -1, -1):
        nv = ro.last_values if t == T - 1 else v[t + 1]
        delta = r[t] + gamma * nv * nonterm[t] - v[t]
        last = delta + gamma * lam * nonterm[t] * last
        adv[t] = last
    return adv, adv + v


def _fastppo_gae(ro: Rollout) -> Callable[[], Any]:
    import fastppo

    a, b = np.empty_like(ro.rewards), np.empty_like(ro.rewards)

    def run() -> Any:
        return fastppo.gae(
            ro.rewards, ro.values, ro.last_values, ro.terminated, ro.truncated,
            final_values=ro.final_values, gamma=GAMMA, gae_lambda=LAM, out=(a, b),
        )  # fmt: skip

    return run


def _torch_loop(ro: Rollout) -> Callable[[], Any] | str:
    if (why := _missing("torch")) is not None:
        return why
    import torch

    rewards, values = torch.from_numpy(ro.folded_rewards), torch.from_numpy(ro.values)
    dones = torch.from_numpy(ro.episode_starts)
    next_value = torch.from_numpy(ro.last_values).reshape(1, -1)
    next_done = torch.from_numpy(ro.done[-1].astype(np.float32))
    num_steps = ro.T

    def run() -> Any:
        # CleanRL ppo.py's block, verbatim but for `args.`
        with torch.no_grad():
            advantages = torch.zeros_like(rewards)
            lastgaelam: Any = 0
            for t in reversed(range(num_steps)):
                if t == num_steps - 1:
                    nextnonterminal = 1.0 - next_done
                    nextvalues = next_value
                else:
                    nextnonterminal = 1.0 - dones[t + 1]
                    nextvalues = values[t + 1]
                delta = rewards[t] + GAMMA * nextvalues * nextnonterminal - values[t]
                advantages[t] = lastgaelam = delta + GAMMA * LAM * nextnonterminal * lastgaelam
            returns = advantages + values
        return advantages, returns

    return run


def _sb3(ro: Rollout) -> Callable[[], Any] | str:
    if (why := _missing("stable_baselines3", "torch")) is not None:
        return why
    import gymnasium as gym
    import torch
    from stable_baselines3.common.buffers import RolloutBuffer

    buf = RolloutBuffer(
        ro.T, gym.spaces.Box(-1.0, 1.0, (1,), np.float32), gym.spaces.Discrete(2),
        device="cpu", gae_lambda=LAM, gamma=GAMMA, n_envs=ro.N,
    )  # fmt: skip
    buf.rewards[:] = ro.folded_rewards
    buf.values[:] = ro.values
    buf.episode_starts[:] = ro.episode_starts
    last = torch.from_numpy(ro.last_values.reshape(-1, 1))
    dones = ro.done[-1]

    def run() -> Any:
        buf.compute_returns_and_advantage(last, dones)
        return buf.advantages, buf.returns

    return run


class _TianshouBuffer:
    """The two things ``compute_episodic_return`` reads from a buffer."""

    def __init__(self, terminated: np.ndarray, unfinished: np.ndarray) -> None:
        self.terminated = terminated
        self._unfinished = unfinished

    def unfinished_index(self) -> np.ndarray:
        return self._unfinished


def _tianshou(ro: Rollout) -> Callable[[], Any] | str:
    if (why := _missing("tianshou", "torch")) is not None:
        return why
    from tianshou.algorithm.algorithm_base import Algorithm
    from tianshou.data import Batch

    def flat(a: np.ndarray) -> np.ndarray:  # [T, N] -> env-major [N * T]
        return np.ascontiguousarray(a.T).reshape(-1)

    batch = Batch(
        rew=flat(ro.rewards), terminated=flat(ro.terminated), truncated=flat(ro.truncated)
    )
    # Each env's rollout ends unfinished: tianshou cuts its trace there.
    unfinished = np.arange(ro.N) * ro.T + ro.T - 1
    buffer = _TianshouBuffer(flat(ro.terminated), unfinished)
    indices = np.arange(ro.N * ro.T)
    v_s_, v_s = flat(ro.next_values), flat(ro.values)

    def run() -> Any:
        returns, adv = Algorithm.compute_episodic_return(
            batch,
            buffer,  # type: ignore[arg-type]  # a stand-in: see _TianshouBuffer
            indices,
            v_s_=v_s_,
            v_s=v_s,
            gamma=GAMMA,
            gae_lambda=LAM,
        )
        return adv, returns

    return run


def _torchrl_inputs(ro: Rollout) -> dict[str, Any]:
    import torch

    return {
        "state_value": torch.from_numpy(ro.values),
        "next_state_value": torch.from_numpy(ro.next_values),
        "reward": torch.from_numpy(ro.rewards),
        "done": torch.from_numpy(ro.done),
        "terminated": torch.from_numpy(ro.terminated),
    }


def _torchrl_gae(ro: Rollout, vec: bool) -> Callable[[], Any] | str:
    if (why := _missing("torchrl", "torch")) is not None:
        return why
    from torchrl.objectives.value import functional as F

    fn = F.vec_generalized_advantage_estimate if vec else F.generalized_advantage_estimate
    kw = _torchrl_inputs(ro)
    return lambda: fn(GAMMA, LAM, **kw)


# --------------------------------------------------------------------------- V-trace impls


def numpy_vtrace(ro: Rollout, gamma: float = GAMMA) -> tuple[np.ndarray, np.ndarray]:
    """IMPALA V-trace (lam = 1), vectorised across envs, same-step truncation."""
    r, v, T = ro.rewards, ro.values, ro.T
    rho = np.exp(ro.target_logp - ro.behavior_logp)
    rho_c, cs = np.minimum(RHO_BAR, rho), np.minimum(C_BAR, rho)
    boot = np.where(ro.terminated, np.float32(0), ro.next_values)
    cont = 1.0 - ro.done.astype(np.float32)
    vs = np.empty_like(r)
    diff = np.zeros(ro.N, np.float32)
    for t in range(T - 1, -1, -1):
        delta = rho_c[t] * (r[t] + gamma * boot[t] - v[t])
        diff = delta + gamma * cont[t] * cs[t] * diff
        vs[t] = v[t] + diff
    next_vs = np.concatenate([vs[1:], ro.last_values[None]])
    next_vs = np.where(ro.done, boot, next_vs)
    return vs, rho_c * (r + gamma * next_vs - v)


def _fastppo_vtrace(ro: Rollout, truncations: bool = True) -> Callable[[], Any]:
    import fastppo

    a, b = np.empty_like(ro.rewards), np.empty_like(ro.rewards)
    kw: dict[str, Any] = {}
    if truncations:
        kw = {"truncated": ro.truncated, "final_values": ro.final_values}

    def run() -> Any:
        return fastppo.vtrace(
            ro.behavior_logp, ro.target_logp, ro.rewards, ro.values, ro.last_values,
            ro.terminated, gamma=GAMMA, lam=1.0, rho_bar=RHO_BAR, c_bar=C_BAR,
            pg_rho_bar=RHO_BAR, out=(a, b), **kw,
        )  # fmt: skip

    return run


def _torchrl_vtrace(ro: Rollout) -> Callable[[], Any] | str:
    if (why := _missing("torchrl", "torch")) is not None:
        return why
    import torch
    from torchrl.objectives.value.functional import vtrace_advantage_estimate

    kw = _torchrl_inputs(ro)
    # torchrl's rho = exp(log_pi - log_mu): log_pi is the target (learner) policy.
    log_pi, log_mu = torch.from_numpy(ro.target_logp), torch.from_numpy(ro.behavior_logp)

    def run() -> Any:
        pg, vs = vtrace_advantage_estimate(
            GAMMA, log_pi, log_mu, rho_thresh=RHO_BAR, c_thresh=C_BAR, **kw
        )
        return vs, pg

    return run


def _rlax_vtrace(ro: Rollout) -> Callable[[], Any] | str:
    if (why := _missing("rlax", "jax")) is not None:
        return why
    import jax
    import jax.numpy as jnp
    import rlax

    # rlax works on one [T] sequence: vmap over envs (axis 1 of [T, N]).
    disc = jnp.asarray(GAMMA * (1.0 - ro.terminated.astype(np.float32)))
    v_t = jnp.asarray(np.concatenate([ro.values[1:], ro.last_values[None]]))
    args = (
        jnp.asarray(ro.values),
        v_t,
        jnp.asarray(ro.rewards),
        disc,
        jnp.asarray(np.exp(ro.target_logp - ro.behavior_logp)),
    )

    def one(v_tm1: Any, v_t: Any, r_t: Any, d_t: Any, rho: Any) -> Any:
        out = rlax.vtrace_td_error_and_advantage(
            v_tm1, v_t, r_t, d_t, rho, lambda_=1.0, clip_rho_threshold=RHO_BAR,
            clip_pg_rho_threshold=RHO_BAR,
        )  # fmt: skip
        return out.errors + v_tm1, out.pg_advantage

    fn = jax.jit(jax.vmap(one, in_axes=1, out_axes=1))

    def run() -> Any:
        vs, pg = fn(*args)
        return jax.block_until_ready(vs), jax.block_until_ready(pg)

    return run


# --------------------------------------------------------------------------- checks


def _to_tn(label: str, res: Any, T: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """A peer's (first, second) output as [T, N] numpy arrays."""
    a, b = (np.asarray(x.detach() if hasattr(x, "detach") else x) for x in res)
    if label.startswith("tianshou"):  # env-major flat
        a, b = a.reshape(N, T).T, b.reshape(N, T).T
    return a, b


def _agree(T: int, N: int, reference: str = "fastppo") -> Callable[[dict[str, Any]], None]:
    def check(results: dict[str, Any]) -> None:
        ref = _to_tn(reference, results[reference], T, N)
        scale = max(1.0, float(np.abs(ref[1]).max()))
        for label, res in results.items():
            got = _to_tn(label, res, T, N)
            for name, g, e in zip(("first output", "second output"), got, ref):
                np.testing.assert_allclose(
                    g, e, rtol=0, atol=2e-5 * scale, err_msg=f"{label} vs {reference}: {name}"
                )

    return check


# --------------------------------------------------------------------------- groups


def groups(quick: bool, full: bool = False) -> list[Group]:
    """GAE and V-trace groups against every installed peer.

    Parameters
    ----------
    quick : bool
        One size ([2048x64]).
    full : bool
        Every size ([2048x8], [2048x64], [2048x256]); overrides ``quick``.
    """
    sizes = SIZES_FULL if full or not quick else SIZES_QUICK
    out: list[Group] = []
    for T, N in sizes:
        ro = Rollout(T, N)
        out.append(
            Group(
                name=f"gae vs peers [{T}x{N}] float32, with truncation",
                baseline="numpy loop",
                impls={
                    "numpy loop": partial(numpy_gae, ro),
                    "fastppo": _fastppo_gae(ro),
                    f"PyTorch{_v('torch')} loop (CleanRL)": _torch_loop(ro),
                    f"stable-baselines3{_v('stable-baselines3')}": _sb3(ro),
                    f"tianshou{_v('tianshou')}": _tianshou(ro),
                    f"torchrl{_v('torchrl')} GAE": _torchrl_gae(ro, vec=False),
                    f"torchrl{_v('torchrl')} vec GAE": _torchrl_gae(ro, vec=True),
                },
                check=_agree(T, N),
                target="fastppo faster than every peer; >= 20x numpy loop",
                bytes_moved=ro.bytes_moved,
            )
        )
        out.append(
            Group(
                name=f"vtrace vs peers [{T}x{N}] float32, with truncation",
                baseline="numpy loop",
                impls={
                    "numpy loop": partial(numpy_vtrace, ro),
                    "fastppo": _fastppo_vtrace(ro),
                    f"torchrl{_v('torchrl')} V-trace": _torchrl_vtrace(ro),
                },
                check=_agree(T, N),
                target="fastppo faster than every peer; >= 20x numpy loop",
                bytes_moved=ro.bytes_moved + 2 * ro.rewards.nbytes,
            )
        )
        if full or not quick:
            ro_term = Rollout(T, N, seed=1, truncations=False)
            out.append(
                Group(
                    name=f"vtrace vs rlax [{T}x{N}] float32, terminations only",
                    baseline="numpy loop",
                    impls={
                        "numpy loop": partial(numpy_vtrace, ro_term),
                        "fastppo": _fastppo_vtrace(ro_term, truncations=False),
                        f"rlax{_v('rlax')}": _rlax_vtrace(ro_term),
                    },
                    check=_agree(T, N),
                    target="fastppo faster than rlax on CPU",
                    bytes_moved=ro_term.bytes_moved + 2 * ro_term.rewards.nbytes,
                )
            )
    return out
