"""Discounted returns: the sweep, backwards in time (``G_t = r_t + gamma G_{t+1}``).

Layout, options and validation: :mod:`fastppo.kernels.sweep`.
"""

from __future__ import annotations

import numba

from fastppo._jit import kernel, kernel_pair
from fastppo.kernels.sweep import (
    HAS_FINAL,
    HAS_VALID,
    OK,
    validate,
)


@kernel("void(F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, F, i8, i8, F_2w)")
def _returns_block(  # pragma: no cover - compiled
    rewards, last_values, terminated, truncated, final_values, valid, options, gamma, n0, n1, ret
):
    T = rewards.shape[0]
    W = n1 - n0
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    for t in range(T - 1, -1, -1):
        nxt_row = last_values[n0:n1] if t == T - 1 else ret[t + 1, n0:n1]
        r = rewards[t, n0:n1]
        te = terminated[t, n0:n1]
        tr = truncated[t, n0:n1]
        fv = final_values[t, n0:n1]
        ok = valid[t, n0:n1]
        g_row = ret[t, n0:n1]
        for n in range(W):
            nxt = nxt_row[n]
            f = fv[n] if has_final else nxt
            boot = zero if te[n] != 0 else (f if tr[n] != 0 else nxt)
            g = r[n] + gamma * boot
            g_row[n] = g if (ok[n] != 0) | (not has_valid) else zero


@kernel_pair("i8(F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, f8, i8, F_2w)")
def discounted_returns_kernel(  # pragma: no cover - compiled
    rewards,
    last_values,
    terminated,
    truncated,
    final_values,
    valid,
    options,
    gamma_,
    block,
    ret,
):
    """``G_t = r_t + gamma * next_t``: ``next_t`` is 0 when terminated, the final
    obs' value when truncated, else ``G_{t+1}`` (``last_values`` at ``t = T-1``).
    Invalid rows get ``G = 0`` and cut the sum. Returns a status code."""
    N = rewards.shape[1]
    gamma = rewards.dtype.type(gamma_)
    nblocks = (N + block - 1) // block
    code = validate(
        rewards,
        rewards,
        False,
        rewards,
        rewards,
        False,
        terminated,
        truncated,
        final_values,
        last_values,
        options,
        nblocks,
    )
    if code != OK:
        return code
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        _returns_block(
            rewards,
            last_values,
            terminated,
            truncated,
            final_values,
            valid,
            options,
            gamma,
            n0,
            n1,
            ret,
        )
    return OK
