"""V-trace (Espeholt et al. 2018, arXiv 1802.01561): the sweep, backwards in time.

V-trace keeps two scratch rows per step of its chunk (its carry weights) and
the carry row ``vs_{t+1} - V_{t+1}``. The ratio ``rho = exp(target_logp -
behavior_logp)`` is computed in float32 with
:func:`fastppo.kernels.fastmath.expf32_fma` (vectorised, fused multiply-adds,
relative error <= 1.2e-7) when both log-probs and the values are float32, else
with float64 ``math.exp``. Layout, options and validation: :mod:`fastppo.kernels.sweep`;
a time-major rollout of few envs runs its backward pass as one flat run
(:func:`_vt_back_flat`).
Batch-major ``[N, T]`` rollouts have their own sweep,
:func:`vtrace_rows` (``BATCH_MAJOR`` in the options): the same row functions run along each
env's contiguous row, then the backward recurrence on register tiles (see
:mod:`fastppo.kernels.gae`); the same bits as the time-major sweep.
"""

from __future__ import annotations

import math

import numpy as np

from fastppo._jit import inline, kernel, subroutine
from fastppo.kernels.fastmath import expf32_fma, fma
from fastppo.kernels.gae import (
    GROUP,
    block_rows,
    rows_alias,
    run_rows,
    tiled,
)
from fastppo.kernels.sweep import (
    BATCH_MAJOR,
    FEW_ENVS_BYTES,
    FLAT_CHUNK,
    HAS_FINAL,
    HAS_VALID,
    OK,
    ROLLOUT,
    VT_CHUNK,
    few_envs,
    flat,
    validate,
)
from fastppo.kernels.tiles import NARROW, lanes, readonly, vtrace_tile


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
# caught it). Plain IEEE operations and explicit fused multiply-adds
# (fastmath.fma, fastmath.expf32_fma) round the same on every path.
@kernel("void(F_1, F_1, b1, F_1w)", linked=True)
def _vt_rho_row(target_logp, behavior_logp, f32, rho):  # pragma: no cover - compiled
    """``rho = exp(target_logp - behavior_logp)`` over one row.

    float32 log-probs with float32 outputs: the difference and the exp in
    float32 (``expf32_fma``, vectorised; relative error <= 1.2e-7, below the
    output's rounding). Otherwise float64 ``math.exp`` (a libm call, scalar).
    """
    if f32:
        for n in range(rho.shape[0]):
            rho[n] = expf32_fma(np.float32(target_logp[n]) - np.float32(behavior_logp[n]))
    else:
        for n in range(rho.shape[0]):
            rho[n] = math.exp(float(target_logp[n]) - float(behavior_logp[n]))


@kernel("void(F_1, F_1, F_1, u1_1, u1_1, F_1, b1, F, F_1w)", linked=True)
def _vt_td_row(nvr, r, v, te, tr, fv, has_final, gamma, d_row):  # pragma: no cover - compiled
    """``d = r + gamma * nv - V`` over one row (``nv`` as in GAE)."""
    zero = r.dtype.type(0)
    for n in range(d_row.shape[0]):
        nv = nvr[n]
        f = fv[n] if has_final else nv
        boot = zero if te[n] != 0 else (f if tr[n] != 0 else nv)
        d_row[n] = fma(gamma, boot, r[n]) - v[n]


@kernel("void(F_1, u1_1, b1, F, F, F_1w, F_1w)", linked=True)
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


@kernel("void(u1_1, u1_1, u1_1, b1, F, F, F, F, F_1w, F_1w)", linked=True)
def _vt_weight_row(
    te, tr, ok, has_valid, gamma, gamma_lam, c_bar, pg_rho_bar, cw, pw
):  # pragma: no cover - compiled
    """Carry weights ``cw = gamma * lam * min(c_bar, rho)`` (``rho`` in ``cw``) and
    ``pw = gamma * min(pg_rho_bar, rho)``; 0 where the trace is cut (a step
    that is invalid, terminated or truncated)."""
    zero = cw.dtype.type(0)
    for n in range(cw.shape[0]):
        p = cw[n]
        o = ((ok[n] != 0) | (not has_valid)) & ((te[n] | tr[n]) == 0)
        cw[n] = gamma_lam * _clip(p, c_bar) if o else zero
        pw[n] = gamma * _clip(p, pg_rho_bar) if o else zero


@kernel("void(F_1, F_1, F_1, F_1w, F_1w, F_1w)", linked=True)
def _vt_back_row(cw, pw, v, carry, vs_row, pg_row):  # pragma: no cover - compiled
    """``diff = vs + cw * carry``, ``pg += pw * carry``, ``vs = V + diff``, ``carry = diff``."""
    zero = v.dtype.type(0)
    for n in range(v.shape[0]):
        diff, vs_row[n], pg_row[n] = _vt_back(
            carry[n], cw[n], pw[n], vs_row[n], pg_row[n], v[n], zero
        )
        carry[n] = diff


@subroutine
def _vt_back_flat(cw, pw, v, W, dd, vs, pg):  # pragma: no cover - compiled
    """:func:`_vt_back_row` over a run of rows of ``W`` envs as one flat run,
    backwards: element ``k``'s carry is ``dd[k + W]``, its diff goes to
    ``dd[k]``. The carry (the diffs of the row after the run) arrives in
    ``dd[:W]`` and moves to ``dd[m:m + W]``; the run's first row's diffs are
    left in ``dd[:W]`` for the run before it."""
    zero = v.dtype.type(0)
    m = v.shape[0]
    for n in range(W):
        dd[m + n] = dd[n]
    x = dd[m]  # one env: the carry in a register
    for j in range(m):
        k = m - 1 - j
        if W != 1:
            x = dd[k + W]
        x, vs[k], pg[k] = _vt_back(x, cw[k], pw[k], vs[k], pg[k], v[k], zero)
        dd[k] = x


@inline
def _rows(x, a, b, n0, n1):  # pragma: no cover - compiled
    """Rows ``a:b``, columns ``n0:n1`` of the C-contiguous 2-D ``x`` as one 1-D
    view: a single row, or whole rows (``n0:n1`` spans them), one flat run."""
    if b - a == 1:
        return x[a, n0:n1]
    w = x.shape[1]
    return x.reshape(x.shape[0] * w)[a * w : b * w]


@kernel(f"void({ROLLOUT}, i8, F, f8, f8, f8, f8, i8, i8, F_2w, F_2w)")
def vtrace_block(  # pragma: no cover - compiled
    ro, options, gamma, lam, rho_bar_, c_bar_, pg_rho_bar_, n0, n1, vs, pg_adv
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
    rewards, values, last_values, final_values, terminated, truncated, valid = ro[:7]
    behavior_logp, target_logp = ro[7], ro[8]
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
    # When the block is whole rows (the serial sweep), a chunk's rows are one
    # contiguous run of each array, so pass 1 calls each row function once per
    # run instead of once per row; rows of few envs are also swept back as
    # one run (:func:`_vt_back_flat`), in chunks of FLAT_CHUNK elements.
    whole = W == rewards.shape[1]
    few = few_envs(rewards, n0, n1, FEW_ENVS_BYTES)
    rows = max(VT_CHUNK, FLAT_CHUNK // W) if few else VT_CHUNK
    # Scratch for one chunk of the block (2 x rows) and the carry diff_{t+1}
    # (for few envs, the diffs of the chunk and the row after it).
    cws = np.empty((rows, W), rewards.dtype)
    pws = np.empty((rows, W), rewards.dtype)
    cwf = cws.reshape(rows * W)
    pwf = pws.reshape(rows * W)
    carry = np.zeros((rows + 1) * W if few else W, rewards.dtype)
    t_hi = T
    while t_hi > 0:
        t_lo = max(0, t_hi - rows)
        a = t_lo
        while a < t_hi:
            # a run of rows [a, b): whole rows up to the last row, which
            # bootstraps from last_values; else one row at a time
            b = min(t_hi, T - 1) if whole and a < T - 1 else a + 1
            m = (b - a) * W
            k = (a - t_lo) * W
            cw = cwf[k : k + m]
            vs_run = _rows(vs, a, b, n0, n1)
            ok = _rows(valid, a, b, n0, n1)
            te = _rows(terminated, a, b, n0, n1)
            tr = _rows(truncated, a, b, n0, n1)
            nvr = last_values[n0:n1] if a == T - 1 else _rows(values, a + 1, b + 1, n0, n1)
            _vt_rho_row(
                _rows(target_logp, a, b, n0, n1), _rows(behavior_logp, a, b, n0, n1), f32, cw
            )
            _vt_td_row(
                nvr,
                _rows(rewards, a, b, n0, n1),
                _rows(values, a, b, n0, n1),
                te,
                tr,
                _rows(final_values, a, b, n0, n1),
                has_final,
                gamma,
                vs_run,
            )
            _vt_scale_row(
                cw, ok, has_valid, rho_bar, pg_rho_bar, vs_run, _rows(pg_adv, a, b, n0, n1)
            )
            _vt_weight_row(
                te, tr, ok, has_valid, gamma, gamma_lam, c_bar, pg_rho_bar, cw, pwf[k : k + m]
            )
            a = b
        if few:
            m = (t_hi - t_lo) * W
            k0 = t_lo * W
            _vt_back_flat(
                cwf[:m], pwf[:m], flat(values)[k0 : k0 + m], W, carry,
                flat(vs)[k0 : k0 + m], flat(pg_adv)[k0 : k0 + m],
            )  # fmt: skip
        else:
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


@kernel(f"i8({ROLLOUT}, i8, f8, f8, f8, f8, f8, i8, F_2w, F_2w)")
def vtrace_kernel(  # pragma: no cover - compiled
    ro, options, gamma_, lam, rho_bar, c_bar, pg_rho_bar, block, vs, pg_adv
):
    """V-trace (Espeholt et al. 2018, arXiv 1802.01561), backwards in time.

    ``rho_t = exp(target_logp - behavior_logp)``;
    ``delta_t = min(rho_bar, rho_t) * (r_t + gamma * nv_t - V_t)``;
    ``vs_t - V_t = delta_t + gamma * c_t * (1 - cut_t) * (vs_{t+1} - V_{t+1})``,
    ``c_t = lam * min(c_bar, rho_t)``;
    ``pg_t = min(pg_rho_bar, rho_t) * (r_t + gamma * nvs_t - V_t)`` where
    ``nvs_t = vs_{t+1}`` inside an episode and the bootstrap at a boundary.

    Swept in time chunks (see ``vtrace_block``); the exp dominates, so the
    sweep is compute-bound on few cores. With ``BATCH_MAJOR`` in ``options``
    the arrays are ``[N, T]`` and :func:`vtrace_rows` sweeps each block.
    Returns a status code.
    """
    bm = (options & BATCH_MAJOR) != 0
    N = ro[0].shape[0] if bm else ro[0].shape[1]
    gamma = ro[0].dtype.type(gamma_)
    nblocks = (N + block - 1) // block
    code = validate(ro, True, True, options, nblocks)
    if code != OK:
        return code
    for b in range(nblocks):
        n0, n1 = b * block, min(N, b * block + block)
        if bm:
            vtrace_rows(ro, options, gamma, lam, rho_bar, c_bar, pg_rho_bar, n0, n1, vs, pg_adv)
        else:
            vtrace_block(ro, options, gamma, lam, rho_bar, c_bar, pg_rho_bar, n0, n1, vs, pg_adv)
    return OK


@inline
def _vt_back(x, c, p, vs_t, pg_t, v_t, zero):  # pragma: no cover - compiled
    """One step of :func:`_vt_back_row` for one env: ``(diff, vs, pg)``, the
    products fused into their sums (:func:`~fastppo.kernels.fastmath.fma`, as
    the tiles do). A zero weight (cut trace, invalid row) adds exactly 0, even
    when the carry overflowed to inf (an unclipped rho of +inf)."""
    diff = fma(c, x, vs_t) if c != 0 else vs_t + zero
    pg = fma(p, x, pg_t) if p != 0 else pg_t + zero
    return diff, v_t + diff, pg


@inline
def scratch_steps(x, T):  # pragma: no cover - compiled
    """Length of a batch-major block's scratch rows for ``T`` steps of ``x``'s
    dtype: whole tiles, and an odd number of 64-byte lines, so the block's
    ``L`` rows, which the tiles read at the same steps, fall in ``L``
    different L1 sets (row starts a multiple of 4 KiB apart all map to one
    8-way set)."""
    L = lanes(x)
    return (((T + L - 1) // L) | 1) * L


@inline
def block_scratch(W, T, Tp, dtype):  # pragma: no cover - compiled
    """Scratch rows of a batch-major block, one buffer seen two ways: ``W``
    rows of ``Tp`` (padded, for the tiles that run on scratch rows where the
    caller's rows alias) and ``W`` rows of ``T`` (whose block is one run, as
    the caller's rows are, for pass 1's runs)."""
    buf = np.empty(W * Tp, dtype)
    return buf.reshape(W, Tp), buf[: W * T].reshape(W, T)


@inline
def copy_row(src, T, dst):  # pragma: no cover - compiled
    """``dst[:T] = src[:T]`` as a plain loop (vectorised, no temporaries)."""
    for t in range(T):
        dst[t] = src[t]


@kernel(f"void({ROLLOUT}, i8, F, f8, f8, f8, f8, i8, i8, F_2w, F_2w)")
def vtrace_rows(  # pragma: no cover - compiled
    ro, options, gamma, lam, rho_bar_, c_bar_, pg_rho_bar_, n0, n1, vs, pg_adv
):
    """V-trace over the envs ``n0:n1`` of batch-major ``[N, T]`` arrays.

    Pass 1 runs :func:`vtrace_block`'s row functions along runs of a block's
    rows (steps ``0..T-2`` bootstrap from ``V_{t+1}``, step ``T-1`` from
    ``last_values``); pass 2 is :func:`_vt_back_row`'s step on register
    tiles (envs in the lanes) or, for envs left over, four envs side by side
    with the carry in a register. Where the rows alias
    (:func:`~fastppo.kernels.gae.rows_alias`), a tile's pass 2 runs on scratch
    rows (its values copied, vs and pg written there by pass 1) and a pass 3
    copies vs and pg out.
    """
    rewards, values, last_values, final_values, terminated, truncated, valid = ro[:7]
    behavior_logp, target_logp = ro[7], ro[8]
    T = rewards.shape[1]
    dt = rewards.dtype.type
    rho_bar = dt(rho_bar_)
    c_bar = dt(c_bar_)
    pg_rho_bar = dt(pg_rho_bar_)
    gamma_lam = dt(gamma * lam)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    f32 = (behavior_logp.itemsize == 4) & (target_logp.itemsize == 4) & (rewards.itemsize == 4)
    L = lanes(rewards)
    W = block_rows(rewards, 2**62, T)
    alias = rows_alias(rewards, 2048)
    Tp = scratch_steps(rewards, T) if alias else T
    cwp, cwr = block_scratch(W, T, Tp, rewards.dtype)  # the carry weights
    pwp, pwr = block_scratch(W, T, Tp, rewards.dtype)
    V = np.empty((L if alias else 0, Tp), rewards.dtype)
    S = np.empty((L if alias else 0, Tp), rewards.dtype)
    P = np.empty((L if alias else 0, Tp), rewards.dtype)
    carry = np.empty(W, rewards.dtype)
    # the bootstraps of one run (a scratch row's size at least: a larger
    # allocation lands page-aligned, in the L1 sets of the rows it is read with)
    nv = np.empty(max(Tp, run_rows(T) * T), rewards.dtype)
    k0 = n0
    while k0 < n1:
        k1 = k0 + block_rows(rewards, n1 - k0, T)
        # pass 2 on scratch rows: the values copied, vs and pg from pass 1
        scratch = alias and k1 - k0 == L
        cws = cwp if scratch else cwr
        pws = pwp if scratch else pwr
        # pass 1 over runs: each scratch row alone, else runs of the block's rows
        step = 1 if scratch else run_rows(T)
        for a in range(k0, k1, step):
            b = min(k1, a + step)
            s0, m = a * T, (b - a) * T
            vs_n = S[a - k0, :T] if scratch else flat(vs)[s0 : s0 + m]
            pg_n = P[a - k0, :T] if scratch else flat(pg_adv)[s0 : s0 + m]
            w0 = (a - k0) * T  # the run's place in the block's weight rows
            cw = cws[a - k0, :T] if scratch else flat(cwr)[w0 : w0 + m]
            pw = pws[a - k0, :T] if scratch else flat(pwr)[w0 : w0 + m]
            # the bootstraps V_{t+1} in one run (last_values at each row's last
            # step), so each row function runs once per run (as two calls, the
            # last step's alone: [128, 4096] 1.8 ms against 1.35, [32, 16384]
            # 4.2 against 2.2)
            copy_row(flat(values)[s0 + 1 : s0 + m], m - 1, nv)
            for j in range(b - a):
                nv[j * T + T - 1] = last_values[a + j]
            ok, te, tr = (
                flat(valid)[s0 : s0 + m],
                flat(terminated)[s0 : s0 + m],
                flat(truncated)[s0 : s0 + m],
            )
            r, v, fv = (
                flat(rewards)[s0 : s0 + m],
                flat(values)[s0 : s0 + m],
                flat(final_values)[s0 : s0 + m],
            )
            _vt_rho_row(flat(target_logp)[s0 : s0 + m], flat(behavior_logp)[s0 : s0 + m], f32, cw)
            _vt_td_row(nv[:m], r, v, te, tr, fv, has_final, gamma, vs_n)
            _vt_scale_row(cw, ok, has_valid, rho_bar, pg_rho_bar, vs_n, pg_n)
            _vt_weight_row(te, tr, ok, has_valid, gamma, gamma_lam, c_bar, pg_rho_bar, cw, pw)
            if scratch:
                copy_row(values[a], T, V[a - k0])
        if scratch:
            # typed as the non-scratch call is (read-only values, int64 rows),
            # so _vt_tiles keeps one variant per dtype
            _vt_tiles(cws, pws, readonly(V), np.int64(0), np.int64(L), T, carry, S, P)
            for j in range(L):
                copy_row(S[j], T, vs[k0 + j])
                copy_row(P[j], T, pg_adv[k0 + j])
        elif tiled(rewards, T) and k1 - k0 == L:
            _vt_tiles(cws, pws, values, k0, k1, T, carry, vs, pg_adv)
        else:
            _vt_chains(cws, pws, values[k0:k1], vs[k0:k1], pg_adv[k0:k1])
        k0 = k1


@inline
def _vt_chain(cw, pw, v, t_end, x, vr, pr):  # pragma: no cover - compiled
    """Pass 2 of :func:`vtrace_rows` for one env, steps ``t_end - 1 .. 0``
    from the carry ``x``."""
    zero = v.dtype.type(0)
    for t in range(t_end - 1, -1, -1):
        x, vr[t], pr[t] = _vt_back(x, cw[t], pw[t], vr[t], pr[t], v[t], zero)


@subroutine
def _vt_tiles(cws, pws, values, k0, k1, T, carry, vs, pg):  # pragma: no cover - compiled
    """Pass 2 of :func:`vtrace_rows` for envs ``k0:k1``, steps ``0:T`` (whole
    tiles; the weight rows from 0): tiles backwards from the last step, then
    the first ``T % w`` steps one env at a time from its carry. The tiles are
    narrow, ``w`` = :data:`~fastppo.kernels.tiles.NARROW` envs (with 512-bit
    tiles of 16 float32 envs, [2000x256] took 950-1010 us against 845 on
    znver4)."""
    w = NARROW
    head = T % w
    for s in range(0, k1 - k0, w):
        c = carry[s : s + w]
        c[:] = 0
        for t0 in range(T - w, head - 1, -w):
            vtrace_tile(cws, pws, values, vs, pg, k0 + s, t0, s, t0, c)
        for j in range(w):
            n = k0 + s + j
            _vt_chain(cws[s + j], pws[s + j], values[n], head, c[j], vs[n], pg[n])


@subroutine
def _vt_chains(cw, pw, values, vs, pg):  # pragma: no cover - compiled
    """Pass 2 of :func:`vtrace_rows` for the envs (rows) of ``vs``: four at
    once (independent chains), then those left over one at a time."""
    n, T = values.shape
    zero = values.dtype.type(0)
    whole = n - n % GROUP
    for e in range(0, whole, GROUP):
        c0, c1, c2, c3 = cw[e], cw[e + 1], cw[e + 2], cw[e + 3]
        p0, p1, p2, p3 = pw[e], pw[e + 1], pw[e + 2], pw[e + 3]
        v0, v1, v2, v3 = values[e], values[e + 1], values[e + 2], values[e + 3]
        s0, s1, s2, s3 = vs[e], vs[e + 1], vs[e + 2], vs[e + 3]
        g0, g1, g2, g3 = pg[e], pg[e + 1], pg[e + 2], pg[e + 3]
        x0 = x1 = x2 = x3 = zero
        for t in range(T - 1, -1, -1):
            x0, s0[t], g0[t] = _vt_back(x0, c0[t], p0[t], s0[t], g0[t], v0[t], zero)
            x1, s1[t], g1[t] = _vt_back(x1, c1[t], p1[t], s1[t], g1[t], v1[t], zero)
            x2, s2[t], g2[t] = _vt_back(x2, c2[t], p2[t], s2[t], g2[t], v2[t], zero)
            x3, s3[t], g3[t] = _vt_back(x3, c3[t], p3[t], s3[t], g3[t], v3[t], zero)
    for e in range(whole, n):
        _vt_chain(cw[e], pw[e], values[e], T, zero, vs[e], pg[e])
