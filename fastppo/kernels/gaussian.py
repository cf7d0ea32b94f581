"""Batched diagonal-Gaussian sampling kernels (optionally tanh-squashed).

Gaussian (Box-Muller)
---------------------
``z`` float32 from :func:`fastppo.kernels.rng.box_muller32` (pair ``p`` of
normals from words ``(w0, w1)`` / ``(w2, w3)`` of block ``p // 2``); then in
float64 ``u = mean + exp(log_std) * z``; ``log p = sum_j (-z_j^2 / 2 -
log_std_j - log(2 pi) / 2)``. With ``squash``, the action is ``a =
tanh32(float32(u))`` (:func:`fastppo.kernels.fastmath.tanh32`, within 8
float32 ulp; +-1 where it saturates), and ``log p`` is the density of that action as
``gaussian_logp_entropy`` evaluates it: at ``u' = atanh(a)`` (clipped), minus
``sum_j log(1 - tanh(u'_j)^2)``, both from the float32
:func:`fastppo.kernels.squash.unsquash` (Haarnoja et al. 2018,
arXiv:1801.01290, App. C). So a PPO ratio starts at exactly 1, even for
saturated actions.

``exp`` is the branch-free ``exp64`` of :mod:`fastppo.kernels.fastmath`
(within 1 ulp), and the squash is float32, so every loop over a chunk's envs
vectorises, per-env log-stds and squashing included (libm calls made a
squashed call 20x and a per-env ``log_std`` 3x the cost of the plain one;
the float64 ``tanh64`` and ``log64`` that replaced them, 4.3x).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fastppo._jit import STORAGE, kernel, kernel_pair, subroutine
from fastppo.kernels.chunks import (
    CHUNK,
    KIND_F16,
    TASK,
    float_rows,
    half_bits,
    load1,
    rows_to_tile,
    tile_to_rows,
)
from fastppo.kernels.codec import bf16_to_f32, f16_to_f32
from fastppo.kernels.fastmath import exp64, tanh32
from fastppo.kernels.rng import STREAM, box_muller32, env_block, normal_words
from fastppo.kernels.squash import unsquash

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

# |log_std| must stay below this: exp(+-700) is a normal float64 (exp overflows
# at 709.8), so std is positive and finite and (u - mean) / std is defined.
LOG_STD_LIMIT = 700.0


@subroutine
def _cols_below(x, col, a_dim, kind, i0, i1, bound):  # pragma: no cover - compiled
    """True if every ``|x[i0:i1, col:col+a_dim]| < bound`` (so no NaN, and no inf).

    The flag is OR-reduced without branches so the scan vectorises; when the
    columns are the whole rows (the array path) it is one flat loop.
    """
    w = x.shape[1]
    bad = False
    if col == 0 and w == a_dim:
        # a view indexed from 0: a loop from i0 * w keeps Numba's
        # negative-index wrap and stays scalar (2.6x slower here)
        xf = x.reshape(x.shape[0] * w)[i0 * w : i1 * w]
        if half_bits(xf) and kind == KIND_F16:
            for k in range(xf.shape[0]):
                bad |= not (abs(f16_to_f32(xf[k])) < bound)
        elif half_bits(xf):  # KIND_BF16
            for k in range(xf.shape[0]):
                bad |= not (abs(bf16_to_f32(xf[k])) < bound)
        else:
            for k in range(xf.shape[0]):
                bad |= not (abs(xf[k]) < bound)
    else:
        for i in range(i0, i1):
            for j in range(a_dim):
                bad |= not (abs(load1(x, i, col + j, kind)) < bound)
    return not bad


@kernel("i8(S_2, i8, S_2, i8, i8, i8, b1, i8, i8, f8)", variants=STORAGE)
def _gaussian_rows_ok(
    pm, mcol, pl, lcol, a_dim, kind, shared_std, i0, i1, bound
):  # pragma: no cover - compiled
    """-1, or the first row in ``[i0, i1)`` whose mean is NaN or +-inf (``|pm| <
    bound`` fails) or whose log-std is outside ``(-LOG_STD_LIMIT, LOG_STD_LIMIT)``.

    A branch-free scan first; the row is searched for only when one is bad.
    """
    if _cols_below(pm, mcol, a_dim, kind, i0, i1, bound) and (
        shared_std or _cols_below(pl, lcol, a_dim, kind, i0, i1, LOG_STD_LIMIT)
    ):
        return -1
    for i in range(i0, i1):
        for j in range(a_dim):
            if not (abs(load1(pm, i, mcol + j, kind)) < bound):
                return i
            if not shared_std and not (abs(load1(pl, i, lcol + j, kind)) < LOG_STD_LIMIT):
                return i
    return -1


@subroutine
def first_refused(pm, mcol, pl, lcol, a_dim, kind, shared_std, act, act_bound):  # pragma: no cover
    """-1, or the first row whose mean or log-std :func:`_gaussian_rows_ok` refuses
    or (when ``act`` has rows: ``gaussian_logp_entropy``) whose action fails
    ``|a| < act_bound``; a refused shared log-std row (``shared_std``) is row 0.

    Blocks of ``TASK * CHUNK`` rows in order, so the row is the first one
    whatever the block size. Every kernel that takes Gaussian parameters
    checks them here, before its first write.
    """
    n = pm.shape[0]
    if shared_std and n > 0:
        if _gaussian_rows_ok(pl, lcol, pl, lcol, a_dim, kind, True, 0, 1, LOG_STD_LIMIT) >= 0:
            return 0
    step = TASK * CHUNK
    for i0 in range(0, n, step):
        i1 = min(n, i0 + step)
        bp = _gaussian_rows_ok(pm, mcol, pl, lcol, a_dim, kind, shared_std, i0, i1, np.inf)
        ba = -1
        if act.shape[0] > 0:
            ba = _gaussian_rows_ok(act, 0, act, 0, a_dim, kind, True, i0, i1, act_bound)
        if bp >= 0 or ba >= 0:
            return bp if ba < 0 or (0 <= bp <= ba) else ba
    return -1


@kernel_pair(f"i8(S_2, i8, S_2, i8, i8, i8, b1, {STREAM}, b1, b1, f4_2w, f4_1w)", variants=STORAGE)
def gaussian(
    pm,
    mcol,
    pl,
    lcol,
    a_dim,
    kind,
    shared_std,
    stream,
    squash,
    deterministic,
    act,
    logp,
):  # pragma: no cover - compiled
    """Sample diagonal-Gaussian actions; returns -1 or the first env with a non-finite parameter.

    Parameters
    ----------
    pm : [N, *] means in columns ``mcol:mcol+a_dim`` (storage type per ``kind``).
    pl : [N or 1, *] log-stds in columns ``lcol:lcol+a_dim``; row 0 for every
        env when ``shared_std`` (state-independent log-std).
    act : [N, a_dim] float32; logp : [N] float32.

    Normal ``j`` of an env is Box-Muller pair ``p = j // 2`` of its stream,
    cosine for even ``j``, sine for odd ``j``; pair ``p`` takes words ``(w0,
    w1)`` of block ``p // 2`` for even ``p``, ``(w2, w3)`` for odd ``p``
    (:func:`fastppo.kernels.rng.box_muller32`, float32). Then, in float64,
    ``u = mean + exp(log_std) z`` and ``log p = sum_j (-z_j^2 / 2 - log_std_j
    - log(2 pi) / 2)`` accumulated in ``j`` order.
    """
    n = pm.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    n_tasks = (n_chunks + TASK - 1) // TASK
    first = first_refused(pm, mcol, pl, lcol, a_dim, kind, shared_std, pm[0:0], np.inf)
    if first >= 0:
        return first
    # a state-independent std: one exp per dimension per call
    ls0 = np.empty(a_dim, dtype=np.float64)
    sd0 = np.empty(a_dim, dtype=np.float64)
    if shared_std:
        for j in range(a_dim):
            ls0[j] = load1(pl, 0, lcol + j, kind)
            sd0[j] = exp64(ls0[j])
    for t in numba.prange(n_tasks):
        _gaussian_task(
            pm,
            mcol,
            pl,
            lcol,
            a_dim,
            kind,
            shared_std,
            stream,
            squash,
            deterministic,
            act,
            logp,
            t,
            ls0,
            sd0,
        )
    return -1


@subroutine
def chunk_normals(stream, i0, rows, n_pair, w, z):  # pragma: no cover - compiled
    """Normal ``j`` of row ``i0 + i`` in ``z[j * CHUNK + i]`` for ``j < 2 n_pair``,
    ``i < rows`` (``w`` int32 scratch of ``4 ceil(n_pair / 2) CHUNK``: the radius
    and angle words of pair ``p`` in rows ``2p`` and ``2p + 1``).

    Philox for every (block, env) of the chunk with envs innermost, then
    Box-Muller as a separate pass: both loops vectorise (8 float32 normals per
    instruction), the Philox one on 4 envs per register. All four words of a
    block are used: pair 2b from (w0, w1), pair 2b + 1 from (w2, w3). The
    rows are slices of flat arrays: rows of 2-D arrays (indexed or as views)
    made LLVM compile the Box-Muller loop to scalar code, 6x slower.
    """
    n_blk = (n_pair + 1) // 2
    for b in range(n_blk):
        r0 = w[4 * b * CHUNK : (4 * b + 1) * CHUNK]
        a0 = w[(4 * b + 1) * CHUNK : (4 * b + 2) * CHUNK]
        r1 = w[(4 * b + 2) * CHUNK : (4 * b + 3) * CHUNK]
        a1 = w[(4 * b + 3) * CHUNK : (4 * b + 4) * CHUNK]
        for i in range(rows):
            w0, w1, w2, w3 = env_block(stream, i0 + i, b)
            r0[i], a0[i] = normal_words(w0, w1)
            r1[i], a1[i] = normal_words(w2, w3)
    for p in range(n_pair):
        wr = w[2 * p * CHUNK : (2 * p + 1) * CHUNK]
        wa = w[(2 * p + 1) * CHUNK : (2 * p + 2) * CHUNK]
        zc = z[2 * p * CHUNK : (2 * p + 1) * CHUNK]
        zs = z[(2 * p + 1) * CHUNK : (2 * p + 2) * CHUNK]
        for i in range(rows):
            zc[i], zs[i] = box_muller32(wr[i], wa[i])


@kernel(
    f"void(S_2, i8, S_2, i8, i8, i8, b1, {STREAM}, b1, b1, f4_2w, f4_1w, i8, f8_1, f8_1)",
    variants=STORAGE,
)
def _gaussian_task(
    pm,
    mcol,
    pl,
    lcol,
    a_dim,
    kind,
    shared_std,
    stream,
    squash,
    deterministic,
    act,
    logp,
    t,
    ls0,
    sd0,
):  # pragma: no cover - compiled
    """Chunks ``[t * TASK, (t + 1) * TASK)`` of :func:`gaussian` (a parallel task).

    One set of scratch arrays serves the task's chunks (per chunk, the
    allocations would cost as much as the arithmetic at N = 4096), and one
    call per task keeps the call overhead of a separately compiled function
    (~100 ns) out of the per-chunk cost.
    """
    n = pm.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    n_pair = (a_dim + 1) // 2
    n_blk = (n_pair + 1) // 2
    # scratch, once per task. Tiles are [column, row] (rows in the vector
    # lanes), each also flat for the subroutines (see chunks.rows_to_tile):
    # the Philox words (pair p's in rows 2p, 2p + 1) and the normals (normal
    # j in row j); the chunk's means, per-env log-stds and actions
    nz = 4 * n_blk * CHUNK
    nl = 0 if shared_std else a_dim
    w = np.empty(nz, dtype=np.int32)
    zf = np.empty(nz, dtype=np.float32)
    Z = zf.reshape(4 * n_blk, CHUNK)
    mtf = np.empty(a_dim * CHUNK, dtype=np.float64)
    MT = mtf.reshape(a_dim, CHUNK)
    ltf = np.empty(nl * CHUNK, dtype=np.float64)
    LT = ltf.reshape(nl, CHUNK)
    atf = np.empty(a_dim * CHUNK, dtype=np.float32)
    AT = atf.reshape(a_dim, CHUNK)
    lacc = np.empty(CHUNK, dtype=np.float64)
    # one column's log-stds and stds (per-env log-std or squash) and the
    # squash's float32 atanh and log-det
    per_env = squash or not shared_std
    cols = np.empty((2, CHUNK if per_env else 1), dtype=np.float64)
    ls, sd = cols[0], cols[1]
    sq = np.empty((2, CHUNK if squash else 1), dtype=np.float32)
    u32, ld32 = sq[0], sq[1]
    # float storage whose rows are exactly the means (the array path): the
    # chunk's block is contiguous and is transposed; otherwise (columns of a
    # wider row, or float16/bfloat16 bits) each column is loaded and decoded
    whole_m = not half_bits(pm) and mcol == 0 and pm.shape[1] == a_dim
    whole_l = not half_bits(pl) and lcol == 0 and pl.shape[1] == a_dim
    pmf = float_rows(pm)
    plf = float_rows(pl)
    actf = act.reshape(act.size)
    for c in range(t * TASK, min(n_chunks, (t + 1) * TASK)):
        i0 = c * CHUNK
        rows = min(n, i0 + CHUNK) - i0
        if deterministic:
            for j in range(a_dim):
                for i in range(rows):
                    Z[j, i] = 0.0
        else:
            chunk_normals(stream, i0, rows, n_pair, w, zf)
        if whole_m:
            rows_to_tile(pmf[i0 * a_dim : (i0 + rows) * a_dim], mtf, rows, a_dim)
        else:
            for j in range(a_dim):
                for i in range(rows):
                    MT[j, i] = load1(pm, i0 + i, mcol + j, kind)
        if not shared_std and whole_l:
            rows_to_tile(plf[i0 * a_dim : (i0 + rows) * a_dim], ltf, rows, a_dim)
        elif not shared_std:
            for j in range(a_dim):
                for i in range(rows):
                    LT[j, i] = load1(pl, i0 + i, lcol + j, kind)
        # then dimension by dimension with envs innermost: the log-density
        # accumulates per env in ``lacc`` (same j order as a row loop, so the
        # same float64 sums). Every loop below is branch-free, so each
        # vectorises.
        for i in range(rows):
            lacc[i] = 0.0
        for j in range(a_dim):
            if shared_std and not squash:
                lsj = ls0[j]
                sdj = sd0[j]
                for i in range(rows):
                    zj = np.float64(Z[j, i])
                    AT[j, i] = MT[j, i] + sdj * zj
                    lacc[i] += -0.5 * zj * zj - lsj - HALF_LOG_2PI
                continue
            # the column's log-stds and stds, one env per lane
            if shared_std:
                for i in range(rows):
                    ls[i] = ls0[j]
                    sd[i] = sd0[j]
            else:
                for i in range(rows):
                    ls[i] = LT[j, i]
                    sd[i] = exp64(LT[j, i])
            if squash:
                # u in float64, then float32 passes (eight lanes): the action
                # tanh32(float32(u)) and, exactly as gaussian_logp_entropy and
                # the MLP head evaluate it, the density of that action
                for i in range(rows):
                    AT[j, i] = np.float32(MT[j, i] + sd[i] * np.float64(Z[j, i]))
                for i in range(rows):
                    AT[j, i] = tanh32(AT[j, i])
                # a separate loop: fused with tanh32 it ran 1.5x slower
                for i in range(rows):
                    u32[i], ld32[i] = unsquash(AT[j, i])
                for i in range(rows):
                    zj = (np.float64(u32[i]) - MT[j, i]) / sd[i]
                    lacc[i] += -0.5 * zj * zj - ls[i] - HALF_LOG_2PI - np.float64(ld32[i])
            else:
                for i in range(rows):
                    zj = np.float64(Z[j, i])
                    AT[j, i] = MT[j, i] + sd[i] * zj
                    lacc[i] += -0.5 * zj * zj - ls[i] - HALF_LOG_2PI
        tile_to_rows(atf, actf[i0 * a_dim : (i0 + rows) * a_dim], rows, a_dim)
        lo = logp[i0 : i0 + rows]  # indexed from 0: no negative-index wrap
        for i in range(rows):
            lo[i] = lacc[i]


gaussian_serial, gaussian_parallel = gaussian
