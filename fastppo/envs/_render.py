"""Frames of the compiled envs, drawn by gymnasium's own renderer.

A compiled env's ``state`` row has the layout of gymnasium's
``env.unwrapped.state`` for its id, so one gymnasium env per vector env,
made with ``render_mode="rgb_array"``, draws every row: its ``state`` (and
Pendulum's ``last_u``, the torque arrow) is set to the row's, then its
``render()`` is called. The pictures are gymnasium's by construction; only
``pygame`` is needed (gymnasium's ``classic-control`` extra).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo._checks import fail

#: The render modes a compiled vector env offers (``human`` needs a window per env).
MODES = ("rgb_array",)


def check_mode(fn: str, mode: Any) -> str | None:
    """``render_mode`` validated: None, or one of :data:`MODES` with pygame importable."""
    if mode is None:
        return None
    if mode not in MODES:
        fail(fn, "render_mode", f"None or one of {list(MODES)}", repr(mode))
    try:
        import pygame  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"{fn}: render_mode={mode!r} draws with gymnasium's renderer, which needs pygame: "
            "pip install 'fastppo[render]' (or 'gymnasium[classic-control]')"
        ) from e
    return str(mode)


class Renderer:
    """One gymnasium env of ``env_id`` that draws any state row given to it."""

    def __init__(self, env_id: str) -> None:
        import gymnasium as gym

        self._env: Any = gym.make(env_id, render_mode="rgb_array").unwrapped
        self._torque = hasattr(self._env, "max_torque")  # Pendulum draws its last torque

    def frames(
        self, state: np.ndarray, fresh: np.ndarray, last: np.ndarray | None
    ) -> tuple[Any, ...]:
        """``[H, W, 3]`` uint8 frames of every row of ``state``.

        ``fresh[i]``: env ``i`` has not stepped since its reset (Pendulum
        draws no torque arrow then); ``last[i, 0]``: its last action, clipped
        as the env clipped it (Pendulum's arrow).
        """
        env = self._env
        out = []
        for i in range(state.shape[0]):
            env.state = state[i].copy()
            if self._torque:
                env.last_u = (
                    None
                    if fresh[i] or last is None
                    else np.clip(last[i, 0], -env.max_torque, env.max_torque)
                )
            out.append(env.render())
        return tuple(out)

    def close(self) -> None:
        self._env.close()
