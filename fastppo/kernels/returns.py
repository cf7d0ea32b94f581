"""Discounted returns: the sweep, backwards in time (``G_t = r_t + gamma G_{t+1}``).

Layout, options and validation: :mod:`fastppo.kernels.sweep`. Batch-major
``[N, T]`` rollouts have their own sweep, :func:`returns_rows`
(the same bits; see :mod:`fastppo.kernels.gae` for the layout's rationale).
"""

from __future__ import annotations

import numpy as np

from fastppo._jit import inline, kernel, linked, subroutine
from fastppo.kernels.fastmath import fma
from fastppo.kernels.gae import (
    GROUP,
    block_rows,
    rows_alias,
    run_rows,
    tiled,
)
from fastppo.kernels.sweep import (
    BATCH_MAJOR,
    FEW_RETURNS_BYTES,
    FLAT_CHUNK,
    HAS_FINAL,
    HAS_VALID,
    OK,
    ROLLOUT,
    few_envs,
    flat,
    validate,
)
from fastppo.kernels.tiles import (
    NARROW,
    lanes,
    returns_tile,
    returns_tile_cut0,
    returns_tile_cut0_narrow,
    returns_tile_narrow,
)


@inline
def _step(r, nxt, te, tr, fv, ok, gamma, has_final, has_valid, zero):  # pragma: no cover
    """``G = r + gamma * boot``: ``boot`` 0 when terminated, the final value when
    truncated (with final values given), else ``nxt``; 0 on an invalid row."""
    f = fv if has_final else nxt
    boot = zero if te != 0 else (f if tr != 0 else nxt)
    g = fma(gamma, boot, r)
    return g if (ok != 0) | (not has_valid) else zero


@kernel(f"void({ROLLOUT}, i8, F, i8, i8, F_2w)")
def returns_block(ro, options, gamma, n0, n1, ret):  # pragma: no cover - compiled
    """Discounted returns over the envs ``n0:n1``, one backward pass over the rows
    (``t`` counts down from a non-negative loop index, as in
    :func:`~fastppo.kernels.gae.gae_block`)."""
    rewards, _, last_values, final_values, terminated, truncated, valid, _, _ = ro
    if few_envs(rewards, n0, n1, FEW_RETURNS_BYTES):
        _returns_flat(ro, options, gamma, ret)
        return
    T = rewards.shape[0]
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    for i in range(T):
        t = T - 1 - i
        nxt_row = last_values[n0:n1] if t == T - 1 else ret[t + 1, n0:n1]
        r = rewards[t, n0:n1]
        te = terminated[t, n0:n1]
        tr = truncated[t, n0:n1]
        fv = final_values[t, n0:n1]
        ok = valid[t, n0:n1]
        g_row = ret[t, n0:n1]
        for n in range(r.shape[0]):
            g_row[n] = _step(
                r[n], nxt_row[n], te[n], tr[n], fv[n], ok[n], gamma, has_final, has_valid, zero
            )


@subroutine
def _returns_flat(ro, options, gamma, ret):  # pragma: no cover - compiled
    """Discounted returns over a time-major rollout of few envs
    (:func:`~fastppo.kernels.sweep.few_envs`) as one flat run of ``T * N``
    elements, ``k``'s successor at ``k + N``: the last row first (from
    ``last_values``), then chunks of rows backwards, each in the two passes of
    :func:`returns_rows` over its run (bootstraps and step bytes forwards,
    then the sums backwards; one env: the carry in a register). The row
    sweep's operations, so the same bits."""
    rewards, _, last_values, final_values, terminated, truncated, valid, _, _ = ro
    T, N = rewards.shape
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    r, fv, te, tr, ok = (
        flat(rewards), flat(final_values), flat(terminated), flat(truncated), flat(valid)
    )  # fmt: skip
    g = flat(ret)
    k = (T - 1) * N
    for n in range(N):
        g[k + n] = _step(
            r[k + n], last_values[n], te[k + n], tr[k + n], fv[k + n], ok[k + n], gamma,
            has_final, has_valid, zero,
        )  # fmt: skip
    rows = max(1, FLAT_CHUNK // N)
    mn = np.empty(rows * N, np.uint8)
    final_mask = np.uint8(0xFF if has_final else 0)
    all_valid = np.uint8(0 if has_valid else 0xFF)
    t_hi = T - 1
    while t_hi > 0:
        t_lo = max(0, t_hi - rows)
        k0, k1 = t_lo * N, t_hi * N
        m = k1 - k0
        rs, G = r[k0:k1], g[k0 : k1 + N]
        _returns_prep(
            te[k0:k1], tr[k0:k1], fv[k0:k1], ok[k0:k1], final_mask, all_valid, m, G, mn,
            np.bool_(True),
        )  # fmt: skip
        if N == 1:
            _returns_chain(rs, mn, gamma, m, G[m], G, np.bool_(True))
        else:
            for j in range(m):
                i = m - 1 - j
                x = fma(gamma, G[i + N] if mn[i] & 1 else G[i], rs[i])
                G[i] = x if mn[i] & 2 else zero
        t_hi = t_lo


@kernel(f"i8({ROLLOUT}, i8, f8, i8, F_2w)")
def discounted_returns_kernel(ro, options, gamma_, block, ret):  # pragma: no cover - compiled
    """``G_t = r_t + gamma * next_t``: ``next_t`` is 0 when terminated, the final
    obs' value when truncated, else ``G_{t+1}`` (``last_values`` at ``t = T-1``).
    Invalid rows get ``G = 0`` and cut the sum. With ``BATCH_MAJOR`` in
    ``options`` the arrays are ``[N, T]`` and :func:`returns_rows` sweeps each
    block. Returns a status code."""
    bm = (options & BATCH_MAJOR) != 0
    N = ro[0].shape[0] if bm else ro[0].shape[1]
    gamma = ro[0].dtype.type(gamma_)
    nblocks = (N + block - 1) // block
    code = validate(ro, False, False, options, nblocks)
    if code != OK:
        return code
    for b in range(nblocks):
        n0, n1 = b * block, min(N, b * block + block)
        if bm:
            returns_rows(ro, options, gamma, n0, n1, ret)
        else:
            returns_block(ro, options, gamma, n0, n1, ret)
    return OK


@kernel(f"void({ROLLOUT}, i8, F, i8, i8, F_2w)")
def returns_rows(ro, options, gamma, n0, n1, ret):  # pragma: no cover - compiled
    """Discounted returns over the envs ``n0:n1`` of batch-major ``[N, T]`` arrays.

    Pass 1, forwards along a block's rows (vectorised): the bootstrap a cut
    step uses (0 when terminated, else the final value) into ``ret``, and
    two flags per step: the sum goes on from ``G_{t+1}`` (not terminated,
    and not truncated with final values given), and the row is valid. For
    register tiles they are bits of two uint16 step masks per tile's envs
    (:func:`_returns_prep_bits`), which the tiles read as lane masks; for
    the chains (envs left over, short rollouts) two bits of a byte per
    step. Pass 2, backwards, on register tiles (or four envs side by side):
    ``G_t = r_t + gamma * boot``, 0 on an invalid row -- the time-major
    sweep's operations.

    Where the rows alias (:func:`~fastppo.kernels.gae.rows_alias`), the
    tiles are narrow (:data:`~fastppo.kernels.tiles.NARROW` envs).
    """
    rewards, _, last_values, final_values, terminated, truncated, valid, _, _ = ro
    T = rewards.shape[1]
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    L = lanes(rewards)
    W = block_rows(rewards, 2**62, T)
    narrow = rows_alias(rewards, 2048)
    w = NARROW if narrow else L  # a tile's envs
    m = np.empty((W, T), np.uint8)  # the chains' step bytes
    bits = np.empty((L // NARROW, 2, T), np.uint16)  # the tiles' step masks
    carry = np.empty(W, dtype=rewards.dtype)
    # byte masks, so pass 1 is uint8 arithmetic that vectorises (bool
    # selects on the flags kept it scalar: 6x slower)
    final_mask = np.uint8(0xFF if has_final else 0)
    all_valid = np.uint8(0 if has_valid else 0xFF)
    boot = np.bool_(has_final)  # else the cut steps' sums start from 0
    k0 = n0
    while k0 < n1:
        k1 = k0 + block_rows(rewards, n1 - k0, T)
        if tiled(rewards, T) and k1 - k0 == L:
            for s in range(k0, k1, w):
                _returns_prep_bits(
                    terminated, truncated, final_values, valid, final_mask, all_valid, s, w,
                    ret, bits[(s - k0) // w], boot,
                )  # fmt: skip
            _returns_tiles(rewards, last_values, bits, gamma, k0, k1, T, carry, ret, boot, narrow)
            k0 = k1
            continue
        # runs of the block's rows
        step = run_rows(T)
        for a in range(k0, k1, step):
            s0, s1 = a * T, min(k1, a + step) * T
            g = flat(ret)[s0:s1]
            _returns_prep(
                flat(terminated)[s0:s1], flat(truncated)[s0:s1], flat(final_values)[s0:s1],
                flat(valid)[s0:s1], final_mask, all_valid, s1 - s0, g,
                flat(m)[s0 - k0 * T : s1 - k0 * T], boot,
            )  # fmt: skip
        _returns_chains(rewards[k0:k1], last_values[k0:k1], m, gamma, ret[k0:k1], boot)
        k0 = k1


@subroutine
def _returns_prep_bits(te, tr, fv, ok, fmask, valid1, k, w, g, bits, boot):  # pragma: no cover
    """Pass 1 of :func:`returns_rows` for a register tile's envs ``k .. k + w``
    (rows of the ``[N, T]`` arrays): as :func:`_returns_prep`, with the two
    flags of env ``k + j`` as bit ``j`` of ``bits[0, t]`` (continues) and
    ``bits[1, t]`` (valid). Each row ORs its bit in, one loop per flag
    (uint16 arithmetic along the row, vectorised; one loop of all of them,
    the options as selects, took 6x as long); ``cut`` is ``te | (tr &
    fmask)`` as there, ``fmask`` 0 or 0xFF."""
    T = te.shape[1]
    zero = g.dtype.type(0)
    none = np.uint16(0)
    go, valid = bits[0], bits[1]
    every = none if valid1 == 0 else np.uint16(0xFFFF)  # no valid mask: all set
    for t in range(T):
        go[t] = none
        valid[t] = every
    for j in range(w):
        n = k + j
        bit = np.uint16(1 << j)
        te_n, tr_n = te[n], tr[n]
        if boot:
            fv_n, g_n = fv[n], g[n]
            for t in range(T):
                g_n[t] = zero if te_n[t] != 0 else fv_n[t]
        if fmask != 0:
            for t in range(T):
                go[t] |= bit if (te_n[t] | tr_n[t]) == 0 else none
        else:
            for t in range(T):
                go[t] |= bit if te_n[t] == 0 else none
        if valid1 == 0:
            ok_n = ok[n]
            for t in range(T):
                valid[t] |= bit if ok_n[t] != 0 else none


@subroutine
def _returns_prep(te, tr, fv, ok, fmask, valid1, T, g, mn, boot):  # pragma: no cover
    """Pass 1 of :func:`returns_rows` over a run of ``T`` steps: if ``boot`` the
    bootstraps into ``g``, and the step bytes into ``mn``, in the same loop
    (the flag ``np.bool_``, not a literal, so this keeps one compiled variant
    per dtype). ``fmask`` is 0xFF when final values are given (a truncated
    step is cut), ``valid1`` 0xFF when every row counts. Without final values
    every cut step bootstraps from 0, and pass 2 reads no ``g``."""
    zero = g.dtype.type(0)
    one = np.uint8(1)
    for t in range(T):
        if boot:
            g[t] = zero if te[t] != 0 else fv[t]
        cut = te[t] | (tr[t] & fmask)
        mn[t] = np.uint8(cut == 0) | (np.uint8((ok[t] | valid1) != 0) << one)


@inline
def _returns_chain(r, mn, gamma, t_end, c, g, boot):  # pragma: no cover - compiled
    """Pass 2 of :func:`returns_rows` for one env, steps ``t_end - 1 .. 0``
    from the carry ``c`` (the sum after them); a cut step bootstraps from
    ``g`` if ``boot``, else from 0."""
    zero = r.dtype.type(0)
    for t in range(t_end - 1, -1, -1):
        x = fma(gamma, c if mn[t] & 1 else (g[t] if boot else zero), r[t])
        c = x if mn[t] & 2 else zero
        g[t] = c


@linked
def _returns_tiles(  # pragma: no cover - compiled
    rewards, last, bits, gamma, k0, k1, T, carry, ret, boot, narrow
):
    """Pass 2 of :func:`returns_rows` for envs ``k0:k1``, steps ``0:T`` (whole
    tiles; ``bits[g]`` the step masks of tile ``g``'s envs): tiles backwards
    from the last step, then the first ``T % w`` steps one env at a time
    from its carry. ``w`` is the block's ``L`` envs, or
    :data:`~fastppo.kernels.tiles.NARROW` where the rows alias
    (:func:`~fastppo.kernels.gae.rows_alias`). Without ``boot`` the tiles
    read no bootstraps (``ret`` holds none): 17-30% of a [2048-2000, 256]
    call."""
    w = NARROW if narrow else lanes(ret)
    head = T % w
    for s in range(0, k1 - k0, w):
        c = carry[s : s + w]
        b = bits[s // w]
        for j in range(w):
            c[j] = last[k0 + s + j]
        for t0 in range(T - w, head - 1, -w):
            if narrow and boot:
                returns_tile_narrow(rewards, ret, b, k0 + s, t0, gamma, c)
            elif narrow:
                returns_tile_cut0_narrow(rewards, ret, b, k0 + s, t0, gamma, c)
            elif boot:
                returns_tile(rewards, ret, b, k0 + s, t0, gamma, c)
            else:
                returns_tile_cut0(rewards, ret, b, k0 + s, t0, gamma, c)
        for j in range(w):
            n = k0 + s + j
            _returns_chain_bits(rewards[n], b, j, gamma, head, c[j], ret[n], boot)


@inline
def _returns_chain_bits(r, bits, j, gamma, t_end, c, g, boot):  # pragma: no cover - compiled
    """:func:`_returns_chain` with the flags as bit ``j`` of the step masks
    ``bits`` (:func:`_returns_prep_bits`)."""
    zero = r.dtype.type(0)
    for t in range(t_end - 1, -1, -1):
        x = fma(gamma, c if (bits[0, t] >> j) & 1 else (g[t] if boot else zero), r[t])
        c = x if (bits[1, t] >> j) & 1 else zero
        g[t] = c


@linked
def _returns_chains(rewards, last, m, gamma, ret, boot):  # pragma: no cover - compiled
    """Pass 2 of :func:`returns_rows` for the envs (rows) of ``ret``: four at
    once (independent chains), then those left over one at a time (a cut
    step bootstraps from ``ret`` if ``boot``, else from 0)."""
    n, T = rewards.shape
    zero = rewards.dtype.type(0)
    whole = n - n % GROUP
    for e in range(0, whole, GROUP):
        r0, r1, r2, r3 = rewards[e], rewards[e + 1], rewards[e + 2], rewards[e + 3]
        g0, g1, g2, g3 = ret[e], ret[e + 1], ret[e + 2], ret[e + 3]
        m0, m1, m2, m3 = m[e], m[e + 1], m[e + 2], m[e + 3]
        c0, c1, c2, c3 = last[e], last[e + 1], last[e + 2], last[e + 3]
        for t in range(T - 1, -1, -1):
            x0 = fma(gamma, c0 if m0[t] & 1 else (g0[t] if boot else zero), r0[t])
            x1 = fma(gamma, c1 if m1[t] & 1 else (g1[t] if boot else zero), r1[t])
            x2 = fma(gamma, c2 if m2[t] & 1 else (g2[t] if boot else zero), r2[t])
            x3 = fma(gamma, c3 if m3[t] & 1 else (g3[t] if boot else zero), r3[t])
            c0 = x0 if m0[t] & 2 else zero
            c1 = x1 if m1[t] & 2 else zero
            c2 = x2 if m2[t] & 2 else zero
            c3 = x3 if m3[t] & 2 else zero
            g0[t] = c0
            g1[t] = c1
            g2[t] = c2
            g3[t] = c3
    for e in range(whole, n):
        _returns_chain(rewards[e], m[e], gamma, T, last[e], ret[e], boot)
