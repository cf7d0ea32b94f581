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

Use the GAE in one of three ways:

* ``PPO(..., rollout_buffer_class=fastppo.compat.sb3.RolloutBuffer)``
  (or :class:`DictRolloutBuffer` for dict observations);
* :func:`compute_returns_and_advantage` on any SB3 rollout buffer;
* :func:`sb3_gae` on plain arrays in SB3's conventions.

The module also serves SB3 fastppo's compiled envs (:mod:`fastppo.envs`):
:func:`make_vec_env` returns a :class:`CompiledVecEnv`, an SB3 ``VecEnv``
whose step is one compiled call for the whole batch, for SB3's algorithms in
place of ``stable_baselines3.common.env_util.make_vec_env``'s ``DummyVecEnv``.

Only :class:`RolloutBuffer`, :class:`DictRolloutBuffer`,
:class:`CompiledVecEnv` and :func:`make_vec_env` import ``stable_baselines3``;
the functions need nothing but the buffer's arrays.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from fastppo import _checks as C
from fastppo.compat._optional import require

# The buffer classes are built on first access (module __getattr__).
__all__ = [  # noqa: F822
    "CompiledVecEnv",
    "DictRolloutBuffer",
    "RolloutBuffer",
    "compute_returns_and_advantage",
    "make_vec_env",
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

_VEC_DOC = """SB3 ``VecEnv`` over a compiled vector env: one compiled call per step.

    ``CompiledVecEnv(venv)`` serves a :class:`fastppo.envs.CompiledVectorEnv`
    made with ``autoreset_mode="same_step"`` to SB3's algorithms;
    :func:`make_vec_env` builds both. ``venv`` stays reachable as ``.venv``
    (its ``state`` and ``elapsed_steps`` are writable in place). SB3's
    conventions are kept as its ``DummyVecEnv`` keeps them:

    * ``reset()`` returns the observations only. Seeds from ``seed(s)``
      (env ``i`` gets ``s + i``) and options from ``set_options`` apply to
      that one reset; envs without a seed continue their reset streams.
    * ``step(actions)`` returns ``(obs, rewards, dones, infos)``: float32
      ``[N, obs_dim]``, float32 ``[N]``, bool ``[N]`` and a list of ``N``
      dicts. An env whose episode ended was reset in the same step (``obs``
      holds its new first observation); its info has ``"terminal_observation"``
      (the episode's last observation) and ``"TimeLimit.truncated"`` (cut by
      the time limit and not terminated: what SB3 reads to bootstrap). Every
      other info is ``{"TimeLimit.truncated": False}``, as in ``DummyVecEnv``.
    * Actions as SB3's policies give them: ints ``[N]`` for a discrete env,
      floats ``[N, 1]`` for a continuous one.

    ``get_attr`` answers for ``observation_space``, ``action_space``,
    ``spec``, ``metadata`` and ``render_mode`` what one gymnasium env of the
    id would. There is no per-env Python object to set attributes on or call
    methods of, and no gymnasium wrapper: ``set_attr`` and ``env_method``
    raise ``NotImplementedError``, ``env_is_wrapped`` is ``False`` for every
    wrapper (the time limit is part of the compiled step). Made with
    ``render_mode="rgb_array"``, ``get_images()`` returns every env's frame
    (gymnasium's renderer drawing that env's state) and SB3's ``render()``
    tiles them. Wrap it in ``VecMonitor`` for SB3's episode statistics.
    Accessing this name imports ``stable_baselines3``.
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
    "CompiledVecEnv": (
        "class CompiledVecEnv(stable_baselines3.common.vec_env.VecEnv)",
        _VEC_DOC,
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


#: what ``CompiledVecEnv.get_attr`` answers (the per-env view of one gymnasium env)
_ENV_ATTRS = ("observation_space", "action_space", "spec", "metadata", "render_mode")


def _make_vec_env_class() -> type:
    vec_env = require(
        "stable_baselines3.common.vec_env", "stable-baselines3", "fastppo.compat.sb3.CompiledVecEnv"
    )
    from gymnasium.vector import AutoresetMode

    from fastppo.envs import CompiledVectorEnv

    class CompiledVecEnv(vec_env.VecEnv):  # type: ignore[name-defined]
        __doc__ = _VEC_DOC

        def __init__(self, venv: CompiledVectorEnv) -> None:
            fn = "CompiledVecEnv"
            if not isinstance(venv, CompiledVectorEnv):
                C.fail(
                    fn,
                    "venv",
                    "a fastppo.envs.CompiledVectorEnv",
                    C.describe(venv),
                    "make one with fastppo.compat.sb3.make_vec_env(env_id, n_envs)",
                    exc=TypeError,
                )
            if venv.autoreset_mode is not AutoresetMode.SAME_STEP:
                C.fail(
                    fn,
                    "venv",
                    "a CompiledVectorEnv with autoreset_mode='same_step' (SB3's convention)",
                    f"autoreset_mode={venv.autoreset_mode.value!r}",
                    "make one with fastppo.compat.sb3.make_vec_env(env_id, n_envs)",
                )
            self.venv = venv
            n = venv.num_envs
            self._env_range = range(n)
            self._actions: Any = None
            # single spaces, as DummyVecEnv takes them from its first env
            super().__init__(n, venv.single_observation_space, venv.single_action_space)
            self.metadata = {k: v for k, v in venv.metadata.items() if k != "autoreset_mode"}

        # ----------------------------------------------------------- reset
        def reset(self) -> np.ndarray:
            """Reset every env; returns the observations, float32 ``[N, obs_dim]``.

            Uses (then clears) the seeds of ``seed()`` and the options of
            ``set_options()``, as ``DummyVecEnv`` does.
            """
            seeds, options = self._seeds, self._options
            with C.reported_as("CompiledVecEnv.reset", {"options": "options (set_options)"}):
                if all(s is None for s in seeds) and not any(options):
                    obs, _ = self.venv.reset()
                else:
                    obs = self._reset_groups(list(seeds), list(options))
            self._reset_seeds()
            self._reset_options()
            self.reset_infos: list[dict[str, Any]] = [{} for _ in self._env_range]
            return obs

        def _reset_groups(self, seeds: list[int | None], options: list[dict[str, Any]]) -> Any:
            """One ``venv.reset`` per group of envs sharing options and seeded-ness."""
            n = self.num_envs
            groups: list[tuple[dict[str, Any], bool, list[int]]] = []
            for i in range(n):
                key = (options[i] or {}, seeds[i] is not None)
                for g in groups:
                    if g[1] == key[1] and g[0] == key[0]:
                        g[2].append(i)
                        break
                else:
                    groups.append((key[0], key[1], [i]))
            obs = None
            for opts, seeded, members in groups:
                o = dict(opts)
                if len(members) < n:
                    mask = np.zeros(n, np.bool_)
                    mask[members] = True
                    o["reset_mask"] = mask
                obs, _ = self.venv.reset(seed=seeds if seeded else None, options=o or None)
            return obs  # the last masked reset returns every env's observation

        # ------------------------------------------------------------ step
        def step_async(self, actions: np.ndarray) -> None:
            """Keep ``actions`` for :meth:`step_wait` (the step is synchronous)."""
            self._actions = actions

        def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
            """Step every env with the kept actions: ``(obs, rewards, dones, infos)``."""
            actions = self._actions
            try:
                obs, reward, terminated, truncated, info = self.venv.step(actions)
            except (TypeError, ValueError):
                # Refused before any env moved: refuse again, naming this class.
                with C.reported_as("CompiledVecEnv.step", {}):
                    self.venv.step(actions)
                raise
            dones = terminated | truncated
            infos: list[dict[str, Any]] = [{"TimeLimit.truncated": False} for _ in self._env_range]
            if info:  # only when an episode ended (same-step autoreset)
                final = info["final_obs"]
                for i in np.flatnonzero(dones).tolist():
                    d = infos[i]
                    d["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
                    d["terminal_observation"] = final[i]
            return obs, reward.astype(np.float32), dones, infos

        # ------------------------------------------------------ attributes
        def _indices(self, fn: str, indices: Any) -> list[int]:
            idx = list(self._get_indices(indices))
            n = self.num_envs
            for i in idx:
                if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n:
                    C.fail(fn, "indices", f"None, an int or ints in [0, {n})", repr(indices))
            return [int(i) for i in idx]

        def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
            """Per env, what one gymnasium env of the id has as ``attr_name``.

            Answers for ``observation_space``, ``action_space``, ``spec``,
            ``metadata`` and ``render_mode``; any other name raises
            ``AttributeError`` (so ``has_attr`` is ``False`` for it).
            """
            fn = "CompiledVecEnv.get_attr"
            if attr_name not in _ENV_ATTRS:
                C.fail(
                    fn,
                    "attr_name",
                    f"one of {', '.join(_ENV_ATTRS)}",
                    repr(attr_name),
                    "the compiled envs are arrays, not gymnasium env objects; "
                    "read .venv (the CompiledVectorEnv) for state and elapsed_steps",
                    exc=AttributeError,
                )
            idx = self._indices(fn, indices)
            v = self.venv
            value = {
                "observation_space": v.single_observation_space,
                "action_space": v.single_action_space,
                "spec": v.spec,
                "metadata": {k: m for k, m in v.metadata.items() if k != "autoreset_mode"},
                "render_mode": v.render_mode,
            }[attr_name]
            return [value for _ in idx]

        def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
            """Not supported: there is no per-env Python object (raises)."""
            raise NotImplementedError(
                f"CompiledVecEnv.set_attr: cannot set {attr_name!r}: the compiled envs are "
                "arrays, not gymnasium env objects; write .venv.state or .venv.elapsed_steps "
                "in place instead"
            )

        def env_method(
            self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
        ) -> list[Any]:
            """Not supported: there is no per-env Python object (raises)."""
            raise NotImplementedError(
                f"CompiledVecEnv.env_method: cannot call {method_name!r}: the compiled envs "
                "are arrays, not gymnasium env objects; use reset() or the methods of .venv "
                "(the CompiledVectorEnv)"
            )

        def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
            """``False`` per env: no gymnasium wrapper is involved.

            The time limit is part of the compiled step, and episode statistics
            come from wrapping this ``VecEnv`` in ``VecMonitor``.
            """
            return [False for _ in self._indices("CompiledVecEnv.env_is_wrapped", indices)]

        # ---------------------------------------------------------- render
        def get_images(self) -> list[Any]:
            """Every env's ``[H, W, 3]`` uint8 frame (``render_mode="rgb_array"``);
            ``None`` per env with a warning otherwise, as ``DummyVecEnv``."""
            if self.venv.render_mode != "rgb_array":
                warnings.warn(
                    f"CompiledVecEnv.get_images: the render_mode is {self.venv.render_mode!r}; "
                    "make the env with make_vec_env(..., render_mode='rgb_array') for frames",
                    stacklevel=2,
                )
                return [None for _ in self._env_range]
            return list(self.venv.render() or ())

        def close(self) -> None:
            """Close the compiled env (it holds nothing to release)."""
            self.venv.close()

        def __repr__(self) -> str:
            return f"CompiledVecEnv({self.venv.env_id}, n_envs={self.num_envs})"

    CompiledVecEnv.__module__ = __name__
    CompiledVecEnv.__qualname__ = "CompiledVecEnv"
    return CompiledVecEnv


def make_vec_env(
    env_id: str, n_envs: int, seed: int | None = None, render_mode: str | None = None
) -> Any:
    """SB3 ``VecEnv`` of ``n_envs`` compiled copies of ``env_id``: a :class:`CompiledVecEnv`.

    A drop-in for ``stable_baselines3.common.env_util.make_vec_env(env_id,
    n_envs, seed=seed)`` for the ids of :func:`fastppo.envs.ids`
    (CartPole-v1, Acrobot-v1, MountainCar-v0, MountainCarContinuous-v0,
    Pendulum-v1), without the ``Monitor`` wrapper: wrap the result in
    ``VecMonitor`` for episode statistics. ``seed`` keys the envs' reset
    streams (env ``i`` draws from ``(seed, i)``; ``None`` takes a seed from
    the OS); SB3's ``seed()`` (which ``PPO(seed=...)`` calls) reseeds them at
    the next ``reset()``. ``render_mode="rgb_array"`` (SB3's
    ``env_kwargs={"render_mode": ...}``) gives frames (needs pygame).
    Needs ``stable_baselines3``.
    """
    cls = __getattr__("CompiledVecEnv")  # ImportError naming the install first
    from fastppo.envs import make_vec

    with C.reported_as("fastppo.compat.sb3.make_vec_env", {"num_envs": "n_envs"}):
        venv = make_vec(
            env_id, n_envs, seed=seed, autoreset_mode="same_step", render_mode=render_mode
        )
    return cls(venv)


def __getattr__(name: str) -> Any:
    # The buffer and VecEnv classes subclass SB3's, so they exist only once SB3
    # is imported.
    if name in ("RolloutBuffer", "DictRolloutBuffer"):
        classes = _make_buffers()
        globals().update(classes)
        return classes[name]
    if name == "CompiledVecEnv":
        cls = _make_vec_env_class()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
