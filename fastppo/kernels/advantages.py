"""GAE, V-trace and discounted-return sweeps (time-major, backwards in time).

Layout: arrays are ``[T, N]`` C-contiguous views (1-D inputs arrive as
``[T, 1]``). The backward sweep over ``t`` is sequential; envs are
independent, so ``prange`` runs over blocks of envs and the inner loop runs
over the envs of one block -- contiguous in memory, so LLVM vectorises it and
the sweep streams at memory bandwidth.

Time chunks: streaming memory backwards is ~3x slower than forwards here, so
GAE and V-trace read each chunk of ``CHUNK`` rows forwards (the carry-free
part of the recurrence) and then sweep it backwards while it is in L2. GAE
reads its carry ``A_{t+1}`` back from the output row just written; V-trace
keeps two scratch rows per step of the chunk (its carry weights) and the carry
row ``vs_{t+1} - V_{t+1}``.

V-trace's ratio ``rho = exp(target_logp - behavior_logp)`` is computed in
float32 with :func:`fastppo.kernels.fastmath.expf32` (vectorised, relative
error <= 1.2e-7) when both log-probs and the values are float32, else with
float64 ``math.exp``.

Validation comes first and is complete before the first write (a bad input
leaves the outputs untouched): every input is checked row by row, forwards,
in contiguous row ranges (``_parts``: at least 2, one per block), so the rows
checked last are the first the backward sweep reads, still in cache.

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

from fastppo._jit import inline, kernel, kernel_pair
from fastppo.kernels.fastmath import expf32

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
# V-trace's chunk is shorter: its two weight rows per step live in scratch
# (2 x 16 rows = 32 KiB at 256 float32 envs, L1-sized), which keeps the
# working memory of an out= call small next to the batch; 16, 32, 64 and 96
# rows measured the same.
VT_CHUNK = 16

# Minimum number of row ranges the validation pass is split into.
VALIDATE_PARTS = 2


@inline
def _row_bad(row):  # pragma: no cover - compiled
    """1 if a contiguous row holds a NaN or +-inf, else 0.

    ``x - x`` is 0 for finite ``x`` and NaN otherwise. OR-ing the comparisons
    into an int32 is a vectorised reduction without fastmath that keeps up
    with memory (an int64 count does not: 30% slower here).
    """
    bad = np.int32(0)
    for n in range(row.shape[0]):
        bad |= np.int32((row[n] - row[n]) != 0)
    return bad


@inline
def _row_bad_final(te, tr, fv):  # pragma: no cover - compiled
    """1 if a truncated (not terminated) entry's final value is not finite, else 0."""
    bad = np.int32(0)
    for n in range(fv.shape[0]):
        boot = (tr[n] != 0) & (te[n] == 0)
        bad |= np.int32(boot & ((fv[n] - fv[n]) != 0))
    return bad


@kernel("i8(F_2, F_2, b1, F_2, F_2, b1, u1_2, u1_2, F_2, i8, i8, i8)")
def _check_rows(  # pragma: no cover - compiled
    rewards,
    values,
    has_values,
    behavior_logp,
    target_logp,
    has_logp,
    terminated,
    truncated,
    final_values,
    options,
    t0,
    t1,
):
    """Bit mask (bit ``code``) of the inputs with a non-finite entry in rows ``t0:t1``.

    All arrays are checked row by row together, forwards: the last rows
    checked are the first the backward sweep reads, and they are still in
    cache when it starts.
    """
    bad_r = np.int32(0)
    bad_v = np.int32(0)
    bad_b = np.int32(0)
    bad_t = np.int32(0)
    bad_f = np.int32(0)
    check_final = ((options & HAS_TRUNC) != 0) and ((options & HAS_FINAL) != 0)
    for t in range(t0, t1):
        bad_r |= _row_bad(rewards[t])
        if has_values:
            bad_v |= _row_bad(values[t])
        if has_logp:
            bad_b |= _row_bad(behavior_logp[t])
            bad_t |= _row_bad(target_logp[t])
        if check_final:
            bad_f |= _row_bad_final(terminated[t], truncated[t], final_values[t])
    mask = 0
    if bad_r:
        mask |= 1 << BAD_REWARDS
    if bad_v:
        mask |= 1 << BAD_VALUES
    if bad_f:
        mask |= 1 << BAD_FINAL_VALUES
    if bad_b:
        mask |= 1 << BAD_BEHAVIOR_LOGP
    if bad_t:
        mask |= 1 << BAD_TARGET_LOGP
    return mask


@kernel("i8(i8, i8)")
def _parts(T, nblocks):  # pragma: no cover - compiled
    """Row ranges the validation pass is split into: at least 2, else one per block.

    Contiguous row ranges stream forwards through whole rows; the serial
    build runs them one after another, with the same outcome.
    """
    return max(1, min(T, max(VALIDATE_PARTS, nblocks)))


@kernel("i8(i8_1, F_1)")
def _status(masks, last_values):  # pragma: no cover - compiled
    """The lowest code of a non-finite input (OK if none) from the parts' masks.

    Combining the masks makes the reported input independent of the split.
    """
    mask = 0
    for p in range(masks.shape[0]):
        mask |= masks[p]
    if _row_bad(last_values):
        mask |= 1 << BAD_LAST_VALUES
    for code in range(1, BAD_TARGET_LOGP + 1):
        if mask & (1 << code):
            return code
    return OK


@kernel("void(F_2, F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, F, F, i8, i8, F_2w, F_2w)")
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


@kernel_pair("i8(F_2, F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, f8, f8, i8, F_2w, F_2w)")
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
    # Validate everything before the first write: a bad input leaves the
    # outputs untouched.
    T = rewards.shape[0]
    nparts = _parts(T, nblocks)
    masks = np.zeros(nparts, np.int64)
    for p in numba.prange(nparts):
        masks[p] = _check_rows(
            rewards,
            values,
            True,
            rewards,
            rewards,
            False,
            terminated,
            truncated,
            final_values,
            options,
            p * T // nparts,
            (p + 1) * T // nparts,
        )
    code = _status(masks, last_values)
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


@inline
def _clip(rho, bar):  # pragma: no cover - compiled
    """``min(bar, rho)`` as a plain select: Numba's ``min`` checks for NaN
    with branches, which keeps a loop scalar (rho is never NaN here)."""
    return rho if rho < bar else bar


# V-trace's row loops are separate functions with few array arguments each:
# LLVM vectorises a loop only if it can rule out overlap between the arrays it
# writes and the others with a handful of runtime checks, and one loop over
# all ten rows of a step stays scalar (measured: 2-3x slower).


# No FMA contraction here (it saved ~8% of the kernel): LLVM may contract the
# vector body and the scalar remainder/alias-check fallback of a loop
# differently, so an element's rounding would depend on its position in a
# block and on buffer addresses, and serial and parallel results would differ
# by an ulp (tests/test_advantages.py::test_serial_parallel_bit_identical
# caught it). Plain IEEE float32 operations round the same on every path.
@kernel("void(F_1, F_1, b1, F_1w)")
def _vt_rho_row(target_logp, behavior_logp, f32, rho):  # pragma: no cover - compiled
    """``rho = exp(target_logp - behavior_logp)`` over one row.

    float32 log-probs with float32 outputs: the difference and the exp in
    float32 (``expf32``, vectorised; relative error <= 1.2e-7, below the
    output's rounding). Otherwise float64 ``math.exp`` (a libm call, scalar).
    """
    if f32:
        for n in range(rho.shape[0]):
            rho[n] = expf32(np.float32(target_logp[n]) - np.float32(behavior_logp[n]))
    else:
        for n in range(rho.shape[0]):
            rho[n] = math.exp(float(target_logp[n]) - float(behavior_logp[n]))


@kernel("void(F_1, F_1, F_1, u1_1, u1_1, F_1, b1, F, F_1w)")
def _vt_td_row(nvr, r, v, te, tr, fv, has_final, gamma, d_row):  # pragma: no cover - compiled
    """``d = r + gamma * nv - V`` over one row (``nv`` as in GAE)."""
    zero = r.dtype.type(0)
    for n in range(d_row.shape[0]):
        nv = nvr[n]
        f = fv[n] if has_final else nv
        boot = zero if te[n] != 0 else (f if tr[n] != 0 else nv)
        d_row[n] = r[n] + gamma * boot - v[n]


@kernel("void(u1_1, u1_1, u1_1, b1, b1_1w)")
def _vt_on_row(te, tr, ok, has_valid, on):  # pragma: no cover - compiled
    """``on`` = the trace continues past this step: valid and neither terminated nor truncated."""
    for n in range(on.shape[0]):
        on[n] = ((ok[n] != 0) | (not has_valid)) & ((te[n] | tr[n]) == 0)


@kernel("void(F_1, u1_1, b1, F, F, F_1w, F_1w)")
def _vt_scale_row(
    rho, ok, has_valid, rho_bar, pg_rho_bar, vs_row, pg_row
):  # pragma: no cover - compiled
    """``vs = min(rho_bar, rho) * d``, ``pg = min(pg_rho_bar, rho) * d``; 0 if invalid.

    ``d`` arrives in ``vs``.
    """
    zero = vs_row.dtype.type(0)
    for n in range(vs_row.shape[0]):
        p = rho[n]
        d = vs_row[n]
        good = (ok[n] != 0) | (not has_valid)
        vs_row[n] = _clip(p, rho_bar) * d if good else zero
        pg_row[n] = _clip(p, pg_rho_bar) * d if good else zero


@kernel("void(b1_1, F, F, F, F, F_1w, F_1w)")
def _vt_weight_row(on, gamma, gamma_lam, c_bar, pg_rho_bar, cw, pw):  # pragma: no cover - compiled
    """Carry weights ``cw = gamma * lam * min(c_bar, rho)`` (``rho`` in ``cw``) and
    ``pw = gamma * min(pg_rho_bar, rho)``; 0 where the trace is cut."""
    zero = cw.dtype.type(0)
    for n in range(cw.shape[0]):
        p = cw[n]
        o = on[n]
        cw[n] = gamma_lam * _clip(p, c_bar) if o else zero
        pw[n] = gamma * _clip(p, pg_rho_bar) if o else zero


@kernel("void(F_1, F_1, F_1, F_1w, F_1w, F_1w)")
def _vt_back_row(cw, pw, v, carry, vs_row, pg_row):  # pragma: no cover - compiled
    """``diff = vs + cw * carry``, ``pg += pw * carry``, ``vs = V + diff``, ``carry = diff``."""
    zero = v.dtype.type(0)
    for n in range(v.shape[0]):
        x = carry[n]
        c = cw[n]
        p = pw[n]
        # A zero weight (cut trace, invalid row) adds exactly 0, even when the
        # carry overflowed to inf (an unclipped rho of +inf).
        dc = c * x if c != 0 else zero
        pc = p * x if p != 0 else zero
        diff = vs_row[n] + dc
        pg_row[n] += pc
        carry[n] = diff
        vs_row[n] = v[n] + diff


@kernel(
    "void(F_2, F_2, F_2, F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, F, f8, f8, f8, f8, i8, i8,"
    " F_2w, F_2w)",
)
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
    rho_bar_,
    c_bar_,
    pg_rho_bar_,
    n0,
    n1,
    vs,
    pg_adv,
):
    """V-trace over the envs ``n0:n1``, in time chunks like GAE.

    Pass 1 (forwards over a chunk): ``rho``; ``vs = min(rho_bar, rho) * d`` and
    ``pg = min(pg_rho_bar, rho) * d`` with ``d = r + gamma * nv - V`` (the
    carry-free parts); into scratch the carry weights
    ``cw = gamma * lam * min(c_bar, rho)`` and ``pw = gamma * min(pg_rho_bar, rho)``
    (0 where the trace is cut). Pass 2 (backwards):
    ``diff_t = vs_t + cw_t * diff_{t+1}``, ``pg_t += pw_t * diff_{t+1}``,
    ``vs_t = V_t + diff_t``; ``diff_T = 0``.
    """
    T = rewards.shape[0]
    W = n1 - n0
    dt = rewards.dtype.type
    rho_bar = dt(rho_bar_)
    c_bar = dt(c_bar_)
    pg_rho_bar = dt(pg_rho_bar_)
    gamma_lam = dt(gamma * lam)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    f32 = (behavior_logp.itemsize == 4) & (target_logp.itemsize == 4) & (rewards.itemsize == 4)
    # Scratch for one chunk of the block (2 x VT_CHUNK rows) and the carry
    # diff_{t+1}.
    cws = np.empty((VT_CHUNK, W), rewards.dtype)
    pws = np.empty((VT_CHUNK, W), rewards.dtype)
    on = np.empty(W, np.bool_)
    carry = np.zeros(W, rewards.dtype)
    t_hi = T
    while t_hi > 0:
        t_lo = max(0, t_hi - VT_CHUNK)
        for t in range(t_lo, t_hi):
            cw = cws[t - t_lo]
            vs_row = vs[t, n0:n1]
            ok = valid[t, n0:n1]
            te = terminated[t, n0:n1]
            tr = truncated[t, n0:n1]
            nvr = last_values[n0:n1] if t == T - 1 else values[t + 1, n0:n1]
            _vt_rho_row(target_logp[t, n0:n1], behavior_logp[t, n0:n1], f32, cw)
            _vt_td_row(
                nvr,
                rewards[t, n0:n1],
                values[t, n0:n1],
                te,
                tr,
                final_values[t, n0:n1],
                has_final,
                gamma,
                vs_row,
            )
            _vt_scale_row(cw, ok, has_valid, rho_bar, pg_rho_bar, vs_row, pg_adv[t, n0:n1])
            _vt_on_row(te, tr, ok, has_valid, on)
            _vt_weight_row(on, gamma, gamma_lam, c_bar, pg_rho_bar, cw, pws[t - t_lo])
        for t in range(t_hi - 1, t_lo - 1, -1):
            _vt_back_row(
                cws[t - t_lo],
                pws[t - t_lo],
                values[t, n0:n1],
                carry,
                vs[t, n0:n1],
                pg_adv[t, n0:n1],
            )
        t_hi = t_lo


@kernel_pair(
    "i8(F_2, F_2, F_2, F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, f8, f8, f8, f8, f8, i8, F_2w, F_2w)",
)
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

    Swept in time chunks (see ``_vtrace_block``); the exp dominates, so the
    sweep is compute-bound on few cores. Returns a status code.
    """
    N = rewards.shape[1]
    gamma = rewards.dtype.type(gamma_)
    nblocks = (N + block - 1) // block
    T = rewards.shape[0]
    nparts = _parts(T, nblocks)
    masks = np.zeros(nparts, np.int64)
    for p in numba.prange(nparts):
        masks[p] = _check_rows(
            rewards,
            values,
            True,
            behavior_logp,
            target_logp,
            True,
            terminated,
            truncated,
            final_values,
            options,
            p * T // nparts,
            (p + 1) * T // nparts,
        )
    code = _status(masks, last_values)
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
    T = rewards.shape[0]
    nparts = _parts(T, nblocks)
    masks = np.zeros(nparts, np.int64)
    for p in numba.prange(nparts):
        masks[p] = _check_rows(
            rewards,
            rewards,
            False,
            rewards,
            rewards,
            False,
            terminated,
            truncated,
            final_values,
            options,
            p * T // nparts,
            (p + 1) * T // nparts,
        )
    code = _status(masks, last_values)
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
