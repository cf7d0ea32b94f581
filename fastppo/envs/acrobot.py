"""Acrobot-v1, compiled: gymnasium's ``AcrobotEnv`` (the "book" dynamics) for N envs.

Two links hang from a pivot; torque -1, 0 or +1 on the joint between them
(actions 0, 1, 2). One step integrates Sutton and Barto's equations of motion
(Sutton, "Generalization in reinforcement learning: successful examples using
sparse coarse coding", NIPS 1996; Sutton and Barto 1998, section 11.3) with
one classical Runge-Kutta step of 0.2 s, exactly as gymnasium's ``rk4``
evaluates it (``y + dt/6 (k1 + 2 k2 + 2 k3 + k4)``, the derivative's terms in
its order), then wraps the angles into [-pi, pi] and bounds the velocities
to 4 pi and 9 pi. Reward -1 per step, 0 on the terminating one; terminated
when ``-cos(theta1) - cos(theta1 + theta2) > 1``; truncated at 500 steps.

Gymnasium squares with numpy scalar powers (libm ``pow``), which
:mod:`fastppo.envs._libm` reproduces, so a step replays its arithmetic bit
for bit. One difference remains, at reset only: gymnasium keeps the reset
state as float32 and computes the first observation's ``cos``/``sin`` with
numpy's float32 SIMD routines (up to 1.5 ulp, CPU-dependent); here they are
libm's double ``cos``/``sin`` of the same float32 values, rounded to float32
(correctly rounded), so a reset observation's first four entries can differ
from gymnasium's by one float32 ulp. The state itself is the same: the
float32 reset draw held exactly in float64.

State ``[theta1, theta2, dtheta1, dtheta2]`` float64; reset uniform in
``[low, high)`` = ``[-0.1, 0.1)`` per component, rounded to float32.
"""

from __future__ import annotations

from math import pi

import numpy as np

from fastppo._jit import inline
from fastppo.envs._libm import pow64, sincos
from fastppo.envs._loop import reset_kernel

STATE_DIM = 4
OBS_DIM = 6
N_ACTIONS = 3
RESET_PARAMS = ("low", "high")
RESET_DEFAULTS = (-0.1, 0.1)

DT = 0.2
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
MAX_VEL_1 = 4 * pi
MAX_VEL_2 = 9 * pi
G = 9.8

# Products of Python floats that gymnasium's expressions evaluate before they
# meet a numpy value (Python evaluates left to right): the same constants.
_m1, _m2, _l1, _lc1, _lc2, _I1, _I2 = (
    LINK_MASS_1,
    LINK_MASS_2,
    LINK_LENGTH_1,
    LINK_COM_POS_1,
    LINK_COM_POS_2,
    LINK_MOI,
    LINK_MOI,
)
_D1_A = _m1 * _lc1**2
_D1_B = _l1**2 + _lc2**2
_D1_C = 2 * _l1 * _lc2
_D2_A = _lc2**2
_D2_B = _l1 * _lc2
_PHI2 = _m2 * _lc2 * G
_PHI1_A = -_m2 * _l1 * _lc2
_PHI1_B = 2 * _m2 * _l1 * _lc2
_PHI1_C = (_m1 * _lc1 + _m2 * _l1) * G
_DD2_A = _m2 * _l1 * _lc2
_DD2_DEN = _m2 * _lc2**2 + _I2
_HALF_PI = pi / 2.0
_HALF_PI_INT = pi / 2
_DT2 = DT / 2.0
_DT6 = DT / 6.0
_TWO_PI = pi - (-pi)


@inline
def valid(actions, i):  # pragma: no cover - compiled
    return 0 <= actions[i] < N_ACTIONS


@inline
def _dsdt(a, theta1, theta2, dtheta1, dtheta2):  # pragma: no cover - compiled
    """gymnasium's ``_dsdt`` ("book"), term by term; returns the four derivatives."""
    s2, c2 = sincos(theta2)
    d1 = _D1_A + _m2 * (_D1_B + _D1_C * c2) + _I1 + _I2
    d2 = _m2 * (_D2_A + _D2_B * c2) + _I2
    phi2 = _PHI2 * np.cos(theta1 + theta2 - _HALF_PI)
    phi1 = (
        _PHI1_A * pow64(dtheta2, 2.0) * s2
        - _PHI1_B * dtheta2 * dtheta1 * s2
        + _PHI1_C * np.cos(theta1 - _HALF_PI_INT)
        + phi2
    )
    ddtheta2 = (a + d2 / d1 * phi1 - _DD2_A * pow64(dtheta1, 2.0) * s2 - phi2) / (
        _DD2_DEN - pow64(d2, 2.0) / d1
    )
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return dtheta1, dtheta2, ddtheta1, ddtheta2


@inline
def _wrap(x):  # pragma: no cover - compiled
    while x > pi:
        x = x - _TWO_PI
    while x < -pi:
        x = x + _TWO_PI
    return x


@inline
def step_row(s, i, actions, elapsed):  # pragma: no cover - compiled
    act = actions[i]
    a = -1.0 if act == 0 else (0.0 if act == 1 else 1.0)
    y0, y1, y2, y3 = s[i, 0], s[i, 1], s[i, 2], s[i, 3]
    # rk4: the torque rides along as a fifth component with derivative 0, so
    # a + dt2 * 0.0 == a and it is left out.
    k10, k11, k12, k13 = _dsdt(a, y0, y1, y2, y3)
    k20, k21, k22, k23 = _dsdt(
        a, y0 + _DT2 * k10, y1 + _DT2 * k11, y2 + _DT2 * k12, y3 + _DT2 * k13
    )
    k30, k31, k32, k33 = _dsdt(
        a, y0 + _DT2 * k20, y1 + _DT2 * k21, y2 + _DT2 * k22, y3 + _DT2 * k23
    )
    k40, k41, k42, k43 = _dsdt(a, y0 + DT * k30, y1 + DT * k31, y2 + DT * k32, y3 + DT * k33)
    n0 = y0 + _DT6 * (k10 + 2 * k20 + 2 * k30 + k40)
    n1 = y1 + _DT6 * (k11 + 2 * k21 + 2 * k31 + k41)
    n2 = y2 + _DT6 * (k12 + 2 * k22 + 2 * k32 + k42)
    n3 = y3 + _DT6 * (k13 + 2 * k23 + 2 * k33 + k43)
    n0 = _wrap(n0)
    n1 = _wrap(n1)
    n2 = min(max(n2, -MAX_VEL_1), MAX_VEL_1)
    n3 = min(max(n3, -MAX_VEL_2), MAX_VEL_2)
    s[i, 0] = n0
    s[i, 1] = n1
    s[i, 2] = n2
    s[i, 3] = n3
    terminated = -np.cos(n0) - np.cos(n1 + n0) > 1.0
    return (0.0 if terminated else -1.0), terminated


@inline
def obs_row(s, i, obs):  # pragma: no cover - compiled
    s0, c0 = sincos(s[i, 0])
    s1, c1 = sincos(s[i, 1])
    obs[i, 0] = np.float32(c0)
    obs[i, 1] = np.float32(s0)
    obs[i, 2] = np.float32(c1)
    obs[i, 3] = np.float32(s1)
    obs[i, 4] = np.float32(s[i, 2])
    obs[i, 5] = np.float32(s[i, 3])


@inline
def reset_row(s, i, u0, u1, u2, u3, low, high):  # pragma: no cover - compiled
    s[i, 0] = np.float64(np.float32(low + (high - low) * u0))
    s[i, 1] = np.float64(np.float32(low + (high - low) * u1))
    s[i, 2] = np.float64(np.float32(low + (high - low) * u2))
    s[i, 3] = np.float64(np.float32(low + (high - low) * u3))


reset = reset_kernel(__name__)
