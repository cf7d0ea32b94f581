"""Stable-Baselines3 drop-in: GAE for ``RolloutBuffer.compute_returns_and_advantage``.

SB3 keeps its rollout in ``RolloutBuffer`` arrays of shape ``[n_steps, n_envs]``
(float32) and marks episode boundaries with ``episode_starts[t]`` -- the done
flag of step ``t - 1`` -- plus ``dones`` for the last step. It handles
truncation while collecting: for a step cut by a time limit,
``OnPolicyAlgorithm.collect_rollouts`` adds ``gamma * V(terminal_observation)``
to the reward, and the step then counts as done. So by the time
``compute_returns_and_advantage`` runs, every done is a plain termination and
the bootstrap already sits in the reward; this module reproduces exactly that
computation (to float32 rounding) with :func:`fastppo.gae`.

Use it in one of three ways:

* ``PPO(..., rollout_buffer_class=fastppo.compat.sb3.RolloutBuffer)``
  (or :class:`DictRolloutBuffer` for dict observations);
* :func:`compute_returns_and_advantage` on any SB3 rollout buffer;
* :func:`sb3_gae` on plain arrays in SB3's conventions.

Only :class:`RolloutBuffer` and :class:`DictRolloutBuffer` import
``stable_baselines3``; the functions need nothing but the buffer's arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _checks as C
from fastppo.compat._optional import require

# The buffer classes are built on first access (module __getattr__).
__all__ = [  # noqa: F822
    "DictRolloutBuffer",
    "RolloutBuffer",
    "compute_returns_and_advantage",
    "sb3_gae",
]


def sb3_gae(
    rewards: Any,
    values: Any,
    episode_starts: Any,
    last_values: Any,
    dones: Any,
    *,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    out: tuple[Any, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE in Stable-Baselines3's conventions (its ``compute_returns_and_advantage``).

    Parameters
    ----------
    rewards : float32 or float64, [T, N]
        SB3's ``buffer.rewards``: for steps cut by a time limit these already
        hold ``r + gamma * V(terminal_observation)``.
    values : same dtype and shape as ``rewards``
        ``buffer.values``, ``V(obs[t])``.
    episode_starts : bool, uint8 or float 0/1, [T, N]
        ``buffer.episode_starts``: 1 where ``obs[t]`` starts an episode, i.e.
        where step ``t - 1`` was done. Row 0 is not read.
    last_values : [N] or [N, 1], ``rewards``' dtype (torch CPU tensor accepted)
        ``V(obs[T])``, the value of the observation after the last step.
    dones : flags, [N]
        Whether the last step (``t = T-1``) was done.
    gamma, gae_lambda : float in [0, 1]
    out : (advantages, returns), optional
        Preallocated ``[T, N]`` outputs of ``rewards``' dtype (numpy arrays or
        torch CPU tensors); written in place.

    Returns
    -------
    advantages, returns : arrays of ``rewards``' dtype, [T, N]
        ``returns = advantages + values``.

    Notes
    -----
    With ``d_t = episode_starts[t + 1]`` (``dones`` at ``t = T-1``):
    ``delta_t = r_t + gamma * (1 - d_t) * V_{t+1} - V_t`` and
    ``A_t = delta_t + gamma * lambda * (1 - d_t) * A_{t+1}`` -- the same
    recurrence as SB3's loop, so results agree to float32 rounding.
    """
    fn = "sb3_gae"
    r = C.float_array(fn, "rewards", rewards, ndims=(2,))
    T, N = r.shape
    if T == 0 or N == 0:
        C.fail(fn, "rewards", "non-empty [T, N]", f"shape {r.shape}")
    starts = C.flag_array(fn, "episode_starts", episode_starts, (T, N))
    d = C.flag_array(fn, "dones", C.as_array(fn, "dones", dones).reshape(-1), (N,))
    lv = C.as_array(fn, "last_values", last_values)
    if lv.ndim == 2 and lv.shape[1] == 1:
        lv = lv.reshape(-1)  # SB3 passes V(obs) as [N, 1]
    # SB3's episode_starts[t + 1] is "step t was done": as fastppo's per-step
    # `terminated` it cuts the trace and zeroes the bootstrap, which is what SB3
    # does (time-limit bootstraps were folded into the rewards while collecting).
    terminated = np.empty((T, N), np.uint8)
    terminated[:-1] = starts[1:]
    terminated[-1] = d
    from fastppo.advantages import gae

    # errors from gae name this function and its own arguments
    with C.reported_as(fn, {"terminated": "episode_starts"}):
        return gae(r, values, lv, terminated, gamma=gamma, gae_lambda=gae_lambda, out=out)


def compute_returns_and_advantage(buffer: Any, last_values: Any, dones: Any) -> None:
    """Fill ``buffer.advantages`` and ``buffer.returns`` like SB3's method does.

    A drop-in for ``RolloutBuffer.compute_returns_and_advantage(last_values,
    dones)`` that works on any SB3 rollout buffer (``RolloutBuffer``,
    ``DictRolloutBuffer`` or a subclass): it reads ``rewards``, ``values``,
    ``episode_starts``, ``gamma`` and ``gae_lambda`` from ``buffer`` and writes
    the results into its existing ``advantages`` and ``returns`` arrays (no
    allocation when they have the right shape and dtype).

    Parameters
    ----------
    buffer : SB3 rollout buffer
    last_values : torch tensor or array, [N, 1] or [N]
        ``V(obs[T])`` as SB3's ``collect_rollouts`` passes it.
    dones : array of flags, [N]
        Whether the last step was done.
    """
    rewards = buffer.rewards
    shape, dt = rewards.shape, rewards.dtype
    outs = []
    for name in ("advantages", "returns"):
        a = getattr(buffer, name, None)
        if not (
            isinstance(a, np.ndarray) and a.shape == shape and a.dtype == dt and a.flags.writeable
        ):
            a = np.empty(shape, dt)
            setattr(buffer, name, a)
        outs.append(a)
    names = {k: f"buffer.{k}" for k in ("rewards", "values", "episode_starts", "gamma")}
    with C.reported_as(
        "compute_returns_and_advantage", {**names, "gae_lambda": "buffer.gae_lambda"}
    ):
        sb3_gae(
            rewards,
            buffer.values,
            buffer.episode_starts,
            last_values,
            dones,
            gamma=buffer.gamma,
            gae_lambda=buffer.gae_lambda,
            out=(outs[0], outs[1]),
        )


_ROLLOUT_DOC = """SB3 ``RolloutBuffer`` whose GAE runs in fastppo's compiled kernel.

    Pass it as ``PPO(..., rollout_buffer_class=RolloutBuffer)``; everything else
    is SB3's own buffer (same constructor, same methods).
    ``compute_returns_and_advantage(last_values, dones)`` is
    :func:`compute_returns_and_advantage`: results equal SB3's to float32
    rounding, written into the buffer's own ``advantages``/``returns`` arrays.
    Accessing this name imports ``stable_baselines3`` (``ImportError`` with the
    install command when it is missing).
    """

_DICT_DOC = """SB3 ``DictRolloutBuffer`` (dict observations) with fastppo's GAE.

    As :class:`RolloutBuffer`, for ``MultiInputPolicy``.
    """

# Signatures and docstrings of the lazily built classes, for docs/gen_api.py
# (which must not need SB3 installed to document them).
STATIC_DOCS: dict[str, tuple[str, str]] = {
    "RolloutBuffer": (
        "class RolloutBuffer(stable_baselines3.common.buffers.RolloutBuffer)",
        _ROLLOUT_DOC,
    ),
    "DictRolloutBuffer": (
        "class DictRolloutBuffer(stable_baselines3.common.buffers.DictRolloutBuffer)",
        _DICT_DOC,
    ),
}


def _make_buffers() -> dict[str, type]:
    buffers = require(
        "stable_baselines3.common.buffers", "stable-baselines3", "fastppo.compat.sb3.RolloutBuffer"
    )

    class RolloutBuffer(buffers.RolloutBuffer):  # type: ignore[name-defined]
        __doc__ = _ROLLOUT_DOC

        def compute_returns_and_advantage(self, last_values: Any, dones: np.ndarray) -> None:
            """Fill ``advantages`` and ``returns`` with fastppo's GAE kernel."""
            compute_returns_and_advantage(self, last_values, dones)

    class DictRolloutBuffer(buffers.DictRolloutBuffer):  # type: ignore[name-defined]
        __doc__ = _DICT_DOC

        def compute_returns_and_advantage(self, last_values: Any, dones: np.ndarray) -> None:
            """Fill ``advantages`` and ``returns`` with fastppo's GAE kernel."""
            compute_returns_and_advantage(self, last_values, dones)

    classes: dict[str, type] = {
        "RolloutBuffer": RolloutBuffer,
        "DictRolloutBuffer": DictRolloutBuffer,
    }
    for name, cls in classes.items():
        # Found by name through the module's __getattr__, so instances pickle.
        cls.__module__ = __name__
        cls.__qualname__ = name
    return classes


def __getattr__(name: str) -> Any:
    # The buffer classes subclass SB3's, so they exist only once SB3 is imported.
    if name in ("RolloutBuffer", "DictRolloutBuffer"):
        classes = _make_buffers()
        globals().update(classes)
        return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
