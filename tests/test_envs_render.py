"""Rendering of the compiled envs: gymnasium's own frames of the same states."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from fastppo import envs


def _action(env_id: str, r: np.random.Generator) -> np.ndarray:
    if env_id in ("Pendulum-v1", "MountainCarContinuous-v0"):
        return r.uniform(-2.5, 2.5, (1,)).astype(np.float32)  # out of bounds too: clipped
    return np.array(r.integers(0, 2 if env_id == "CartPole-v1" else 3))


@pytest.mark.parametrize("env_id", envs.ids())
def test_frames_are_gymnasiums_for_the_same_state(env_id: str) -> None:
    n = 2
    ours = envs.make_vec(env_id, n, seed=0, render_mode="rgb_array")
    theirs = [gym.make(env_id, render_mode="rgb_array") for _ in range(n)]
    r = np.random.default_rng(5)
    try:
        assert ours.metadata["render_modes"] == ["rgb_array"] and ours.render_mode == "rgb_array"
        ours.reset()
        for i, e in enumerate(theirs):
            e.reset(seed=i)
            ours.state[i] = e.unwrapped.state
        for t in range(4):
            frames = ours.render()
            assert frames is not None and len(frames) == n
            for f, e in zip(frames, theirs):
                g = e.render()
                assert f.dtype == np.uint8 and f.shape == g.shape
                assert np.array_equal(f, g), (env_id, t)
            acts = [_action(env_id, r) for _ in range(n)]
            ours.step(np.stack(acts))
            for e, a in zip(theirs, acts):
                e.step(a)
    finally:
        ours.close()
        for e in theirs:
            e.close()
    assert ours._renderer is None  # close() released it


def test_render_mode_rules() -> None:
    env = envs.make_vec("CartPole-v1", 2, seed=0)
    env.reset()
    with pytest.warns(UserWarning, match="no render mode"):
        assert env.render() is None
    with pytest.raises(
        ValueError,
        match=r"make_vec: render_mode must be None or one of \['rgb_array'\], got 'human'",
    ):
        envs.make_vec("CartPole-v1", 2, render_mode="human")
    with pytest.raises(gym.error.ResetNeeded):
        envs.make_vec("CartPole-v1", 2, render_mode="rgb_array").render()


def test_render_without_pygame_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pygame", None)  # import pygame -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'fastppo\[render\]'"):
        envs.make_vec("Acrobot-v1", 1, render_mode="rgb_array")
