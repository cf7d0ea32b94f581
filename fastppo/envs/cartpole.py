"""CartPole-v1, compiled: gymnasium's ``CartPoleEnv`` dynamics for N envs at once.

A pole on a cart; actions push the cart left (0) or right (1) with 10 N. Euler
integration at 0.02 s (gymnasium's default ``kinematics_integrator``):

    temp     = (F + m_p l theta_dot^2 sin(theta)) / (m_c + m_p)
    theta_dd = (g sin(theta) - cos(theta) temp) / (l (4/3 - m_p cos^2(theta) / (m_c + m_p)))
    x_dd     = temp - m_p l theta_dd cos(theta) / (m_c + m_p)

(Florian, "Correct equations for the dynamics of the cart-pole system", 2007;
Barto, Sutton and Anderson 1983). Reward 1 per step, the terminating one
included; terminated when ``|x| > 2.4`` or ``|theta| > 12 degrees``; truncated
at 500 steps. The expressions below are gymnasium's, in its order, with its
constants computed by the same Python expressions: same operations, same
rounding, so the same bits (``np.square`` is ``x * x``; ``math.sin``/``math.cos``
are libm's, and libm's ``sincos`` computes the pair with their code).

State ``[x, x_dot, theta, theta_dot]`` float64; reset uniform in
``[low, high)`` = ``[-0.05, 0.05)`` per component.
"""

from __future__ import annotations

import math

import numpy as np

from fastppo._jit import inline
from fastppo.envs._libm import sincos
from fastppo.envs._loop import reset_kernel

STATE_DIM = 4
OBS_DIM = 4
N_ACTIONS = 2
#: The two parameters of ``reset(options=)``: ``low`` and ``high``.
RESET_PARAMS = ("low", "high")
RESET_DEFAULTS = (-0.05, 0.05)

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4


@inline
def valid(actions, i):  # pragma: no cover - compiled
    return 0 <= actions[i] < N_ACTIONS


@inline
def step_row(s, i, actions, elapsed):  # pragma: no cover - compiled
    x = s[i, 0]
    x_dot = s[i, 1]
    theta = s[i, 2]
    theta_dot = s[i, 3]
    force = FORCE_MAG if actions[i] == 1 else -FORCE_MAG
    sintheta, costheta = sincos(theta)
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    s[i, 0] = x
    s[i, 1] = x_dot
    s[i, 2] = theta
    s[i, 3] = theta_dot
    terminated = (
        x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD
    )
    return 1.0, terminated


@inline
def obs_row(s, i, obs):  # pragma: no cover - compiled
    for j in range(4):
        obs[i, j] = np.float32(s[i, j])


@inline
def reset_row(s, i, u0, u1, u2, u3, low, high):  # pragma: no cover - compiled
    # numpy's Generator.uniform: low + (high - low) * u
    s[i, 0] = low + (high - low) * u0
    s[i, 1] = low + (high - low) * u1
    s[i, 2] = low + (high - low) * u2
    s[i, 3] = low + (high - low) * u3


reset = reset_kernel(__name__)
