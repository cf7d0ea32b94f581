"""MountainCar-v0, compiled: gymnasium's ``MountainCarEnv`` for N envs at once.

An underpowered car in a valley (Moore, "Efficient memory-based learning for
robot control", PhD thesis, Cambridge 1990); actions push left (0), coast
(1) or push right (2):

    v <- clip(v + (a - 1) 0.001 - 0.0025 cos(3 p), -0.07, 0.07)
    p <- clip(p + v, -1.2, 0.6);  v <- 0 if p == -1.2 and v < 0

in gymnasium's order (``math.cos`` is libm's, as is Numba's). Reward -1 per
step; terminated when ``p >= 0.5`` and ``v >= 0``; truncated at 200 steps.
State ``[position, velocity]`` float64; reset position uniform in
``[low, high)`` = ``[-0.6, -0.4)``, velocity 0.
"""

from __future__ import annotations

import math

import numpy as np

from fastppo._jit import inline
from fastppo.envs._loop import reset_kernel

STATE_DIM = 2
OBS_DIM = 2
N_ACTIONS = 3
RESET_PARAMS = ("low", "high")
RESET_DEFAULTS = (-0.6, -0.4)

MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.5
GOAL_VELOCITY = 0
FORCE = 0.001
GRAVITY = 0.0025
_NEG_GRAVITY = -GRAVITY


@inline
def valid(actions, i):  # pragma: no cover - compiled
    return 0 <= actions[i] < N_ACTIONS


@inline
def step_row(s, i, actions, elapsed):  # pragma: no cover - compiled
    position = s[i, 0]
    velocity = s[i, 1]
    velocity += np.float64(actions[i] - 1) * FORCE + math.cos(3 * position) * _NEG_GRAVITY
    velocity = min(max(velocity, -MAX_SPEED), MAX_SPEED)  # np.clip of a finite scalar
    position += velocity
    position = min(max(position, MIN_POSITION), MAX_POSITION)
    if position == MIN_POSITION and velocity < 0:
        velocity = 0.0
    s[i, 0] = position
    s[i, 1] = velocity
    terminated = position >= GOAL_POSITION and velocity >= GOAL_VELOCITY
    return -1.0, terminated


@inline
def obs_row(s, i, obs):  # pragma: no cover - compiled
    obs[i, 0] = np.float32(s[i, 0])
    obs[i, 1] = np.float32(s[i, 1])


@inline
def reset_row(s, i, u0, u1, u2, u3, low, high):  # pragma: no cover - compiled
    s[i, 0] = low + (high - low) * u0
    s[i, 1] = 0.0


reset = reset_kernel(__name__)
