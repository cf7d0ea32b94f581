"""GAE (Schulman et al. 2016, arXiv 1506.02438): the sweep, backwards in time.

Each chunk of ``CHUNK`` rows is read forwards (``adv = delta``), then swept
backwards while in L2, reading the carry ``A_{t+1}`` back from the output row
just written and writing ``ret = A + V`` beside ``A``: so ``returns ==
advantages + values`` bit for bit, as documented. (Writing ``ret`` in a third,
forward pass measured 7% faster when each pass ran row by row, and 4-8% slower
once whole rows run as flat runs, :func:`_gae_runs`.) Layout, options and
validation: :mod:`fastppo.kernels.sweep`. A time-major rollout of few envs
(rows under two vectors) is swept as one flat run instead (:func:`_gae_flat`).

Batch-major rollouts (``[N, T]`` C-contiguous, as torchrl and tianshou store
them; the public layer receives them as their ``[T, N]`` transposes) have
their own sweep, :func:`gae_rows` (``BATCH_MAJOR`` in the options): per env
the deltas are one forward pass along its contiguous row, and the backward
recurrence runs on register tiles of envs x steps
(:mod:`fastppo.kernels.tiles`), or for the envs left over, a few envs side by
side (independent dependency chains).
Same arithmetic in the same order per element, so the same bits as the
time-major sweep.
"""

from __future__ import annotations

import numpy as np

from fastppo._jit import inline, kernel, subroutine
from fastppo.kernels.fastmath import fma
from fastppo.kernels.sweep import (
    BATCH_MAJOR,
    CHUNK,
    FEW_ENVS_BYTES,
    FLAT_CHUNK,
    HAS_FINAL,
    HAS_VALID,
    OK,
    ROLLOUT,
    few_envs,
    flat,
    head,
    validate,
)
from fastppo.kernels.tiles import NARROW, gae_tile, gae_tile_narrow, lanes


@inline
def _delta(r, nv, v, te, tr, fv, ok, gamma, has_final, has_valid, zero):  # pragma: no cover
    """``delta = r + gamma * boot - V`` with the bootstrap rules (0 on an invalid row)."""
    f = fv if has_final else nv
    boot = zero if te != 0 else (f if tr != 0 else nv)
    d = fma(gamma, boot, r) - v
    return d if (ok != 0) | (not has_valid) else zero


@inline
def _trace(te, tr, ok, has_valid, gamma_lambda, zero):  # pragma: no cover - compiled
    """The trace factor ``g_t``: 0 where the trace is cut (terminated, truncated,
    or an invalid row), else ``gamma * lambda``."""
    stop = (te | tr) | ((ok == 0) & has_valid)
    return zero if stop != 0 else gamma_lambda


@inline
def _gae_chain(a, g, t_end, c):  # pragma: no cover - compiled
    """One env's pass 2 over steps ``t_end - 1 .. 0`` from the carry ``c``
    (``A`` after them): ``A_t = a_t + g_t A_{t+1}``, written into ``a``."""
    for j in range(t_end):
        t = t_end - 1 - j
        c = fma(g[t], c, a[t])
        a[t] = c


@inline
def _delta_run(r, v, nv, fv, te, tr, ok, options, gamma, a):  # pragma: no cover - compiled
    """Pass 1 over a run of elements: ``a = delta`` (0 on invalid rows), each from
    its successor's value ``nv``. :func:`_delta` written out: as a call its eager
    loads of the optional inputs cost the sweep 4%."""
    zero = r.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    for n in range(a.shape[0]):
        nvn = nv[n]
        f = fv[n] if has_final else nvn
        boot = zero if te[n] != 0 else (f if tr[n] != 0 else nvn)
        d = fma(gamma, boot, r[n]) - v[n]
        a[n] = d if (ok[n] != 0) | (not has_valid) else zero


@inline
def _trace_run(te, tr, ok, options, gamma_lambda, c, v, a, ret):  # pragma: no cover - compiled
    """Pass 2 over a run: ``A = a + g * c`` into ``a`` (``c`` the successors'
    ``A``, ``g`` 0 where the trace is cut, else ``gamma * lambda``) and ``ret =
    A + V``. :func:`_trace` written out: its eager load of ``valid`` cost 3-6%."""
    zero = a.dtype.type(0)
    has_valid = (options & HAS_VALID) != 0
    for n in range(a.shape[0]):
        stop = te[n] | tr[n]
        if has_valid:
            stop |= ok[n] == 0
        x = fma(zero if stop != 0 else gamma_lambda, c[n], a[n])
        a[n] = x
        ret[n] = x + v[n]


@kernel(f"void({ROLLOUT}, i8, F, F, i8, i8, F_2w, F_2w)")
def gae_block(ro, options, gamma, gamma_lambda, n0, n1, adv, ret):  # pragma: no cover - compiled
    """GAE over the envs ``n0:n1`` of a time-major rollout: :func:`_gae_runs`,
    or, for a rollout of few envs, :func:`_gae_flat`."""
    if few_envs(ro[0], n0, n1, FEW_ENVS_BYTES):
        _gae_flat(ro, options, gamma, gamma_lambda, adv, ret)
    else:
        _gae_runs(ro, options, gamma, gamma_lambda, n0, n1, adv, ret)


@inline
def _flat_views(ro, adv, ret):  # pragma: no cover - compiled
    """The time-major arrays as flat runs: ``r, v, fv, te, tr, ok, adv, ret``."""
    rewards, values, _, final_values, terminated, truncated, valid, _, _ = ro
    return (
        flat(rewards), flat(values), flat(final_values), flat(terminated), flat(truncated),
        flat(valid), flat(adv), flat(ret),
    )  # fmt: skip


@subroutine
def _gae_runs(ro, options, gamma, gamma_lambda, n0, n1, adv, ret):  # pragma: no cover - compiled
    """GAE over the envs ``n0:n1`` of a time-major rollout, chunk by chunk, on runs
    of the flat arrays (element ``k``'s successor at ``k + N``).

    Pass 1, ``adv = delta``: whole rows (the serial call) as two runs per
    chunk, split where a line of ``adv`` starts
    (:func:`~fastppo.kernels.sweep.head`); part of the rows (a threaded
    call's block) one run per row, ``n0:n1``; the rollout's last row
    bootstraps from ``last_values``. Pass 2, backwards: runs of ``n1 - n0``
    elements ``N`` apart, for whole rows shifted to start on a line of
    ``adv`` (clipped to the chunk): each element still comes after its
    successor, one run later, and no run holds both. Each pass is one call
    site, so its loop is inlined once.

    Against rows as runs ([2048x256] float32, numpy's arrays 16 bytes into a
    line, znver4): the passes 230 -> 190-200 us, from the aligned stores and
    from one loop set-up per chunk, not per row; ``fastppo.gae`` ``out=`` 285
    -> 248 us (alternating processes).
    """
    T, N = ro[0].shape
    last_values = ro[2][n0:n1]
    r, v, fv, te, tr, ok, a, rt = _flat_views(ro, adv, ret)
    W = n1 - n0
    whole = W == N
    last = (T - 1) * N  # the last row's first element
    t_hi = T
    while t_hi > 0:
        t_lo = max(0, t_hi - CHUNK)
        e = min(t_hi, T - 1)  # rows t_lo .. e - 1 take the next row's values
        k0, k1 = t_lo * N, e * N
        h = k0 + head(a[k0:k1]) if whole else k0
        runs = 2 if whole else e - t_lo
        for p in range(runs + (1 if t_hi == T else 0)):
            if p == runs:  # the last row
                s0, s1 = last + n0, last + n1
            elif whole:
                s0, s1 = (k0, h) if p == 0 else (h, k1)
            else:
                s0 = (t_lo + p) * N + n0
                s1 = s0 + W
            nv = last_values if p == runs else v[s0 + N : s1 + N]
            _delta_run(
                r[s0:s1], v[s0:s1], nv, fv[s0:s1], te[s0:s1], tr[s0:s1], ok[s0:s1], options,
                gamma, a[s0:s1],
            )  # fmt: skip
        if t_hi == T:  # the last row's A is its delta
            _gae_out(
                a[last + n0 : last + n1], v[last + n0 : last + n1], W, rt[last + n0 : last + n1]
            )
        # pass 2: runs [b + j N, b + j N + W) clipped to the chunk's rows
        # t_lo .. e - 1, from the last; b = h for whole rows (the first run,
        # j = -1, is then the elements before h), else the first row's n0
        lo, hi = k0 + n0, k1 - N + n1
        b = h if whole else lo
        for i in range((hi - 1 - b) // N + 2 if hi > lo else 0):
            j = (hi - 1 - b) // N - i
            s0, s1 = max(lo, b + j * N), min(hi, b + j * N + W)
            if s1 > s0:
                _trace_run(
                    te[s0:s1], tr[s0:s1], ok[s0:s1], options, gamma_lambda,
                    a[s0 + N : s1 + N], v[s0:s1], a[s0:s1], rt[s0:s1],
                )  # fmt: skip
        t_hi = t_lo


@subroutine
def _gae_flat(ro, options, gamma, gamma_lambda, adv, ret):  # pragma: no cover - compiled
    """GAE over a time-major rollout of few envs (:func:`~fastppo.kernels.sweep.few_envs`)
    as one flat run of ``T * N`` elements, ``k``'s successor at ``k + N``.

    The last row first (bootstrapping from ``last_values``), then chunks of
    rows backwards, each in three passes over its run: forwards ``adv =
    delta`` and the trace factor ``g`` (0 where cut, else ``gamma * lambda``)
    into scratch; backwards ``A_k += g_k A_{k+N}`` (one env: the carry in a
    register); forwards ``ret = A + V``. The row sweep's operations, so the
    same bits.
    """
    rewards = ro[0]
    T, N = rewards.shape
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    last_values = ro[2]
    r, v, fv, te, tr, ok, a, rt = _flat_views(ro, adv, ret)
    k = (T - 1) * N
    for n in range(N):
        d = _delta(
            r[k + n], last_values[n], v[k + n], te[k + n], tr[k + n], fv[k + n], ok[k + n],
            gamma, has_final, has_valid, zero,
        )  # fmt: skip
        a[k + n] = d
        rt[k + n] = d + v[k + n]
    rows = max(1, FLAT_CHUNK // N)
    g = np.empty(rows * N, rewards.dtype)
    t_hi = T - 1
    while t_hi > 0:
        t_lo = max(0, t_hi - rows)
        k0, k1 = t_lo * N, t_hi * N
        m = k1 - k0
        # slices indexed from 0: provably non-negative indices, so the loops vectorise
        rs, vs, nvs, fvs = r[k0:k1], v[k0:k1], v[k0 + N : k1 + N], fv[k0:k1]
        tes, trs, oks, As = te[k0:k1], tr[k0:k1], ok[k0:k1], a[k0 : k1 + N]
        for i in range(m):
            As[i] = _delta(
                rs[i], nvs[i], vs[i], tes[i], trs[i], fvs[i], oks[i], gamma, has_final,
                has_valid, zero,
            )  # fmt: skip
            g[i] = _trace(tes[i], trs[i], oks[i], has_valid, gamma_lambda, zero)
        if N == 1:
            _gae_chain(As, g, m, As[m])
        else:
            for j in range(m):
                i = m - 1 - j
                As[i] = fma(g[i], As[i + N], As[i])
        rts = rt[k0:k1]
        for i in range(m):
            rts[i] = As[i] + vs[i]
        t_hi = t_lo


@kernel(f"i8({ROLLOUT}, i8, f8, f8, i8, F_2w, F_2w)")
def gae_kernel(ro, options, gamma_, gamma_lambda_, block, adv, ret):  # pragma: no cover - compiled
    """GAE (Schulman et al. 2016, arXiv 1506.02438), backwards in time.

    ``delta_t = r_t + gamma * nv_t - V_t``;
    ``A_t = delta_t + gamma * lambda * (1 - cut_t) * A_{t+1}``;
    ``nv_t`` is 0 when terminated, the final obs' value when truncated,
    else ``V_{t+1}``; ``cut_t`` = terminated or truncated. Invalid rows get
    ``A = 0`` (so the trace is cut there) and ``ret = V``.

    Pass 1 (forwards over a chunk) writes ``adv = delta``; pass 2 (backwards)
    adds ``gamma*lambda*A_{t+1}`` where the trace continues and writes ``ret =
    A + V``. With ``BATCH_MAJOR`` in ``options`` the arrays are ``[N, T]`` and
    :func:`gae_rows` sweeps each block. Returns a status code.
    """
    rewards = ro[0]
    bm = (options & BATCH_MAJOR) != 0
    N = rewards.shape[0] if bm else rewards.shape[1]
    gamma = rewards.dtype.type(gamma_)
    gamma_lambda = rewards.dtype.type(gamma_lambda_)
    nblocks = (N + block - 1) // block
    # Validate everything before the first write: a bad input leaves the
    # outputs untouched. (The pass checks every element, whatever the layout.)
    code = validate(ro, True, False, options, nblocks)
    if code != OK:
        return code
    for b in range(nblocks):
        n0, n1 = b * block, min(N, b * block + block)
        if bm:
            gae_rows(ro, options, gamma, gamma_lambda, n0, n1, adv, ret)
        else:
            gae_block(ro, options, gamma, gamma_lambda, n0, n1, adv, ret)
    return OK


# Envs whose backward recurrences run side by side in the batch-major sweep
# when fewer than a tile's envs are left: one env's step waits on its
# multiply-add (about 6 cycles), so four independent chains fill the
# pipeline. More rows in flight at once measured slower: rows a power of two
# of bytes apart alias in L1 (the same sets, and the same low 12 address bits
# for store-to-load forwarding).
GROUP = 4


# A batch-major rollout shorter than TILE_MIN tiles' steps runs side-by-side
# chains on blocks of many envs instead of register tiles: its rows are too
# short for a tile's transposes to pay (znver4, float32, ns an element, tiles
# -> chains, both with pass 1 over runs of rows: GAE at T = 16 2.2 -> 1.3, at
# 32 1.35 -> 1.13; V-trace at 16 3.3-4.4 -> 2.8; discounted returns the same
# at 32, 0.87 -> 0.96 at 48).
TILE_MIN = 4


@inline
def tiled(x, T):  # pragma: no cover - compiled
    """Whether a batch-major sweep of ``x``'s dtype over ``T`` steps runs tiles."""
    return T >= TILE_MIN * lanes(x)


@inline
def run_rows(T):  # pragma: no cover - compiled
    """Rows of a batch-major block that pass 1 runs along as one run: about
    ``FLAT_CHUNK`` elements, so a short rollout pays a loop's set-up per run
    and not per env, and a long one's run (one row) stays in L1 between the
    run's loops (16 rows at once made V-trace [256, 2048] 5-10% slower)."""
    return max(1, FLAT_CHUNK // T)


@inline
def block_rows(x, left, T):  # pragma: no cover - compiled
    """Envs of the next batch-major block when ``left`` remain: one register
    tile's (a block's rows of every array then stay in L2 between the passes
    for longer rollouts; two float32 tiles measured 12% slower at [256, 2048],
    V-trace 23%), else :data:`GROUP` (or fewer) for the side-by-side chains.
    Rollouts too short for tiles (:func:`tiled`) take blocks of about
    ``FLAT_CHUNK`` elements (whole groups): a block's contiguous rows are one
    run for the passes along them, which cost a loop's set-up per run, not
    per env.
    """
    L = lanes(x)
    if tiled(x, T):
        return L if left >= L else min(GROUP, left)
    return min(left, max(GROUP, FLAT_CHUNK // T // GROUP * GROUP))


@inline
def rows_alias(x, period):  # pragma: no cover - compiled
    """Whether ``x``'s rows start a multiple of ``period`` bytes apart.

    At 4 KiB (``T = 1024`` float32 and its multiples) a register tile's ``L``
    rows fall in one 8-way L1 set, at 2 KiB in two, so the lines one tile
    leaves for the next are evicted before it comes, and how badly depends
    on where the caller's arrays lie (docs/design.md, "Rows that alias").
    GAE (from 4 KiB) and discounted returns (from 2 KiB) then run narrow
    tiles (:data:`~fastppo.kernels.tiles.NARROW` envs, whose rows fit one
    set); V-trace, whose narrow tiles read five arrays, runs them on scratch
    rows (:func:`~fastppo.kernels.vtrace.scratch_steps` long) from 2 KiB and
    copies.
    """
    return x.strides[0] % period == 0


@inline
def set_apart(W, T, ref):  # pragma: no cover - compiled
    """A ``[W, T]`` scratch of ``ref``'s dtype whose start lies 2 KiB off
    ``ref``'s modulo 4 KiB: where both have rows a multiple of 4 KiB long, no
    row of one shares an L1 set with a row of the other (GAE's trace factors
    beside the rows its narrow tiles update in place: without it, two
    placements in twelve took 1.3-1.9x the time at [2048x256] float32)."""
    pad = 4096 // ref.itemsize
    buf = np.empty(W * T + pad, ref.dtype)
    d = (buf.ctypes.data - ref.ctypes.data) % 4096
    off = ((2048 - d) % 4096) // ref.itemsize
    return buf[off : off + W * T].reshape(W, T)


@kernel(f"void({ROLLOUT}, i8, F, F, i8, i8, F_2w, F_2w)")
def gae_rows(ro, options, gamma, gamma_lambda, n0, n1, adv, ret):  # pragma: no cover - compiled
    """GAE over the envs ``n0:n1`` of batch-major ``[N, T]`` arrays (rows are envs).

    Pass 1, forwards along runs of a block's contiguous rows (vectorised):
    ``adv = delta`` and the trace factor ``g_t`` (0 where the trace is cut,
    else ``gamma * lambda``) into scratch. Pass 2, backwards, ``A_t = adv_t +
    g_t A_{t+1}`` with the carry in a register; pass 3 ``ret = A + V`` along
    the run: the time-major sweep's operations, so the same bits. Where the
    rows alias (:func:`rows_alias`), the tiles are narrow
    (:data:`~fastppo.kernels.tiles.NARROW` envs) and the trace factors lie
    apart from ``adv`` (:func:`set_apart`).
    """
    rewards, values = ro[0], ro[1]
    T = rewards.shape[1]
    L = lanes(rewards)
    W = block_rows(rewards, 2**62, T)
    narrow = rows_alias(rewards, 4096)
    # the trace factors (where the rows alias, set apart from adv's)
    g = set_apart(W, T, adv) if narrow else np.empty((W, T), dtype=rewards.dtype)
    carry = np.zeros(W, dtype=rewards.dtype)
    k0 = n0
    while k0 < n1:
        k1 = k0 + block_rows(rewards, n1 - k0, T)
        step = run_rows(T)
        for a in range(k0, k1, step):
            b = min(k1, a + step)
            _gae_prep(
                ro, options, gamma, gamma_lambda, a, b, T, flat(adv)[a * T : b * T],
                flat(g)[(a - k0) * T : (b - k0) * T],
            )  # fmt: skip
        if tiled(rewards, T) and k1 - k0 == L:
            _gae_tiles(adv, g, k0, k1, T, carry, narrow)
        else:
            _chains(g[: k1 - k0], adv[k0:k1])
        s0, s1 = k0 * T, k1 * T
        run = flat(adv)[s0:s1]
        _gae_out(run, flat(values)[s0:s1], s1 - s0, flat(ret)[s0:s1])
        k0 = k1


@subroutine
def _gae_prep(ro, options, gamma, gamma_lambda, k0, k1, T, a, gn):  # pragma: no cover - compiled
    """Pass 1 of :func:`gae_rows` for envs ``k0:k1``, their rows as one run:
    ``delta`` into ``a``, the trace factor into ``gn`` (runs of ``(k1 - k0) *
    T`` elements; a row's last step bootstraps from ``last_values``)."""
    rewards, values, last_values, final_values, terminated, truncated, valid, _, _ = ro
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    s0 = k0 * T
    m = (k1 - k0) * T
    r, v, vn = flat(rewards)[s0 : s0 + m], flat(values)[s0 : s0 + m], flat(values)[s0 + 1 : s0 + m]
    te, tr = flat(terminated)[s0 : s0 + m], flat(truncated)[s0 : s0 + m]
    fv, ok = flat(final_values)[s0 : s0 + m], flat(valid)[s0 : s0 + m]
    # every step from the next one's value (a row's last step reads the next
    # row's first: rewritten below)
    for i in range(m - 1):
        a[i] = _delta(
            r[i], vn[i], v[i], te[i], tr[i], fv[i], ok[i], gamma, has_final, has_valid, zero
        )
        gn[i] = _trace(te[i], tr[i], ok[i], has_valid, gamma_lambda, zero)
    for j in range(k1 - k0):
        i = j * T + T - 1
        a[i] = _delta(
            r[i], last_values[k0 + j], v[i], te[i], tr[i], fv[i], ok[i], gamma, has_final,
            has_valid, zero,
        )  # fmt: skip


@inline
def _gae_out(a, v, T, ret):  # pragma: no cover - compiled
    """``ret = A + V`` over a run of ``T`` elements (pass 3 of :func:`gae_rows`,
    and the time-major sweeps' last row, whose ``A`` is its delta)."""
    for t in range(T):
        ret[t] = a[t] + v[t]


@subroutine
def _gae_tiles(adv, g, k0, k1, T, carry, narrow):  # pragma: no cover - compiled
    """Pass 2 of :func:`gae_rows` for envs ``k0:k1``, steps ``0:T`` (whole
    tiles; ``g`` rows from 0): tiles backwards from the last step, then the
    first ``T % w`` steps one env at a time from its carry (``carry[s:s + w]``
    for tile row ``s``). ``w`` is the block's ``L`` envs, or
    :data:`~fastppo.kernels.tiles.NARROW` where the rows alias
    (:func:`rows_alias`)."""
    w = NARROW if narrow else lanes(adv)
    head = T % w
    for s in range(0, k1 - k0, w):
        c = carry[s : s + w]
        if narrow:
            for t0 in range(T - w, head - 1, -w):
                gae_tile_narrow(adv, g, k0 + s, t0, s, t0, c, t0 == T - w)
        else:
            for t0 in range(T - w, head - 1, -w):
                gae_tile(adv, g, k0 + s, t0, s, t0, c, t0 == T - w)
        for j in range(w):
            _gae_chain(adv[k0 + s + j], g[s + j], head, c[j])


@subroutine
def _chains(g, adv):  # pragma: no cover - compiled
    """Pass 2 of :func:`gae_rows` for the envs (rows) of ``adv``: four at once
    (independent chains), then those left over one at a time."""
    n, T = adv.shape
    whole = n - n % GROUP
    for e in range(0, whole, GROUP):
        a0, a1, a2, a3 = adv[e], adv[e + 1], adv[e + 2], adv[e + 3]
        g0, g1, g2, g3 = g[e], g[e + 1], g[e + 2], g[e + 3]
        c0, c1, c2, c3 = a0[T - 1], a1[T - 1], a2[T - 1], a3[T - 1]
        for t in range(T - 2, -1, -1):
            c0 = fma(g0[t], c0, a0[t])
            c1 = fma(g1[t], c1, a1[t])
            c2 = fma(g2[t], c2, a2[t])
            c3 = fma(g3[t], c3, a3[t])
            a0[t] = c0
            a1[t] = c1
            a2[t] = c2
            a3[t] = c3
    for e in range(whole, n):
        _gae_chain(adv[e], g[e], T - 1, adv[e, T - 1])
