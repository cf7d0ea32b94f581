"""The loop every compiled vector env runs: validate, step, time limit, autoreset.

Each env file supplies four inlined row functions and gets its ``reset``
kernel from :func:`reset_kernel` and its step's C entry from
:func:`step_entry` (called through ``fastppo._cy._fast.env_step``, so a small
step pays no Numba argument unboxing), so the loop is written once and
compiled into each env's functions with that env's physics inlined:

* ``valid(actions, i) -> bool``: action ``i`` is one the env accepts;
* ``step_row(state, i, actions, elapsed) -> (reward, terminated)``: one
  gymnasium ``step`` of env ``i`` (``elapsed`` is its step count so far, for
  envs whose arithmetic changes after the first step);
* ``obs_row(state, i, obs)``: env ``i``'s float32 observation into ``obs[i]``;
* ``reset_row(state, i, u0, u1, u2, u3, p0, p1)``: a reset state from four
  uniforms in [0, 1) and the env's two reset parameters (bounds or initial
  ranges, as its ``reset(options=)`` takes them).

Per-env bookkeeping lives in one int64 array ``book`` [5, N]: ``ELAPSED``
(steps of the current episode, gymnasium's ``TimeLimit`` count),
``PENDING`` (1 when ``"next_step"`` autoreset is due at the next step),
``RESETS`` (resets drawn so far: the counter of the reset stream) and
``KEY_LO``/``KEY_HI`` (the 32-bit halves of the env's seed).

Reset randomness is Philox4x32-10 (:mod:`fastppo.kernels.rng`) keyed by the
seed, with counter ``(RESET_BLOCK + b, env index, resets_lo, resets_hi)``:
env ``i``'s ``k``-th reset is a pure function of ``(seed, i, k)``, so neither
the batch size nor the thread count changes an env's trajectory. The high
block word keeps these draws apart from the samplers' streams of the same
seed, which count blocks from 0.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np
from numba import carray, types

from fastppo._jit import c_entry, inline, kernel, specialized
from fastppo.kernels.rng import philox4x32_10, uniform53

ELAPSED, PENDING, RESETS, KEY_LO, KEY_HI = range(5)
BOOK_ROWS = 5
RESET_BLOCK = 0x80000000
_MASK32 = np.int64(0xFFFFFFFF)


@inline
def _draw(book, i):  # pragma: no cover - compiled
    """Four uniforms of env ``i``'s next reset; advances its reset counter."""
    k = book[RESETS, i]
    book[RESETS, i] = k + 1
    lo = np.uint64(k & _MASK32)
    hi = np.uint64((k >> 32) & _MASK32)
    env = np.uint64(i)
    klo = np.uint64(book[KEY_LO, i])
    khi = np.uint64(book[KEY_HI, i])
    a0, a1, a2, a3 = philox4x32_10(np.uint64(RESET_BLOCK), env, lo, hi, klo, khi)
    b0, b1, b2, b3 = philox4x32_10(np.uint64(RESET_BLOCK + 1), env, lo, hi, klo, khi)
    return uniform53(a0, a1), uniform53(a2, a3), uniform53(b0, b1), uniform53(b2, b3)


@inline
def reset_env(reset_row, state, book, i, p0, p1):  # pragma: no cover - compiled
    u0, u1, u2, u3 = _draw(book, i)
    reset_row(state, i, u0, u1, u2, u3, p0, p1)
    book[ELAPSED, i] = 0
    book[PENDING, i] = 0


@inline
def run_step(
    valid,
    step_row,
    obs_row,
    reset_row,
    p0,
    p1,
    state,
    book,
    actions,
    max_steps,
    same_step,
    obs,
    reward,
    terminated,
    truncated,
    final_obs,
):  # pragma: no cover - compiled
    """One vector step; returns -1, or the index of the first invalid action
    (then nothing was written: every action is checked before any env moves).

    ``same_step``: an env
    whose episode ends is reset in the same call and its last observation
    goes to ``final_obs``; otherwise (gymnasium's ``"next_step"``) it is
    marked pending and reset by the next call, which returns its reset
    observation with reward 0 and both flags False.
    """
    n = state.shape[0]
    for i in range(n):
        if not valid(actions, i):
            return i
    for i in range(n):
        if book[PENDING, i] != 0:
            reset_env(reset_row, state, book, i, p0, p1)
            obs_row(state, i, obs)
            reward[i] = 0.0
            terminated[i] = False
            truncated[i] = False
            continue
        r, term = step_row(state, i, actions, book[ELAPSED, i])
        elapsed = book[ELAPSED, i] + 1
        book[ELAPSED, i] = elapsed
        trunc = elapsed >= max_steps
        reward[i] = r
        terminated[i] = term
        truncated[i] = trunc
        obs_row(state, i, obs)
        if term or trunc:
            if same_step:
                final_obs[i, :] = obs[i, :]
                reset_env(reset_row, state, book, i, p0, p1)
                obs_row(state, i, obs)
            else:
                book[PENDING, i] = 1
    return -1


@inline
def run_reset(reset_row, obs_row, state, book, mask, p0, p1, obs):  # pragma: no cover
    """Reset every env whose ``mask`` entry is set (all when ``mask`` is empty)."""
    n = state.shape[0]
    every = mask.shape[0] == 0
    for i in range(n):
        if every or mask[i]:
            reset_env(reset_row, state, book, i, p0, p1)
            obs_row(state, i, obs)


# Bound per env by env_bindings() (the templates themselves are never compiled).
_valid: Any = None
_step_row: Any = None
_obs_row: Any = None
_reset_row: Any = None
_P0 = _P1 = 0.0


def _reset(state, book, mask, p0, p1, obs):  # pragma: no cover - compiled
    run_reset(_reset_row, _obs_row, state, book, mask, p0, p1, obs)


def reset_kernel(module: str) -> Any:
    """The declared ``reset(state, book, mask, p0, p1, obs)`` kernel of env module
    ``module`` (its row functions and ``RESET_DEFAULTS`` bound); call it at the
    end of that module. Its step is a C entry (:func:`step_entry`)."""
    mod = sys.modules[module]
    body = specialized(_reset, "_" + module.rsplit(".", 1)[1], module, **env_bindings(mod))
    return kernel("void(f8_2w, i8_2w, b1_1, f8, f8, f4_2w)", variants=({},))(body)


def env_bindings(mod: Any) -> dict[str, Any]:
    """What the per-env names of a template (this module's, or the fused
    rollout's) are bound to for env module ``mod``."""
    discrete = hasattr(mod, "N_ACTIONS")
    return {
        "_valid": mod.valid, "_step_row": mod.step_row, "_obs_row": mod.obs_row,
        "_reset_row": mod.reset_row, "_P0": mod.RESET_DEFAULTS[0], "_P1": mod.RESET_DEFAULTS[1],
        "_S": mod.STATE_DIM, "_O": mod.OBS_DIM,
        "_act_view": _discrete_view if discrete else _box_view,
    }  # fmt: skip


# ------------------------------------------------------------- the C entry
#: The step's C entry arguments in call order, ``(name, C type)``: the one
#: declaration. ``A*`` is the action pointer (int64 for a discrete env, float32
#: for a continuous one); bool arrays pass as ``u8*`` (numpy's layout). The
#: entry function below takes exactly these parameters and the ``ctypedef
#: env_step_fn`` of ``fastppo._cy._fast`` spells the same C types
#: (``tests/test_envs.py`` checks both).
STEP_ARGS: tuple[tuple[str, str], ...] = (
    ("state", "f64*"), ("book", "i64*"), ("actions", "A*"), ("n", "i64"),
    ("max_steps", "i64"), ("same_step", "i64"), ("obs", "f32*"), ("reward", "f64*"),
    ("terminated", "u8*"), ("truncated", "u8*"), ("final_obs", "f32*"), ("n_final", "i64"),
)  # fmt: skip
_C_TYPES = {
    "f64*": types.CPointer(types.float64),
    "i64*": types.CPointer(types.int64),
    "f32*": types.CPointer(types.float32),
    "u8*": types.CPointer(types.boolean),
    "i64": types.int64,
}
_S = _O = 1  # bound per env: STATE_DIM, OBS_DIM
_act_view: Any = None  # bound per env: the actions' [N] or [N, 1] view


@inline
def _discrete_view(actions, n):  # pragma: no cover - compiled
    return carray(actions, n)


@inline
def _box_view(actions, n):  # pragma: no cover - compiled
    return carray(actions, (n, 1))


def _c_step(
    state, book, actions, n, max_steps, same_step, obs, reward, terminated, truncated,
    final_obs, n_final,
):  # pragma: no cover - compiled  # fmt: skip
    return run_step(
        _valid, _step_row, _obs_row, _reset_row, _P0, _P1,
        carray(state, (n, _S)), carray(book, (BOOK_ROWS, n)), _act_view(actions, n), max_steps,
        same_step != 0, carray(obs, (n, _O)), carray(reward, n), carray(terminated, n),
        carray(truncated, n), carray(final_obs, (n_final, _O)),
    )  # fmt: skip


def step_signature(discrete: bool) -> Any:
    """The Numba signature of an env's step C entry (:data:`STEP_ARGS`)."""
    act = types.CPointer(types.int64 if discrete else types.float32)
    return types.int64(*[act if c == "A*" else _C_TYPES[c] for _, c in STEP_ARGS])


@functools.cache
def step_entry(module: str) -> Any:
    """The C entry of env module ``module``'s step (``step`` with raw pointers),
    compiled or loaded from the cache on first use: what
    :meth:`CompiledVectorEnv.step` calls through ``fastppo._cy._fast.env_step``."""
    mod = sys.modules[module]
    body = specialized(_c_step, "_" + module.rsplit(".", 1)[1], module, **env_bindings(mod))
    discrete = hasattr(mod, "N_ACTIONS")
    return c_entry(step_signature(discrete))(body)
