"""``CompiledVectorEnv``: a ``gymnasium.vector.VectorEnv`` whose step is one compiled call.

The Python side validates, allocates the outputs and builds gymnasium's info
dict; everything per env (physics, time limit, autoreset, the reset draws)
happens inside the env's kernel (:mod:`fastppo.envs._loop`).
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any, cast

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from fastppo._checks import as_array, describe, fail
from fastppo._cy import _fast
from fastppo.envs import MODULES
from fastppo.envs._loop import BOOK_ROWS, ELAPSED, KEY_HI, KEY_LO, RESETS, step_entry
from fastppo.envs._render import MODES as RENDER_MODES
from fastppo.envs._render import Renderer, check_mode

_MODES = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}
_U32 = 0xFFFFFFFF


def env_module(fn: str, env_id: Any) -> ModuleType:
    """The module of compiled env ``env_id``, or the house error naming the ids there are."""
    if not isinstance(env_id, str):
        fail(fn, "env_id", "a str", repr(env_id), exc=TypeError)
    name = MODULES.get(env_id)
    if name is None:
        fail(fn, "env_id", f"one of {', '.join(MODULES)}", repr(env_id))
    return importlib.import_module(name)


@functools.cache
def _gym_facts(env_id: str) -> tuple[gym.Space[Any], gym.Space[Any], dict[str, Any], Any]:
    """Single spaces, metadata and spec of gymnasium's own env class for ``env_id``.

    Read from the class itself, so they cannot drift from gymnasium's.
    """
    spec = gym.spec(env_id)
    env = gym.envs.registration.load_env_creator(str(spec.entry_point))()
    try:
        return env.observation_space, env.action_space, dict(env.metadata), spec
    finally:
        env.close()


def _autoreset_mode(fn: str, mode: Any) -> AutoresetMode:
    if isinstance(mode, AutoresetMode):
        mode = {v: k for k, v in _MODES.items()}.get(mode, mode.value)
    if mode not in _MODES:
        fail(fn, "autoreset_mode", "'next_step' or 'same_step'", repr(mode))
    return _MODES[mode]


def _seed_value(fn: str, name: str, seed: Any) -> int:
    """A seed as a 64-bit key; None draws one from the OS's entropy."""
    if seed is None:
        return int(cast(int, np.random.SeedSequence().entropy)) & 0xFFFFFFFFFFFFFFFF
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        fail(fn, name, "None or an int in [0, 2**64)", repr(seed), exc=TypeError)
    return int(seed)


class CompiledVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a classic-control env stepped by one compiled call.

    Same single and batched spaces, autoreset semantics (``"next_step"``,
    gymnasium's default, or ``"same_step"`` with ``final_obs``/``final_info``
    in the info dict) and time limit as ``gymnasium.make_vec(env_id)``; from
    the same state and actions, the same observations, rewards (float64),
    terminated and truncated, bit for bit (each env module's docstring says
    how, and the one exception, Acrobot's reset observation). Env ``i``'s
    ``k``-th reset is drawn from the counter-based generator keyed by
    ``(seed, i, k)``, whatever ``num_envs`` is.

    ``state`` [N, S] float64 is the writable array the next step starts from;
    ``elapsed_steps`` [N] int64 counts each env's steps in its episode (after
    the step that ends an episode: that episode's length in ``"next_step"``
    mode, 0 in ``"same_step"`` mode; 0 after a reset).

    ``render_mode="rgb_array"`` makes :meth:`render` return every env's frame,
    drawn by gymnasium's own renderer from that env's state (pygame needed:
    ``pip install 'fastppo[render]'``); ``"human"`` (a window per env) is not
    offered.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        *,
        seed: int | None = None,
        autoreset_mode: str | AutoresetMode = "next_step",
        render_mode: str | None = None,
    ) -> None:
        fn = "fastppo.envs.make_vec"
        mod = env_module(fn, env_id)
        render_mode = check_mode(fn, render_mode)
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)):
            fail(fn, "num_envs", "an int >= 1", repr(num_envs), exc=TypeError)
        if num_envs < 1:
            fail(fn, "num_envs", "an int >= 1", repr(num_envs))
        mode = _autoreset_mode(fn, autoreset_mode)
        n = int(num_envs)
        single_obs, single_act, metadata, spec = _gym_facts(env_id)
        self.num_envs = n
        self.single_observation_space = copy.deepcopy(single_obs)
        self.single_action_space = copy.deepcopy(single_act)
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)
        self.metadata = {
            "render_modes": list(RENDER_MODES),
            "render_fps": metadata.get("render_fps"),
            "autoreset_mode": mode,
        }
        self.render_mode = render_mode
        self._renderer: Renderer | None = None
        self._last_actions: np.ndarray | None = None  # kept only when rendering
        self.spec = copy.deepcopy(spec)
        self.env_id = env_id
        self.autoreset_mode = mode
        self.max_episode_steps = int(spec.max_episode_steps)
        self._mod = mod
        self._discrete = hasattr(mod, "N_ACTIONS")
        self._same_step = mode is AutoresetMode.SAME_STEP
        self._obs_dim = int(mod.OBS_DIM)
        self._state = np.zeros((n, mod.STATE_DIM), np.float64)
        self._book = np.zeros((BOOK_ROWS, n), np.int64)
        self._no_mask = np.empty(0, np.bool_)
        self._seed_keys(_seed_value(fn, "seed", seed), None)
        self._last_obs = np.zeros((n, self._obs_dim), np.float32)
        self._obs_shape = (n, self._obs_dim)
        #: what step() expects of the action values (the house error's "must be")
        self._act_rule = (
            f"integer actions in [0, {mod.N_ACTIONS})" if self._discrete else "actions without NaN"
        )
        self._c_step = (
            0  # the step's C entry, compiled on the first step (a fused rollout never needs it)
        )
        self._needs_reset = True

    # ----------------------------------------------------------------- state
    @property
    def state(self) -> np.ndarray:
        """[N, S] float64: what the next step starts from (writable, in place)."""
        return self._state

    @state.setter
    def state(self, value: Any) -> None:
        a = as_array("CompiledVectorEnv.state", "value", value)
        if a.shape != self._state.shape:
            fail(
                "CompiledVectorEnv.state", "value", f"shape {self._state.shape}", f"shape {a.shape}"
            )
        self._state[...] = a

    @property
    def elapsed_steps(self) -> np.ndarray:
        """[N] int64: steps of each env's current episode."""
        return self._book[ELAPSED]

    def _seed_keys(self, seed: int, which: np.ndarray | None) -> None:
        rows = slice(None) if which is None else which
        self._book[KEY_LO, rows] = seed & _U32
        self._book[KEY_HI, rows] = seed >> 32
        self._book[RESETS, rows] = 0

    # ----------------------------------------------------------------- reset
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | None = None,
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset every env (or those of ``options["reset_mask"]``); returns ``(obs, {})``.

        ``seed``: an int keys every env's reset stream afresh (env ``i`` draws
        from ``(seed, i)``); a list gives env ``i`` the seed ``seed[i]``
        (``None`` entries draw from the OS); ``None`` continues the streams.
        ``options``: the env's reset parameters (``low``/``high``, or
        ``x_init``/``y_init`` for Pendulum, as gymnasium's env takes them; they
        apply to this reset, autoresets use the defaults) and ``reset_mask``.
        """
        fn = "CompiledVectorEnv.reset"
        n = self.num_envs
        opts = dict(options) if options is not None else {}
        mask = self._no_mask
        if "reset_mask" in opts:
            m = opts.pop("reset_mask")
            if not isinstance(m, np.ndarray) or m.dtype != np.bool_:
                fail(fn, "options['reset_mask']", "a numpy bool array", describe(m), exc=TypeError)
            if m.shape != (n,) or not m.any():
                fail(fn, "options['reset_mask']", f"shape ({n},) with a True entry", describe(m))
            mask = np.ascontiguousarray(m)
        p0, p1 = self._reset_params(fn, opts)
        which = None if mask.size == 0 else mask
        if seed is not None:
            if isinstance(seed, (list, tuple)):
                if len(seed) != n:
                    fail(fn, "seed", f"a list of {n} seeds", f"{len(seed)} seeds")
                for i, s in enumerate(seed):
                    if which is None or which[i]:
                        self._seed_keys(_seed_value(fn, f"seed[{i}]", s), np.array([i]))
            else:
                self._seed_keys(_seed_value(fn, "seed", seed), which)
        obs = np.zeros((n, self._obs_dim), np.float32)
        if which is not None:
            obs[...] = self._last_obs
        self._mod.reset(self._state, self._book, mask, p0, p1, obs)
        self._last_obs = obs
        self._needs_reset = False
        return obs.copy(), {}

    def _reset_params(self, fn: str, opts: dict[str, Any]) -> tuple[float, float]:
        names = self._mod.RESET_PARAMS
        extra = sorted(set(opts) - set(names))
        if extra:
            fail(fn, "options", f"keys among {[*names, 'reset_mask']}", repr(extra))
        vals = []
        for name, default in zip(names, self._mod.RESET_DEFAULTS):
            v = opts.get(name, default)
            try:
                v = float(v)
            except (TypeError, ValueError):
                fail(fn, f"options[{name!r}]", "a number", repr(v), exc=TypeError)
            if not np.isfinite(v):
                fail(fn, f"options[{name!r}]", "finite", repr(v))
            vals.append(v)
        if names == ("low", "high") and vals[0] > vals[1]:
            fail(fn, "options", "low <= high", f"low={vals[0]!r}, high={vals[1]!r}")
        return vals[0], vals[1]

    # ------------------------------------------------------------------ step
    def _actions(self, actions: Any) -> np.ndarray:
        fn = "CompiledVectorEnv.step"
        a = actions if type(actions) is np.ndarray else as_array(fn, "actions", actions)
        n = self.num_envs
        if self._discrete:
            if a.dtype.kind not in "iu":
                fail(fn, "actions", self._act_rule, f"dtype {a.dtype}", exc=TypeError)
            if a.shape != (n,):
                fail(fn, "actions", f"shape ({n},)", f"shape {a.shape}")
            if a.dtype != np.int64 or not (a.flags.c_contiguous and a.flags.aligned):
                if a.dtype == np.uint64 and n and int(a.max()) >= self._mod.N_ACTIONS:
                    fail(
                        fn,
                        "actions",
                        self._act_rule,
                        f"value {int(a.max())} at index {int(a.argmax())}",
                    )
                a = np.require(a, np.int64, ("C", "A"))
            return a
        if a.dtype.kind != "f":
            fail(
                fn,
                "actions",
                "float actions (cast to float32, the space's dtype)",
                f"dtype {a.dtype}",
                exc=TypeError,
            )
        if a.shape != (n, 1):
            fail(fn, "actions", f"shape ({n}, 1)", f"shape {a.shape}")
        if a.dtype != np.float32 or not (a.flags.c_contiguous and a.flags.aligned):
            a = np.require(a, np.float32, ("C", "A"))
        return a

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One step of every env: ``(obs, reward, terminated, truncated, info)``.

        Every action is checked before any env moves: discrete actions are
        ints in ``[0, n)`` of shape [N]; continuous ones floats of shape
        [N, 1], cast to float32 (the action space's dtype) and clipped by the
        env as gymnasium's does; a NaN raises.
        """
        if self._needs_reset:
            raise gym.error.ResetNeeded("CompiledVectorEnv.step: call reset() before step()")
        if self._c_step == 0:
            self._c_step = int(step_entry(self._mod.__name__).address)
        # actions in the env's own form go straight to the C entry; others are
        # validated and cast first (the house errors), then go the same way
        a = actions
        out = _fast.env_step(
            self._c_step, self._state, self._book, a, self._discrete,
            self.max_episode_steps, self._same_step, self._obs_dim,
        )  # fmt: skip
        if out is None:
            a = self._actions(actions)
            out = _fast.env_step(
                self._c_step, self._state, self._book, a, self._discrete,
                self.max_episode_steps, self._same_step, self._obs_dim,
            )  # fmt: skip
            assert out is not None  # _actions returns the env's own form
        obs, reward, terminated, truncated, final, bad = out
        if bad >= 0:
            self._refuse(a, bad)
        self._last_obs = obs
        if self.render_mode is not None:
            self._last_actions = np.array(a, copy=True).reshape(self.num_envs, -1)
        if self._same_step:
            done = terminated | truncated
            if done.any():
                assert final is not None  # env_step makes it in same-step mode
                final_obs = np.full(self.num_envs, None, dtype=object)
                for i in np.flatnonzero(done):
                    final_obs[i] = final[i]
                info = {"final_obs": final_obs, "_final_obs": done, "final_info": {}}
                info["_final_info"] = done.copy()
                return obs, reward, terminated, truncated, info
        return obs, reward, terminated, truncated, {}

    def _refuse(self, a: np.ndarray, bad: int) -> None:
        fail(
            "CompiledVectorEnv.step",
            "actions",
            self._act_rule,
            f"value {a[bad].tolist()!r} at index {bad}",
        )

    # ---------------------------------------------------------------- render
    def render(self) -> tuple[np.ndarray, ...] | None:
        """Every env's ``[H, W, 3]`` uint8 frame (``render_mode="rgb_array"``),
        as gymnasium's env of this id draws that state; ``None`` with a warning
        when the env was made without a render mode (as gymnasium does)."""
        if self.render_mode is None:
            gym.logger.warn(
                "CompiledVectorEnv.render: no render mode; make the env with "
                f'fastppo.envs.make_vec("{self.env_id}", n, render_mode="rgb_array")'
            )
            return None
        if self._needs_reset:
            raise gym.error.ResetNeeded("CompiledVectorEnv.render: call reset() before render()")
        if self._renderer is None:
            self._renderer = Renderer(self.env_id)
        return self._renderer.frames(self._state, self.elapsed_steps == 0, self._last_actions)

    def close_extras(self, **kwargs: Any) -> None:
        """Release the renderer, if one was made (the env itself is arrays)."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    def __repr__(self) -> str:
        return f"CompiledVectorEnv({self.env_id}, num_envs={self.num_envs})"
