"""The PPO update: clipped surrogate + value loss + entropy bonus, Adam, all in one kernel call.

Per minibatch (Schulman et al. 2017, arXiv 1707.06347, eq. 7 and 9)::

    r      = exp(clamp(logp - logp_old, -20, 20))
    L_clip = mean max(-A r, -A clip(r, 1 - eps, 1 + eps))
    L_vf   = 0.5 mean (V - R)^2          (or the clipped form with clip_range_vf)
    loss   = L_clip - ent_coef * H + vf_coef * L_vf

with advantages normalised over the minibatch's valid rows. Gradients are
exact (manual backward, checked against finite differences in the tests),
clipped to ``max_grad_norm`` and applied with Adam. A minibatch whose gradient
norm is NaN or inf is skipped (weights and Adam state unchanged) and counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _blas
from fastppo._checks import as_array, fail
from fastppo.kernels import mlp as K
from fastppo.nn.optim import Adam
from fastppo.nn.policy import ActorCritic
from fastppo.ppo.buffer import RolloutBatch
from fastppo.ppo.config import PPOConfig

METRIC_NAMES = (
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/old_approx_kl",
    "losses/clipfrac",
    "losses/loss",
    "losses/grad_norm",
    "losses/explained_variance",
    "losses/skipped_steps",
    "losses/gradient_steps",
    "losses/epochs",
    "losses/early_stop",
    "charts/learning_rate",
    "charts/clip_range",
)


class _Prepared:
    """Kernel-ready (contiguous) views of a batch, validated once: observations and
    float actions in the policy's dtype, the per-row scalars in float64."""

    __slots__ = ("act_f", "act_i", "adv", "logp", "n", "obs", "ret", "val", "valid")

    def __init__(self, fn: str, policy: ActorCritic, batch: RolloutBatch) -> None:
        if not isinstance(batch, RolloutBatch):
            fail(fn, "batch", "a RolloutBatch", type(batch).__name__, exc=TypeError)
        self.obs = policy.obs_batch(fn, batch.obs)
        n = self.obs.shape[0]
        self.n = n
        self.act_i, self.act_f = policy.actions_batch(fn, batch.actions, n)
        self.logp = _vec(fn, "batch.logp", batch.logp, n)
        self.adv = _vec(fn, "batch.advantages", batch.advantages, n)
        self.ret = _vec(fn, "batch.returns", batch.returns, n)
        self.val = _vec(fn, "batch.values", batch.values, n)
        v = as_array(fn, "batch.valid", batch.valid)
        if v.dtype != np.bool_:
            fail(fn, "batch.valid", "a bool array", f"dtype {v.dtype}", exc=TypeError)
        if v.shape != (n,):
            fail(fn, "batch.valid", f"shape ({n},)", f"shape {v.shape}")
        self.valid = np.ascontiguousarray(v)


def _vec(fn: str, name: str, x: Any, n: int) -> np.ndarray:
    a = as_array(fn, name, x)
    if a.dtype not in (np.float32, np.float64):
        fail(fn, name, "float32 or float64", f"dtype {a.dtype}", exc=TypeError)
    if a.shape != (n,):
        fail(fn, name, f"shape ({n},)", f"shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float64)


def _hyper(
    policy: ActorCritic,
    config: PPOConfig,
    lr: float,
    optimizer: Adam | None,
    clip: float | None = None,
) -> np.ndarray:
    h = np.zeros(K.N_HYPER, dtype=np.float64)
    h[K.H_CLIP] = config.clip_range if clip is None else clip
    h[K.H_CLIP_VF] = -1.0 if config.clip_range_vf is None else config.clip_range_vf
    h[K.H_ENT] = config.ent_coef
    h[K.H_VF] = config.vf_coef
    h[K.H_NORM_ADV] = 1.0 if config.normalize_advantage else 0.0
    h[K.H_LS_LO] = policy.log_std_min
    h[K.H_LS_HI] = policy.log_std_max
    h[K.H_LR] = lr
    if optimizer is not None:
        h[K.H_BETA1], h[K.H_BETA2] = optimizer.betas
        h[K.H_EPS] = optimizer.eps
    h[K.H_MAX_GRAD_NORM] = 0.0 if config.max_grad_norm is None else config.max_grad_norm
    h[K.H_TARGET_KL] = 0.0 if config.target_kl is None else config.target_kl
    return h


def loss_and_grad(
    policy: ActorCritic,
    batch: RolloutBatch,
    config: PPOConfig,
    rows: np.ndarray | None = None,
) -> tuple[float, np.ndarray, dict[str, float]]:
    """PPO loss of one minibatch and its gradient with respect to ``policy.params``.

    Parameters
    ----------
    policy : ActorCritic
    batch : RolloutBatch
    config : PPOConfig
        Supplies ``clip_range``, ``clip_range_vf``, ``ent_coef``, ``vf_coef`` and
        ``normalize_advantage``.
    rows : numpy.ndarray, optional
        int64 row indices of the minibatch (default: every row).

    Returns
    -------
    loss : float
    grad : numpy.ndarray
        ``[n_params]``, the dtype of ``policy.params``.
    stats : dict
        CleanRL-named statistics of the minibatch (valid rows only).
    """
    fn = "loss_and_grad"
    config.validate()
    p = _Prepared(fn, policy, batch)
    if rows is None:
        idx = np.arange(p.n, dtype=np.int64)
    else:
        idx = np.ascontiguousarray(as_array(fn, "rows", rows), dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= p.n):
            fail(fn, "rows", f"indices in [0, {p.n})", f"range [{idx.min()}, {idx.max()}]")
    nb = idx.shape[0]
    policy._grow(nb)
    grad = np.empty_like(policy.params)
    st = np.zeros(K.N_MB_STATS, dtype=np.float64)
    _blas.call(
        nb * policy._widest,
        K.minibatch_loss_grad,
        policy.params, policy._a_layout, policy._c_layout, policy._act, policy._head,
        policy.nvec, policy._ls_off, p.obs, p.act_i, p.act_f, p.logp, p.adv, p.ret, p.val,
        p.valid, idx, 0, nb, _hyper(policy, config, config.learning_rate, None),
        policy._ha, policy._hc, policy._dz, policy._dprev, grad, policy._rows, st,
    )  # fmt: skip
    stats = {
        "losses/policy_loss": float(st[K.ST_PG]),
        "losses/value_loss": float(st[K.ST_VF]),
        "losses/entropy": float(st[K.ST_ENT]),
        "losses/approx_kl": float(st[K.ST_KL]),
        "losses/old_approx_kl": float(st[K.ST_OLD_KL]),
        "losses/clipfrac": float(st[K.ST_CLIPFRAC]),
        "n_valid": float(st[K.ST_N]),
    }
    return float(st[K.ST_LOSS]), grad, stats


def explained_variance(values: np.ndarray, returns: np.ndarray, valid: np.ndarray) -> float:
    """``1 - Var(R - V) / Var(R)`` over valid rows; NaN when ``Var(R) = 0`` (CleanRL)."""
    y = returns[valid]
    if y.size == 0:
        return float("nan")
    var_y = float(np.var(y))
    if var_y == 0.0:
        return float("nan")
    return float(1.0 - np.var(y - values[valid]) / var_y)


def ppo_update(
    policy: ActorCritic,
    optimizer: Adam,
    batch: RolloutBatch,
    config: PPOConfig,
    rng: np.random.Generator,
    lr: float | None = None,
    clip_range: float | None = None,
) -> dict[str, float]:
    """Run ``config.n_epochs`` epochs of minibatch PPO on ``batch``, in place on ``policy.params``.

    Each epoch shuffles the valid rows with ``rng`` and walks them in
    minibatches of ``config.batch_size`` (the last one may be smaller, as in
    SB3). Invalid rows never enter a minibatch. All epochs run inside one
    compiled call.

    Parameters
    ----------
    policy : ActorCritic
    optimizer : Adam
        Its moments and step count advance in place.
    batch : RolloutBatch
    config : PPOConfig
    rng : numpy.random.Generator
        Source of the minibatch permutations (determinism: same state, same update).
    lr : float, optional
        Learning rate for this update (annealing); default ``config.learning_rate``.
    clip_range : float, optional
        Ratio clip for this update (annealing); default ``config.clip_range``.

    Returns
    -------
    dict
        CleanRL-named metrics: means over the evaluated minibatches of
        ``losses/policy_loss``, ``losses/value_loss``, ``losses/entropy``,
        ``losses/approx_kl``, ``losses/old_approx_kl``, ``losses/clipfrac``,
        ``losses/loss``, ``losses/grad_norm``; ``losses/explained_variance`` of the
        rollout values; counts ``losses/gradient_steps``, ``losses/skipped_steps``
        (non-finite gradient norm), ``losses/epochs``, ``losses/early_stop`` (0/1);
        ``charts/learning_rate``, ``charts/clip_range``.
    """
    fn = "ppo_update"
    if not isinstance(policy, ActorCritic):
        fail(fn, "policy", "an ActorCritic", type(policy).__name__, exc=TypeError)
    if not isinstance(optimizer, Adam):
        fail(fn, "optimizer", "an Adam", type(optimizer).__name__, exc=TypeError)
    if optimizer.n_params != policy.n_params:
        fail(fn, "optimizer", f"sized for {policy.n_params} params", optimizer.n_params)
    if optimizer.dtype != policy.dtype:
        fail(
            fn,
            "optimizer",
            f"dtype {policy.dtype} (the policy's: Adam(..., dtype=policy.dtype))",
            f"dtype {optimizer.dtype}",
            exc=TypeError,
        )
    if not isinstance(config, PPOConfig):
        fail(fn, "config", "a PPOConfig", type(config).__name__, exc=TypeError)
    if not isinstance(rng, np.random.Generator):
        fail(fn, "rng", "a numpy.random.Generator", type(rng).__name__, exc=TypeError)
    config.validate()
    lr_ = config.learning_rate if lr is None else float(lr)
    if not lr_ > 0.0 or not np.isfinite(lr_):
        fail(fn, "lr", "a positive finite float", repr(lr))
    clip_ = config.clip_range if clip_range is None else float(clip_range)
    if not clip_ > 0.0 or not np.isfinite(clip_):
        fail(fn, "clip_range", "a positive finite float", repr(clip_range))
    p = _Prepared(fn, policy, batch)
    rows = np.flatnonzero(p.valid).astype(np.int64)
    perm = np.empty((config.n_epochs, rows.size), dtype=np.int64)
    for e in range(config.n_epochs):
        perm[e] = rng.permutation(rows)
    mb = min(config.batch_size, max(rows.size, 1))
    policy._grow(mb)
    grad = np.empty_like(policy.params)
    mb_stats = np.zeros(K.N_MB_STATS, dtype=np.float64)
    out = np.zeros(K.N_UPDATE_STATS, dtype=np.float64)
    _blas.call(
        mb * policy._widest,
        K.ppo_update_kernel,
        policy.params, policy._a_layout, policy._c_layout, policy._act, policy._head,
        policy.nvec, policy._ls_off, p.obs, p.act_i, p.act_f, p.logp, p.adv, p.ret, p.val,
        p.valid, perm, mb, _hyper(policy, config, lr_, optimizer, clip_), optimizer.m, optimizer.v,
        optimizer.t, policy._ha, policy._hc, policy._dz, policy._dprev, grad, policy._rows,
        mb_stats, out,
    )  # fmt: skip
    n_eval = max(out[K.U_N_EVAL], 1.0)
    n_steps = max(out[K.U_N_STEPS], 1.0)
    return {
        "losses/policy_loss": out[K.U_PG] / n_eval,
        "losses/value_loss": out[K.U_VF] / n_eval,
        "losses/entropy": out[K.U_ENT] / n_eval,
        "losses/approx_kl": out[K.U_KL] / n_eval,
        "losses/old_approx_kl": out[K.U_OLD_KL] / n_eval,
        "losses/clipfrac": out[K.U_CLIPFRAC] / n_eval,
        "losses/loss": out[K.U_LOSS] / n_eval,
        "losses/grad_norm": out[K.U_GRAD_NORM] / n_steps,
        "losses/explained_variance": explained_variance(p.val, p.ret, p.valid),
        "losses/skipped_steps": float(out[K.U_N_SKIPPED]),
        "losses/gradient_steps": float(out[K.U_N_STEPS]),
        "losses/epochs": float(out[K.U_EPOCHS]),
        "losses/early_stop": float(out[K.U_EARLY_STOP]),
        "charts/learning_rate": lr_,
        "charts/clip_range": clip_,
    }
