"""The fused rollout: one compiled call collects a whole ``[T, N]`` rollout.

When the trainer steps one of :mod:`fastppo.envs`' compiled envs, this
kernel runs the step-by-step rollout of :meth:`PPOTrainer.collect_rollout`
with no Python per step. Each step, in the step path's order:

1. rows whose previous step ended an episode are invalid (the next-step
   autoreset's reset row); with observation normalisation the valid rows
   are folded into the running statistics, then every row is normalised and
   clipped (the Cython cores of :class:`fastppo.RunningMeanStd`, called
   through :mod:`fastppo.stats.cabi`);
2. the policy's forward pass (:func:`fastppo.kernels.mlp.policy_forward`) and
   the counter-based sampler of its head (the serial categorical or Gaussian
   kernel; stream ``(seed, counter0 + t, env)``);
3. the stored action made env-ready (``ActorCritic.to_env``'s clip or
   rescale) and the env's step, time limit and autoreset
   (:func:`fastppo.envs._loop.run_step` with the env's row functions);
4. episode returns and lengths, reward scaling (the Cython core of
   :class:`fastppo.ReturnNormalizer`) and the buffer rows.

Every value is computed by the same functions in the same order as the step
path, so both give the same rollout bit for bit (``tests/test_rollout.py``).

The kernel is written once (:func:`_fused`) and compiled per env and head
(:func:`fastppo._jit.specialized`), with that env's inlined physics.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from fastppo import _blas
from fastppo._checks import fail
from fastppo._jit import inline, kernel, specialized
from fastppo.envs import acrobot, cartpole, mountain_car, mountain_car_continuous, pendulum
from fastppo.envs._loop import env_bindings, run_step
from fastppo.kernels import categorical as KC
from fastppo.kernels import gaussian as KG
from fastppo.kernels import mlp as K
from fastppo.stats import cabi as SC

# Status codes (the kernel returns -1 when the rollout is complete). On an
# error, ``info[I_T]`` and ``info[I_ENV]`` say where; the rollout stops there.
BAD_OBS, BAD_PARAMS, BAD_OBS_STATS, BAD_REWARDS, BAD_ACTION = range(1, 6)
# Slots of the ``info`` output.
I_EPISODES, I_OBS_COUNT, I_REW_COUNT, I_T, I_ENV, I_CODE = range(6)
N_INFO = 6
_MASK32 = np.int64(0xFFFFFFFF)
_NOMASK = np.zeros((1, 1), np.uint8)


@inline
def _categorical(out_a, log_std, offs, stream, squash, act_i, act_f, logp):  # pragma: no cover
    """``sample_categorical(out_a)``, no mask: its serial kernel (``offs`` is
    ``[0, n]``), called by symbol, not compiled into the rollout."""
    return KC.categorical_serial(
        out_a, 0 if out_a.itemsize == 4 else 1, _NOMASK, False, offs, stream, False, False,
        log_std[:0], act_i, logp,
    )  # fmt: skip


@inline
def _gaussian(out_a, log_std, offs, stream, squash, act_i, act_f, logp):  # pragma: no cover
    """``sample_gaussian(out_a, log_std)``: its serial kernel, ``log_std`` one [1, A] row."""
    n = out_a.shape[0]
    a_dim = out_a.shape[1]
    return KG.gaussian_serial(
        out_a, 0, log_std.reshape((1, a_dim)), 0, a_dim, 0 if out_a.itemsize == 4 else 1,
        n != 1, stream, squash, False, act_f, logp,
    )  # fmt: skip


@inline
def _discrete_store(
    t, act_i, act_f, start, low, high, squash, buf_act, env_act
):  # pragma: no cover
    """Buffer row ``t`` of the stored actions, and ``to_env``: ``a + start``."""
    n = act_i.shape[0]
    for i in range(n):
        buf_act[t * n + i] = act_i[i]
        env_act[i] = act_i[i] + start


@inline
def _box_store(t, act_i, act_f, start, low, high, squash, buf_act, env_act):  # pragma: no cover
    """Buffer row ``t`` of the stored actions, and ``to_env`` in float64 (the bounds'
    dtype) rounded to float32: a clip to the Box, or (squashed)
    ``low + (a + 1) * 0.5 * (high - low)``."""
    n, a_dim = act_f.shape
    for i in range(n):
        for j in range(a_dim):
            a = act_f[i, j]
            buf_act[t * n + i, j] = a
            a64 = np.float64(a)
            if squash:
                env_act[i, j] = np.float32(low[j] + (a64 + 1.0) * 0.5 * (high[j] - low[j]))
            else:
                env_act[i, j] = np.float32(min(max(a64, low[j]), high[j]))


# The names _fused calls that differ per env and head: bound by specialized()
# in each compiled copy (the template itself is never compiled).
_valid: Any = None
_step_row: Any = None
_obs_row: Any = None
_reset_row: Any = None
_sample: Any = None
_store: Any = None
_env_actions: Any = None
_P0 = _P1 = 0.0


def _fused(
    params, a_layout, c_layout, idx, log_std, low, high,
    act, start, squash, max_steps, seed_lo, seed_hi, counter0,
    obs_norm, rps, rpb, o_count, o_eps, o_clip,
    rew_norm, r_count, gamma, r_clip, r_eps,
    state, book, obs, prev_done, ep_ret, ep_len, o_mean, o_var, r_ret, r_mean, r_var, ha, hc,
    buf_obs, buf_act, buf_logp, buf_values, buf_rew, buf_term, buf_trunc, buf_valid,
    episodes, info,
):  # pragma: no cover - compiled  # fmt: skip
    """Collect ``buf_logp.shape[0] // N`` steps of N envs; returns -1 or a status code.

    ``obs`` [N, O] float64 holds the current observations on entry and the
    last ones on exit; ``prev_done``, ``ep_ret``, ``ep_len`` and the running
    statistics are updated in place; ``episodes`` [T * N, 3] receives
    ``(t, return, length)`` of each finished episode in step-path order and
    ``info`` the counts (see the ``I_*`` slots).
    """
    n = state.shape[0]
    o = obs.shape[1]
    n_steps = buf_logp.shape[0] // n
    xin = np.empty((n, o), params.dtype)
    xn = np.empty((n, o), np.float64)
    valid = np.empty(n, np.uint8)
    n_out = a_layout[a_layout.shape[0] - 1, 1]
    out_a = np.empty((n, n_out), params.dtype)
    out_v = np.empty(n, params.dtype)
    offs = np.zeros(2, np.int64)
    offs[1] = n_out
    act_i = np.empty(n, np.int64)
    act_f = np.empty((n, max(1, low.shape[0])), np.float32)
    logp = np.empty(n, np.float32)
    env_act = _env_actions(n, low.shape[0])
    eobs = np.empty((n, o), np.float32)
    reward = np.empty(n, np.float64)
    scaled = np.empty(n, np.float64)
    term = np.empty(n, np.bool_)
    trunc = np.empty(n, np.bool_)
    no_final = np.empty((0, o), np.float32)
    n_ep = 0
    o_added = 0
    r_added = 0
    for k in range(N_INFO):
        info[k] = 0
    for t in range(n_steps):
        info[I_T] = t
        any_valid = False
        for i in range(n):
            valid[i] = 0 if prev_done[i] else 1
            any_valid = any_valid or not prev_done[i]
        x = obs
        if obs_norm:
            if any_valid:
                k = SC.rms_update(
                    obs.ctypes.data, n, o, valid.ctypes.data, rps, rpb, o_count + o_added,
                    o_mean.ctypes.data, o_var.ctypes.data,
                )  # fmt: skip
                if k < 0:
                    info[I_CODE] = k
                    return BAD_OBS_STATS
                o_added += k
            SC.rms_normalize(
                obs.ctypes.data, xn.ctypes.data, n, o, o_mean.ctypes.data, o_var.ctypes.data,
                o_eps, o_clip,
            )  # fmt: skip
            x = xn
        for i in range(n):
            r = t * n + i
            for j in range(o):
                buf_obs[r, j] = x[i, j]
                xin[i, j] = x[i, j]  # rounded to the policy's dtype, as obs_batch casts
                if not np.isfinite(xin[i, j]):
                    info[I_ENV] = i
                    return BAD_OBS
        K.policy_forward(
            params, a_layout, c_layout, act, xin, idx, n, ha, hc, True, True, out_a, out_v
        )
        ctr = counter0 + t
        stream = (seed_lo, seed_hi, ctr & _MASK32, (ctr >> 32) & _MASK32, np.int64(0))
        bad = _sample(out_a, log_std, offs, stream, squash, act_i, act_f, logp)
        if bad >= 0:
            info[I_ENV] = bad
            return BAD_PARAMS
        for i in range(n):
            buf_logp[t * n + i] = logp[i]
            buf_values[t * n + i] = out_v[i]
        _store(t, act_i, act_f, start, low, high, squash, buf_act, env_act)
        bad = run_step(
            _valid, _step_row, _obs_row, _reset_row, _P0, _P1,
            state, book, env_act, max_steps, False, eobs, reward, term, trunc, no_final,
        )  # fmt: skip
        if bad >= 0:
            info[I_ENV] = bad
            return BAD_ACTION
        for i in range(n):
            ep_ret[i] += reward[i]
            ep_len[i] += valid[i]
            if (term[i] or trunc[i]) and valid[i] != 0:
                episodes[n_ep, 0] = t
                episodes[n_ep, 1] = ep_ret[i]
                episodes[n_ep, 2] = ep_len[i]
                n_ep += 1
                ep_ret[i] = 0.0
                ep_len[i] = 0
        if rew_norm:
            k = SC.return_step(
                reward.ctypes.data, term.ctypes.data, trunc.ctypes.data, valid.ctypes.data,
                scaled.ctypes.data, n, gamma, r_clip, r_eps, r_count + r_added,
                r_ret.ctypes.data, r_mean.ctypes.data, r_var.ctypes.data,
            )  # fmt: skip
            if k < 0:
                info[I_CODE] = k
                return BAD_REWARDS
            r_added += k
        for i in range(n):
            r = t * n + i
            buf_rew[r] = scaled[i] if rew_norm else reward[i]
            buf_term[r] = term[i]
            buf_trunc[r] = trunc[i]
            buf_valid[r] = valid[i] != 0
            prev_done[i] = term[i] or trunc[i]
            for j in range(o):
                obs[i, j] = eobs[i, j]
        info[I_EPISODES] = n_ep
        info[I_OBS_COUNT] = o_added
        info[I_REW_COUNT] = r_added
    return -1


@inline
def _discrete_actions(n, a_dim):  # pragma: no cover - compiled
    return np.empty(n, np.int64)


@inline
def _box_actions(n, a_dim):  # pragma: no cover - compiled
    return np.empty((n, a_dim), np.float32)


_SIG = (
    "i8(F_1, i8_2, i8_2, i8_1, F_1, f8_1, f8_1,"
    " i8, i8, b1, i8, i8, i8, i8,"
    " b1, i8, i8, f8, f8, f8,"
    " b1, f8, f8, f8, f8,"
    " f8_2w, i8_2w, f8_2w, b1_1w, f8_1w, i8_1w, f8_1w, f8_1w, f8_1w, f8_1w, f8_1w, F_1w, F_1w,"
    " f8_2w, {act}, f8_1w, f8_1w, f8_1w, b1_1w, b1_1w, b1_1w, f8_2w, i8_1w)"
)

_ENVS = {
    "CartPole-v1": cartpole,
    "Acrobot-v1": acrobot,
    "MountainCar-v0": mountain_car,
    "MountainCarContinuous-v0": mountain_car_continuous,
    "Pendulum-v1": pendulum,
}


def _compile(mod: Any) -> Any:
    discrete = hasattr(mod, "N_ACTIONS")
    name = "_" + mod.__name__.rsplit(".", 1)[1]
    body = specialized(
        _fused, name, **env_bindings(mod),
        _sample=_categorical if discrete else _gaussian,
        _store=_discrete_store if discrete else _box_store,
        _env_actions=_discrete_actions if discrete else _box_actions,
    )  # fmt: skip
    return kernel(_SIG.format(act="i8_1w" if discrete else "f4_2w"))(body)


#: The fused rollout kernel of each compiled env id.
KERNELS = {env_id: _compile(mod) for env_id, mod in _ENVS.items()}


class Rows(NamedTuple):
    """The flat rollout rows a fused call writes: row ``t * N + i`` is step ``t`` of env ``i``."""

    obs: np.ndarray  # [T * N, O] float64, the network inputs
    actions: np.ndarray  # [T * N] int64 (discrete) or [T * N, A] float32 (Box)
    logp: np.ndarray  # [T * N] float64
    values: np.ndarray  # [T * N] float64
    rewards: np.ndarray  # [T * N] float64 (scaled when reward normalisation is on)
    terminated: np.ndarray  # [T * N] bool
    truncated: np.ndarray  # [T * N] bool
    valid: np.ndarray  # [T * N] bool


class Carry(NamedTuple):
    """The per-env state a rollout continues from and updates in place."""

    obs: np.ndarray  # [N, O] float64: the current observations, the last ones on exit
    prev_done: np.ndarray  # [N] bool: the previous step ended an episode (a reset row next)
    ep_ret: np.ndarray  # [N] float64: raw return of each env's current episode
    ep_len: np.ndarray  # [N] int64: its length in valid steps


def collect(
    fn: str,
    policy: Any,
    env: Any,
    carry: Carry,
    rows: Rows,
    seed: int,
    counter: int,
    obs_rms: Any = None,
    obs_clip: float = 0.0,
    ret_norm: Any = None,
) -> np.ndarray:
    """Collect ``len(rows.logp) // N`` steps of the compiled vector ``env`` with
    ``policy`` (an :class:`~fastppo.nn.policy.ActorCritic`) in one compiled call.

    Step ``t`` samples from the stream ``(seed, counter + t, env)``, as
    ``policy.step(x, seed=seed, counter=counter + t)`` does. ``obs_rms`` and
    ``ret_norm`` (a :class:`~fastppo.RunningMeanStd` and a
    :class:`~fastppo.ReturnNormalizer`, optional) are folded in and applied as
    the trainer's step path does, and their counts updated. Returns the finished
    episodes, ``[k, 3]`` rows ``(t, return, length)``; a refused input raises the
    house ``ValueError`` naming ``fn`` after the rows before it were written.
    """
    from fastppo.stats import layout

    n = env.num_envs
    policy._grow(n)
    none = np.zeros(0, np.float64)
    if policy.kind == "discrete":
        log_std, low, high = policy.params[:0], none, none
        start = int(policy.action_start[0])
    else:
        log_std, low, high = policy.clamped_log_std(), policy.action_low, policy.action_high
        start = 0
    if obs_rms is not None:
        o_mean, o_var = obs_rms._mean, obs_rms._var
        rps, rpb = layout(policy.obs_dim)
        o_args = (True, rps, rpb, float(obs_rms._count), obs_rms._epsilon, obs_clip)
    else:
        o_mean = o_var = none
        o_args = (False, 1, 1, 0.0, 1.0, 0.0)
    if ret_norm is not None:
        r_ret, r_mean, r_var = ret_norm._returns, ret_norm._rms._mean, ret_norm._rms._var
        gamma, r_clip, r_eps, r_count = ret_norm._step_args()
        r_args = (True, r_count, gamma, r_clip, r_eps)
    else:
        r_ret = r_mean = r_var = none
        r_args = (False, 0.0, 1.0, 0.0, 1.0)
    episodes = np.empty((rows.logp.shape[0], 3), np.float64)
    info = np.zeros(N_INFO, np.int64)
    st = _blas.call(
        n * policy._widest,
        KERNELS[env.env_id],
        policy.params, policy._a_layout, policy._c_layout, policy._idx, log_std, low, high,
        policy._act, start, bool(policy.squash), env.max_episode_steps,
        seed & 0xFFFFFFFF, seed >> 32, counter, *o_args, *r_args,
        env.state, env._book, *carry, o_mean, o_var, r_ret, r_mean, r_var,
        policy._ha, policy._hc, *rows, episodes, info,
    )  # fmt: skip
    if obs_rms is not None:
        obs_rms._count += int(info[I_OBS_COUNT])
    if ret_norm is not None:
        ret_norm._rms._count += int(info[I_REW_COUNT])
    if st >= 0:
        raise_status(fn, int(st), info)
    return episodes[: int(info[I_EPISODES])]


def raise_status(fn: str, status: int, info: np.ndarray) -> None:
    """Raise the house ``ValueError`` for a fused rollout's status code."""
    where = f"step {int(info[I_T])} of the rollout"
    env = f"{where}, env {int(info[I_ENV])}"
    if status == BAD_OBS:
        fail(fn, "obs", "finite network inputs in the policy's dtype", f"a NaN or inf at {env}")
    if status == BAD_PARAMS:
        fail(fn, "policy", "finite actor outputs", f"a non-finite logit, mean or log-std at {env}")
    if status == BAD_OBS_STATS:
        fail(fn, "obs", "observations the running statistics can fold in", f"refused at {where}")
    if status == BAD_REWARDS:
        fail(fn, "rewards", "finite, with returns below RETURN_LIMIT", f"refused at {where}")
    fail(fn, "actions", "actions the env accepts", f"refused at {env}")
