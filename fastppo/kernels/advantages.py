"""GAE, V-trace and discounted-return sweeps (time-major, backwards in time).

Layout: arrays are ``[T, N]`` C-contiguous views (1-D inputs arrive as
``[T, 1]``). The backward sweep over ``t`` is sequential; envs are
independent, so ``prange`` runs over blocks of envs and the inner loop runs
over the envs of one block -- contiguous in memory, so LLVM vectorises it and
the sweep streams at memory bandwidth.

The carried quantity (``A_{t+1}``, or ``vs_{t+1} - V_{t+1}``) is read back from
the output row just written, so the kernels need no scratch memory.

Optional inputs: a kernel takes a ``has_*`` flag and, when the flag is False, a
dummy ``[1, 1]`` array it never reads. The flags are loop-invariant, so LLVM
unswitches the loops and each variant runs branch-free.

Every kernel trusts its inputs; ``fastppo.advantages`` validates them.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fastppo._jit import inline, kernel_pair

# Status codes the sweeps return; nonzero means nothing was written.
OK = 0
BAD_REWARDS = 1
BAD_VALUES = 2
BAD_LAST_VALUES = 3
BAD_FINAL_VALUES = 4
BAD_BEHAVIOR_LOGP = 5
BAD_TARGET_LOGP = 6


@inline
def _nonfinite(x, n0, n1):  # pragma: no cover - compiled
    """True if ``x[:, n0:n1]`` holds a NaN or +-inf.

    ``x - x`` is 0 for finite ``x`` and NaN otherwise; OR-ing the comparisons is
    an integer reduction, which LLVM vectorises without fastmath.
    """
    acc = False
    for t in range(x.shape[0]):
        for n in range(n0, n1):
            acc |= (x[t, n] - x[t, n]) != 0
    return acc


@inline
def _nonfinite_1d(x, n0, n1):  # pragma: no cover - compiled
    acc = False
    for n in range(n0, n1):
        acc |= (x[n] - x[n]) != 0
    return acc


@inline
def _check_block(  # pragma: no cover - compiled
    rewards,
    values,
    has_values,
    last_values,
    terminated,
    truncated,
    final_values,
    has_trunc,
    has_final,
    n0,
    n1,
):
    """Status of one block of envs: the first non-finite input, or OK."""
    if _nonfinite(rewards, n0, n1):
        return BAD_REWARDS
    if has_values and _nonfinite(values, n0, n1):
        return BAD_VALUES
    if _nonfinite_1d(last_values, n0, n1):
        return BAD_LAST_VALUES
    if has_trunc and has_final and _bad_final(terminated, truncated, final_values, n0, n1):
        return BAD_FINAL_VALUES
    return OK


# Bits of the ``options`` argument: which optional inputs are real arrays (the
# others are [1, 1] dummies never read). One int instead of three bools keeps
# the per-call dispatch short; the flags are loop-invariant, so LLVM
# unswitches the loops on them.
HAS_TRUNC = 1
HAS_FINAL = 2
HAS_VALID = 4


@inline
def _options(options):  # pragma: no cover - compiled
    return (options & HAS_TRUNC) != 0, (options & HAS_FINAL) != 0, (options & HAS_VALID) != 0


@inline
def _first_bad(status):  # pragma: no cover - compiled
    for b in range(status.shape[0]):
        if status[b] != OK:
            return status[b]
    return OK


@inline
def _bad_final(terminated, truncated, final_values, n0, n1):  # pragma: no cover - compiled
    """True if a truncated (not terminated) step's final value is not finite."""
    acc = False
    for t in range(final_values.shape[0]):
        for n in range(n0, n1):
            boot = truncated[t, n] != 0 and terminated[t, n] == 0
            acc |= boot and (final_values[t, n] - final_values[t, n]) != 0
    return acc


# Rows per time chunk. A sweep runs backwards in time, but streaming memory
# backwards is ~3x slower than forwards here (descending rows defeat the
# hardware prefetcher), so each chunk of rows is first read forwards (the
# carry-free part of the recurrence), then swept backwards while it is still
# in L2: 32 rows x 7 arrays x a 256-env float32 row ~ 230 KiB.
CHUNK = 32


@kernel_pair
def gae_kernel(  # pragma: no cover - compiled
    rewards,
    values,
    last_values,
    terminated,
    truncated,
    final_values,
    valid,
    options,
    gamma_,
    gamma_lambda_,
    block,
    adv,
    ret,
):
    """GAE (Schulman et al. 2016, arXiv 1506.02438), backwards in time.

    ``delta_t = r_t + gamma * nv_t - V_t``;
    ``A_t = delta_t + gamma * lambda * (1 - cut_t) * A_{t+1}``;
    ``nv_t`` is 0 when terminated, the final obs' value when truncated,
    else ``V_{t+1}``; ``cut_t`` = terminated or truncated. Invalid rows get
    ``A = 0`` (so the trace is cut there) and ``ret = V``.

    Pass 1 (forwards over a chunk) writes ``adv = delta`` and
    ``ret = delta + V``; pass 2 (backwards) adds ``gamma*lambda*A_{t+1}`` to
    both where the trace continues.
    """
    T, N = rewards.shape
    has_trunc, has_final, has_valid = _options(options)
    zero = rewards.dtype.type(0)
    gamma = rewards.dtype.type(gamma_)
    gamma_lambda = rewards.dtype.type(gamma_lambda_)
    nblocks = (N + block - 1) // block
    # Validate every block before any block writes: a bad input leaves the
    # outputs untouched.
    status = np.zeros(nblocks, np.int64)
    for b in numba.prange(nblocks):
        n0 = b * block
        status[b] = _check_block(
            rewards,
            values,
            True,
            last_values,
            terminated,
            truncated,
            final_values,
            has_trunc,
            has_final,
            n0,
            min(N, n0 + block),
        )
    code = _first_bad(status)
    if code != OK:
        return code
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        t_hi = T
        while t_hi > 0:
            t_lo = max(0, t_hi - CHUNK)
            for t in range(t_lo, t_hi):
                nv = last_values if t == T - 1 else values[t + 1]
                for n in range(n0, n1):
                    v = values[t, n]
                    te = terminated[t, n] != 0
                    tr = truncated[t, n] != 0 if has_trunc else False
                    fv = final_values[t, n] if has_final else nv[n]
                    boot = zero if te else (fv if tr else nv[n])
                    d = rewards[t, n] + gamma * boot - v
                    if has_valid:
                        d = d if valid[t, n] != 0 else zero
                    adv[t, n] = d
                    ret[t, n] = d + v
            for t in range(min(t_hi, T - 1) - 1, t_lo - 1, -1):
                for n in range(n0, n1):
                    stop = terminated[t, n] != 0
                    if has_trunc:
                        stop = stop or truncated[t, n] != 0
                    if has_valid:
                        stop = stop or valid[t, n] == 0
                    x = (zero if stop else gamma_lambda) * adv[t + 1, n]
                    adv[t, n] += x
                    ret[t, n] += x
            t_hi = t_lo
    return OK


@kernel_pair
def vtrace_kernel(  # pragma: no cover - compiled
    behavior_logp,
    target_logp,
    rewards,
    values,
    last_values,
    terminated,
    truncated,
    final_values,
    valid,
    options,
    gamma_,
    lam,
    rho_bar,
    c_bar,
    pg_rho_bar,
    block,
    vs,
    pg_adv,
):
    """V-trace (Espeholt et al. 2018, arXiv 1802.01561), backwards in time.

    ``rho_t = exp(target_logp - behavior_logp)``;
    ``delta_t = min(rho_bar, rho_t) * (r_t + gamma * nv_t - V_t)``;
    ``vs_t - V_t = delta_t + gamma * c_t * (1 - cut_t) * (vs_{t+1} - V_{t+1})``,
    ``c_t = lam * min(c_bar, rho_t)``;
    ``pg_t = min(pg_rho_bar, rho_t) * (r_t + gamma * nvs_t - V_t)`` where
    ``nvs_t = vs_{t+1}`` inside an episode and the bootstrap at a boundary.

    The exp dominates, so this sweep is compute-bound: one backward pass,
    with the carry ``vs_{t+1} - V_{t+1}`` kept in a per-block scratch row.
    """
    T, N = rewards.shape
    has_trunc, has_final, has_valid = _options(options)
    zero = rewards.dtype.type(0)
    nblocks = (N + block - 1) // block
    gamma = rewards.dtype.type(gamma_)
    status = np.zeros(nblocks, np.int64)
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        code = _check_block(
            rewards,
            values,
            True,
            last_values,
            terminated,
            truncated,
            final_values,
            has_trunc,
            has_final,
            n0,
            n1,
        )
        if code == OK and _nonfinite(behavior_logp, n0, n1):
            code = BAD_BEHAVIOR_LOGP
        if code == OK and _nonfinite(target_logp, n0, n1):
            code = BAD_TARGET_LOGP
        status[b] = code
    code = _first_bad(status)
    if code != OK:
        return code
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        # One scratch row per block (not per step): the carry vs_{t+1} - V_{t+1}.
        carry_row = np.zeros(n1 - n0, rewards.dtype)
        for t in range(T - 1, -1, -1):
            last = t == T - 1
            for n in range(n0, n1):
                nv = last_values[n] if last else values[t + 1, n]
                v = values[t, n]
                te = terminated[t, n] != 0
                tr = truncated[t, n] != 0 if has_trunc else False
                fv = final_values[t, n] if has_final else nv
                boot = zero if te else (fv if tr else nv)
                carry = zero if (te or tr) else carry_row[n - n0]
                # log-ratio in float64: log-probs may be float64 with float32 values.
                rho = math.exp(float(target_logp[t, n]) - float(behavior_logp[t, n]))
                rho_c = rewards.dtype.type(min(rho_bar, rho))
                c = rewards.dtype.type(lam * min(c_bar, rho))
                rho_pg = rewards.dtype.type(min(pg_rho_bar, rho))
                r = rewards[t, n]
                diff = rho_c * (r + gamma * boot - v) + gamma * c * carry
                # boot + carry is vs_{t+1} inside an episode and the bootstrap
                # value at a boundary (carry is 0 there).
                pg = rho_pg * (r + gamma * (boot + carry) - v)
                if has_valid:
                    ok = valid[t, n] != 0
                    diff = diff if ok else zero
                    pg = pg if ok else zero
                carry_row[n - n0] = diff
                vs[t, n] = v + diff
                pg_adv[t, n] = pg
    return OK


@kernel_pair
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
    Invalid rows get ``G = 0`` and cut the sum."""
    T, N = rewards.shape
    has_trunc, has_final, has_valid = _options(options)
    zero = rewards.dtype.type(0)
    gamma = rewards.dtype.type(gamma_)
    nblocks = (N + block - 1) // block
    status = np.zeros(nblocks, np.int64)
    for b in numba.prange(nblocks):
        n0 = b * block
        status[b] = _check_block(
            rewards,
            rewards,
            False,
            last_values,
            terminated,
            truncated,
            final_values,
            has_trunc,
            has_final,
            n0,
            min(N, n0 + block),
        )
    code = _first_bad(status)
    if code != OK:
        return code
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        for t in range(T - 1, -1, -1):
            last = t == T - 1
            for n in range(n0, n1):
                nxt = last_values[n] if last else ret[t + 1, n]
                te = terminated[t, n] != 0
                tr = truncated[t, n] != 0 if has_trunc else False
                fv = final_values[t, n] if has_final else nxt
                boot = zero if te else (fv if tr else nxt)
                g = rewards[t, n] + gamma * boot
                if has_valid:
                    g = g if valid[t, n] != 0 else zero
                ret[t, n] = g
    return OK
