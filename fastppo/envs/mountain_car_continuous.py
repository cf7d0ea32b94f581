"""MountainCarContinuous-v0, compiled: gymnasium's ``Continuous_MountainCarEnv`` for N envs.

The mountain car with a continuous force ``a`` in [-1, 1]:

    v <- v + clip(a) 0.0015 - 0.0025 cos(3 p), bounded to [-0.07, 0.07]
    p <- p + v, bounded to [-1.2, 0.6];  v <- 0 if p == -1.2 and v < 0

reward ``100 [terminated] - 0.1 a^2`` (of the action as given, unclipped);
terminated when ``p >= 0.45`` and ``v >= 0``; truncated at 999 steps.

Gymnasium's arithmetic here is mixed precision, and replayed as such: the
state is float64 after a reset and float32 after every step (it is stored
with ``np.array(..., dtype=np.float32)``); the action is float32; Python
floats meeting a numpy float32 are cast to float32 first (NEP 50), in
arithmetic and comparisons alike; a force clipped by ``min``/``max`` becomes
the Python float -1.0 or 1.0, and a bounded velocity or position the Python
float bound. Each quantity below therefore carries its kind (:data:`_PY`,
:data:`_F64`, :data:`_F32`) and every operation applies numpy's rule for the
pair (:func:`_binop`, :func:`_less`). The state array here is float64 and
holds those float32 values exactly; from the second step of an episode it
is read as float32, as gymnasium's is.

State ``[position, velocity]`` float64; reset position uniform in
``[low, high)`` = ``[-0.6, -0.4)``, velocity 0.
"""

from __future__ import annotations

import math

import numpy as np

from fastppo._jit import inline, linked
from fastppo.envs._libm import pow64
from fastppo.envs._loop import reset_kernel

# The track, the state, its observation and the reset are MountainCar-v0's.
from fastppo.envs.mountain_car import (  # noqa: F401 - obs_row/reset_row: _loop binds them
    MAX_POSITION,
    MAX_SPEED,
    MIN_POSITION,
    OBS_DIM,
    RESET_DEFAULTS,
    RESET_PARAMS,
    STATE_DIM,
    obs_row,
    reset_row,
)

MIN_ACTION = -1.0
MAX_ACTION = 1.0
GOAL_POSITION = 0.45
GOAL_VELOCITY = 0
POWER = 0.0015

# The kind of a value in gymnasium's expression: a Python float (double, cast
# to float32 when it meets a float32), a numpy float64, a numpy float32.
_PY, _F64, _F32 = 0, 1, 2


# The helpers below are linked (typed once, their calls inlined by LLVM), not
# IR-inlined: a step calls them about fifteen times, and re-typing each
# copy's branches on the kinds made every compiled function that embeds the
# step (its C entry, each fused rollout) 1-2 s slower to compile, for no
# measured speed.
@linked
def _f32_op(a, ka, b, kb):  # pragma: no cover - compiled
    """True when numpy computes ``a op b`` in float32."""
    return (ka == _F32 and kb != _F64) or (kb == _F32 and ka != _F64)


@linked
def _kind(ka, kb):  # pragma: no cover - compiled
    if _f32_op(0.0, ka, 0.0, kb):
        return _F32
    if ka == _PY and kb == _PY:
        return _PY
    return _F64


@linked
def _add(a, ka, b, kb):  # pragma: no cover - compiled
    if _f32_op(a, ka, b, kb):
        return np.float64(np.float32(a) + np.float32(b)), _F32
    return a + b, _kind(ka, kb)


@linked
def _sub(a, ka, b, kb):  # pragma: no cover - compiled
    if _f32_op(a, ka, b, kb):
        return np.float64(np.float32(a) - np.float32(b)), _F32
    return a - b, _kind(ka, kb)


@linked
def _mul(a, ka, b, kb):  # pragma: no cover - compiled
    if _f32_op(a, ka, b, kb):
        return np.float64(np.float32(a) * np.float32(b)), _F32
    return a * b, _kind(ka, kb)


@linked
def _less(a, ka, b, kb):  # pragma: no cover - compiled
    """``a < b`` as numpy compares the pair."""
    if _f32_op(a, ka, b, kb):
        return np.float32(a) < np.float32(b)
    return a < b


@linked
def _equal(a, ka, b, kb):  # pragma: no cover - compiled
    if _f32_op(a, ka, b, kb):
        return np.float32(a) == np.float32(b)
    return a == b


@inline
def valid(actions, i):  # pragma: no cover - compiled
    return actions[i, 0] == actions[i, 0]  # not NaN; +-inf clip like any value


@inline
def step_row(s, i, actions, elapsed):  # pragma: no cover - compiled
    k = _F64 if elapsed == 0 else _F32  # float64 after reset, float32 after a step
    position = s[i, 0]
    velocity = s[i, 1]
    if k == _F32:
        position = np.float64(np.float32(position))
        velocity = np.float64(np.float32(velocity))
    act = float(actions[i, 0])
    # force = min(max(action[0], -1.0), 1.0): the Python float bound when it bites
    force, kf = act, _F32
    if MIN_ACTION > force:
        force, kf = MIN_ACTION, _PY
    if MAX_ACTION < force:
        force, kf = MAX_ACTION, _PY
    # velocity += force * power - 0.0025 * math.cos(3 * position)
    x3, _ = _mul(3.0, _PY, position, k)
    c = 0.0025 * math.cos(x3)
    fp, kfp = _mul(force, kf, POWER, _PY)
    dv, kdv = _sub(fp, kfp, c, _PY)
    velocity, kv = _add(velocity, k, dv, kdv)
    if _less(MAX_SPEED, _PY, velocity, kv):
        velocity, kv = MAX_SPEED, _PY
    if _less(velocity, kv, -MAX_SPEED, _PY):
        velocity, kv = -MAX_SPEED, _PY
    position, kp = _add(position, k, velocity, kv)
    if _less(MAX_POSITION, _PY, position, kp):
        position, kp = MAX_POSITION, _PY
    if _less(position, kp, MIN_POSITION, _PY):
        position, kp = MIN_POSITION, _PY
    if _equal(position, kp, MIN_POSITION, _PY) and _less(velocity, kv, 0.0, _PY):
        velocity, kv = 0.0, _PY
    terminated = (not _less(position, kp, GOAL_POSITION, _PY)) and (
        not _less(velocity, kv, 0.0, _PY)
    )
    reward = 100.0 if terminated else 0.0
    reward = reward - pow64(act, 2.0) * 0.1
    s[i, 0] = np.float64(np.float32(position))
    s[i, 1] = np.float64(np.float32(velocity))
    return reward, terminated


reset = reset_kernel(__name__)
