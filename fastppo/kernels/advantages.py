"""GAE, V-trace and discounted-return sweeps (time-major, backwards in time).

Layout: arrays are ``[T, N]`` C-contiguous views (1-D inputs arrive as
``[T, 1]``). The backward sweep over ``t`` is sequential; envs are
independent, so ``prange`` runs over blocks of envs and the inner loop runs
over the envs of one block -- contiguous in memory, so LLVM vectorises it and
the sweep streams at memory bandwidth.

The carried quantity (``A_{t+1}``, or ``vs_{t+1} - V_{t+1}``) is read back from
the output row just written, so the kernels need no scratch memory.

Optional inputs: every array argument has the full ``[T, N]`` shape. The
public layer passes a stand-in for an absent one (``terminated`` for
``truncated`` and ``valid``, ``values`` for ``final_values``) and clears its bit
in ``options``; the kernels load every array unconditionally and use the bits
only in selects, so the inner loops stay branch-free and vectorise.

Each block of envs is swept by a helper on column slices indexed from 0: with
an index running from an arbitrary ``n0`` Numba cannot prove it non-negative,
keeps its negative-index wraparound, and the loop does not vectorise (4-5x
slower here).

Every kernel trusts its inputs; ``fastppo.advantages`` validates them.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fastppo._jit import kernel, kernel_pair

# Status codes the sweeps return; nonzero means nothing was written.
OK = 0
BAD_REWARDS = 1
BAD_VALUES = 2
BAD_LAST_VALUES = 3
BAD_FINAL_VALUES = 4
BAD_BEHAVIOR_LOGP = 5
BAD_TARGET_LOGP = 6

# Bits of the ``options`` argument: which optional inputs are real (the others
# are stand-ins). One int instead of three bools keeps the dispatch short.
HAS_TRUNC = 1
HAS_FINAL = 2
HAS_VALID = 4

# Rows per time chunk. A sweep runs backwards in time, but streaming memory
# backwards is ~3x slower than forwards here (descending rows defeat the
# hardware prefetcher), so each chunk of rows is first read forwards (the
# carry-free part of the recurrence), then swept backwards while it is still
# in L2: 32 rows x 7 arrays x a 256-env float32 row ~ 230 KiB.
CHUNK = 32


@kernel
def _nonfinite(x, n0, n1):  # pragma: no cover - compiled
    """True if ``x[:, n0:n1]`` holds a NaN or +-inf.

    ``x - x`` is 0 for finite ``x`` and NaN otherwise; counting the comparisons
    is an integer reduction, which LLVM vectorises without fastmath.
    """
    bad = 0
    for t in range(x.shape[0]):
        row = x[t, n0:n1]
        for n in range(row.shape[0]):
            bad += int((row[n] - row[n]) != 0)
    return bad != 0


@kernel
def _bad_final(terminated, truncated, final_values, n0, n1):  # pragma: no cover - compiled
    """True if a truncated (not terminated) step's final value is not finite."""
    bad = 0
    for t in range(final_values.shape[0]):
        te = terminated[t, n0:n1]
        tr = truncated[t, n0:n1]
        fv = final_values[t, n0:n1]
        for n in range(fv.shape[0]):
            boot = (tr[n] != 0) & (te[n] == 0)
            bad += int(boot & ((fv[n] - fv[n]) != 0))
    return bad != 0


@kernel
def _check_block(  # pragma: no cover - compiled
    rewards, values, has_values, last_values, terminated, truncated, final_values, options, n0, n1
):
    """Status of the envs ``n0:n1``: the first non-finite input, or OK."""
    if _nonfinite(rewards, n0, n1):
        return BAD_REWARDS
    if has_values and _nonfinite(values, n0, n1):
        return BAD_VALUES
    if _nonfinite(last_values.reshape(1, last_values.shape[0]), n0, n1):
        return BAD_LAST_VALUES
    if (options & HAS_TRUNC) and (options & HAS_FINAL):
        if _bad_final(terminated, truncated, final_values, n0, n1):
            return BAD_FINAL_VALUES
    return OK


@kernel
def _first_bad(status):  # pragma: no cover - compiled
    for b in range(status.shape[0]):
        if status[b] != OK:
            return status[b]
    return OK


@kernel
def _gae_block(  # pragma: no cover - compiled
    rewards,
    values,
    last_values,
    terminated,
    truncated,
    final_values,
    valid,
    options,
    gamma,
    gamma_lambda,
    n0,
    n1,
    adv,
    ret,
):
    """GAE over the envs ``n0:n1``.

    Every row is sliced to ``n0:n1`` and indexed from 0: a contiguous 1-D view
    with a provably non-negative index, so the inner loops vectorise.
    """
    T = rewards.shape[0]
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    t_hi = T
    while t_hi > 0:
        t_lo = max(0, t_hi - CHUNK)
        # pass 1, forwards: adv = delta (0 on invalid rows), ret = delta + V
        for t in range(t_lo, t_hi):
            nvr = last_values[n0:n1] if t == T - 1 else values[t + 1, n0:n1]
            r = rewards[t, n0:n1]
            v = values[t, n0:n1]
            te = terminated[t, n0:n1]
            tr = truncated[t, n0:n1]
            fv = final_values[t, n0:n1]
            ok = valid[t, n0:n1]
            a = adv[t, n0:n1]
            rt = ret[t, n0:n1]
            for n in range(r.shape[0]):
                nv = nvr[n]
                f = fv[n] if has_final else nv
                boot = zero if te[n] != 0 else (f if tr[n] != 0 else nv)
                d = r[n] + gamma * boot - v[n]
                d = d if (ok[n] != 0) | (not has_valid) else zero
                a[n] = d
                rt[n] = d + v[n]
        # pass 2, backwards: add gamma * lambda * A_{t+1} where the trace goes on
        for t in range(min(t_hi, T - 1) - 1, t_lo - 1, -1):
            te = terminated[t, n0:n1]
            tr = truncated[t, n0:n1]
            ok = valid[t, n0:n1]
            a = adv[t, n0:n1]
            rt = ret[t, n0:n1]
            c = adv[t + 1, n0:n1]
            for n in range(a.shape[0]):
                stop = te[n] | tr[n]
                if has_valid:
                    stop |= ok[n] == 0
                x = (zero if stop != 0 else gamma_lambda) * c[n]
                a[n] += x
                rt[n] += x
        t_hi = t_lo


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
    both where the trace continues. Returns a status code.
    """
    N = rewards.shape[1]
    gamma = rewards.dtype.type(gamma_)
    gamma_lambda = rewards.dtype.type(gamma_lambda_)
    nblocks = (N + block - 1) // block
    # Validate every block before any block writes: a bad input leaves the
    # outputs untouched.
    status = np.zeros(nblocks, np.int64)
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        status[b] = _check_block(
            rewards,
            values,
            True,
            last_values,
            terminated,
            truncated,
            final_values,
            options,
            n0,
            n1,
        )
    code = _first_bad(status)
    if code != OK:
        return code
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        _gae_block(
            rewards,
            values,
            last_values,
            terminated,
            truncated,
            final_values,
            valid,
            options,
            gamma,
            gamma_lambda,
            n0,
            n1,
            adv,
            ret,
        )
    return OK


@kernel
def _vtrace_block(  # pragma: no cover - compiled
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
    gamma,
    lam,
    rho_bar,
    c_bar,
    pg_rho_bar,
    n0,
    n1,
    vs,
    pg_adv,
):
    """V-trace over the envs ``n0:n1``, one backward pass (rows sliced as in GAE)."""
    T = rewards.shape[0]
    W = n1 - n0
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    # The carry vs_{t+1} - V_{t+1}, one scratch row per block.
    carry_row = np.zeros(W, rewards.dtype)
    for t in range(T - 1, -1, -1):
        nvr = last_values[n0:n1] if t == T - 1 else values[t + 1, n0:n1]
        r = rewards[t, n0:n1]
        v = values[t, n0:n1]
        te = terminated[t, n0:n1]
        tr = truncated[t, n0:n1]
        fv = final_values[t, n0:n1]
        ok = valid[t, n0:n1]
        blp = behavior_logp[t, n0:n1]
        tlp = target_logp[t, n0:n1]
        vs_row = vs[t, n0:n1]
        pg_row = pg_adv[t, n0:n1]
        for n in range(W):
            nv = nvr[n]
            f = fv[n] if has_final else nv
            cut = (te[n] | tr[n]) != 0
            boot = zero if te[n] != 0 else (f if tr[n] != 0 else nv)
            carry = zero if cut else carry_row[n]
            # log-ratio in float64: log-probs may be float64 with float32 values.
            rho = math.exp(float(tlp[n]) - float(blp[n]))
            rho_c = rewards.dtype.type(min(rho_bar, rho))
            c = rewards.dtype.type(lam * min(c_bar, rho))
            rho_pg = rewards.dtype.type(min(pg_rho_bar, rho))
            diff = rho_c * (r[n] + gamma * boot - v[n]) + gamma * c * carry
            # boot + carry is vs_{t+1} inside an episode and the bootstrap
            # value at a boundary (carry is 0 there).
            pg = rho_pg * (r[n] + gamma * (boot + carry) - v[n])
            good = (ok[n] != 0) | (not has_valid)
            diff = diff if good else zero
            pg = pg if good else zero
            carry_row[n] = diff
            vs_row[n] = v[n] + diff
            pg_row[n] = pg


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

    The exp dominates, so this sweep is compute-bound: one backward pass.
    Returns a status code.
    """
    N = rewards.shape[1]
    gamma = rewards.dtype.type(gamma_)
    nblocks = (N + block - 1) // block
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
            options,
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
        _vtrace_block(
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
            gamma,
            lam,
            rho_bar,
            c_bar,
            pg_rho_bar,
            n0,
            n1,
            vs,
            pg_adv,
        )
    return OK


@kernel
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
    Invalid rows get ``G = 0`` and cut the sum. Returns a status code."""
    N = rewards.shape[1]
    gamma = rewards.dtype.type(gamma_)
    nblocks = (N + block - 1) // block
    status = np.zeros(nblocks, np.int64)
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        status[b] = _check_block(
            rewards,
            rewards,
            False,
            last_values,
            terminated,
            truncated,
            final_values,
            options,
            n0,
            n1,
        )
    code = _first_bad(status)
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
