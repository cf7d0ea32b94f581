"""Pendulum-v1, compiled: gymnasium's ``PendulumEnv`` for N envs at once.

Swing a pendulum up with a torque ``u`` in [-2, 2] (g = 10, m = l = 1,
dt = 0.05):

    cost      = normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2
    thdot'    = clip(thdot + (3 g / (2 l) sin(th) + 3 / (m l^2) u) dt, -8, 8)
    th'       = th + thdot' dt

reward ``-cost``; never terminates; truncated at 200 steps. Replayed in
gymnasium's precision: the torque is float32 (``np.clip`` of the float32
action), so ``0.001 u^2`` and ``3 u`` are float32 products (Python floats
meeting a float32 are cast to it, NEP 50) added to float64 terms; squares
are libm's ``pow``/``powf`` as numpy scalar powers are
(:mod:`fastppo.envs._libm`); ``normalize(x) = ((x + pi) mod 2 pi) - pi`` with
numpy's float modulo (``fmod``, then shifted into the divisor's sign).

State ``[theta, theta_dot]`` float64; reset uniform in ``[-x_init, x_init)``
x ``[-y_init, y_init)`` = ``[-pi, pi) x [-1, 1)``; observation
``[cos(theta), sin(theta), theta_dot]`` float32.
"""

from __future__ import annotations

import numpy as np

from fastppo._jit import inline
from fastppo.envs._libm import pow32, pow64, sincos
from fastppo.envs._loop import reset_kernel

STATE_DIM = 2
OBS_DIM = 3
#: ``reset(options=)`` takes ``x_init`` and ``y_init``: the reset ranges of
#: theta and theta_dot are ``[-x_init, x_init)`` and ``[-y_init, y_init)``.
RESET_PARAMS = ("x_init", "y_init")
RESET_DEFAULTS = (np.pi, 1.0)

MAX_SPEED = 8
MAX_TORQUE = 2.0
DT = 0.05
G = 10.0
M = 1.0
L = 1.0
_SIN_COEF = 3 * G / (2 * L)
_U_COEF = np.float32(3.0 / (M * L**2))
_C_U = np.float32(0.001)
_TWO = np.float32(2.0)
_LO_U = np.float32(-MAX_TORQUE)
_HI_U = np.float32(MAX_TORQUE)
_TWO_PI = 2 * np.pi


@inline
def _angle_normalize(x):  # pragma: no cover - compiled
    """gymnasium's ``((x + np.pi) % (2 * np.pi)) - np.pi`` with numpy's float ``%``."""
    a = x + np.pi
    mod = np.fmod(a, _TWO_PI)
    if mod != 0.0:
        if (mod < 0) != (_TWO_PI < 0):
            mod += _TWO_PI
    else:
        mod = np.copysign(0.0, _TWO_PI)
    return mod - np.pi


@inline
def valid(actions, i):  # pragma: no cover - compiled
    return actions[i, 0] == actions[i, 0]  # not NaN; +-inf clip like any value


@inline
def step_row(s, i, actions, elapsed):  # pragma: no cover - compiled
    th = s[i, 0]
    thdot = s[i, 1]
    u = min(max(actions[i, 0], _LO_U), _HI_U)  # np.clip in float32
    costs = (
        pow64(_angle_normalize(th), 2.0)
        + 0.1 * pow64(thdot, 2.0)
        + np.float64(_C_U * pow32(u, _TWO))
    )
    newthdot = thdot + (_SIN_COEF * np.sin(th) + np.float64(_U_COEF * u)) * DT
    newthdot = min(max(newthdot, -MAX_SPEED), MAX_SPEED)
    newth = th + newthdot * DT
    s[i, 0] = newth
    s[i, 1] = newthdot
    return -costs, False


@inline
def obs_row(s, i, obs):  # pragma: no cover - compiled
    sin, cos = sincos(s[i, 0])
    obs[i, 0] = np.float32(cos)
    obs[i, 1] = np.float32(sin)
    obs[i, 2] = np.float32(s[i, 1])


@inline
def reset_row(s, i, u0, u1, u2, u3, x_init, y_init):  # pragma: no cover - compiled
    # np_random.uniform(low=-high, high=high) with high = [x_init, y_init]
    s[i, 0] = -x_init + (x_init - -x_init) * u0
    s[i, 1] = -y_init + (y_init - -y_init) * u1


reset = reset_kernel(__name__)
