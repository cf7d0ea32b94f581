"""Batched categorical sampling kernels (plain, masked, multi-discrete).

Categorical (inverse CDF, one uniform per env and dimension)
------------------------------------------------------------
With ``m = max_j l_j`` over allowed actions, ``e_j = expf32(l_j - m)`` (0 for a
masked action), ``s = sum_j e_j`` accumulated in float64 in action order, and
``u`` the env's uniform, the action is the first ``j`` with
``u * s < e_0 + ... + e_j``. If rounding lets ``u * s`` reach the total, the
last action with ``e_j > 0`` is taken, so a masked or out-of-range action is
never returned. The log-probability is ``(l_a - m) - log32(float32(s))`` in
float64, rounded to float32.

``expf32`` is the package's one float32 exponential
(:mod:`fastppo.kernels.fastmath`: Cody-Waite reduction, the Cephes ``expf``
polynomial, vectorised, within 1 ulp; 0 at or below ``-87.3``; called through
its ``x <= 0`` entry ``expf32_nonpos``), i.e. relative errors of ``1.2e-7`` in
the probabilities, far below sampling noise. ``log32`` is the float32
Cephes ``logf`` of :mod:`fastppo.kernels.rng` (within 1 ulp); with the
rounding of ``s`` to float32, ``log s`` is within 1.9e-7 absolute for ``s <=
18`` and 1.1e-6 for ``s <= 2**24`` (measured on 1e6 random ``s`` each), in
float32 terms about one ulp of a log-probability near -1 to -3.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from fastppo._jit import STORAGE, kernel, kernel_pair, specialized
from fastppo.kernels.chunks import (
    _INF32,
    CHUNK,
    KIND_BF16,
    KIND_F16,
    TASK,
    chunk_uniforms,
    first_bad,
    half_bits,
    rows_to_tile,
)
from fastppo.kernels.codec import bf16_to_f32, f16_to_f32
from fastppo.kernels.fastmath import expf32_nonpos
from fastppo.kernels.rng import STREAM, log32

# The multi-discrete sampler takes arrays only (no byte-buffer entry).
ARRAYS = STORAGE[:2]

# (x, kind, mask, has_mask, offs, stream, deterministic, prevalidate, proto,
#  act, logp) -> first bad env or -1
_CATEGORICAL_SIG = f"i8(S_2, i8, u1_2, b1, i8_1, {STREAM}, b1, b1, F_1, i8_1w, f4_1w)"


@kernel("i8(S_1, i8, u1_1, b1, i8, i8, i8, F_1w, u1_1w)", variants=STORAGE, linked=True)
def _chunk_valid(xf, kind, mf, has_mask, width, i0, rows, Q, F):  # pragma: no cover - compiled
    """How many leading rows of a chunk are valid (``rows`` when all are).

    The chunk's rows are contiguous in ``xf``, so one flat loop over ``rows *
    width`` values decodes them into ``Q`` (working precision, row order; a
    masked logit becomes ``-inf``) and marks each in ``F`` (uint8 scratch)
    with bit 1 if it is allowed and above ``-inf`` and bit 2 if it is
    NaN/+inf; a row is valid when the OR of its marks is 1 (no NaN/+inf,
    masked or not, and some allowed action). The ``out=`` path's validation
    pass, run over every chunk before the first write, and the first step of
    :func:`_chunk_load`.
    """
    base = i0 * width
    cnt = rows * width
    # views indexed from 0: an index from base keeps Numba's negative-index
    # wrap and the loops stay scalar
    xs = xf[base : base + cnt]
    ms = mf[base : base + cnt] if has_mask else mf[0:0]
    one = np.uint8(1)
    two = np.uint8(2)
    ninf = Q.dtype.type(-np.inf)
    # one loop per (kind, mask) pair: a branch left in the loop body keeps
    # LLVM from vectorising it
    if half_bits(xf) and kind == KIND_F16 and has_mask:
        for k in range(cnt):
            v = f16_to_f32(xs[k])
            ok = ms[k] != 0
            Q[k] = v if ok else ninf
            F[k] = one * ((v > -_INF32) & ok) | two * (not (v < _INF32))
    elif half_bits(xf) and kind == KIND_F16:
        for k in range(cnt):
            v = f16_to_f32(xs[k])
            Q[k] = v
            F[k] = one * (v > -_INF32) | two * (not (v < _INF32))
    elif half_bits(xf) and kind == KIND_BF16 and has_mask:
        for k in range(cnt):
            v = bf16_to_f32(xs[k])
            ok = ms[k] != 0
            Q[k] = v if ok else ninf
            F[k] = one * ((v > -_INF32) & ok) | two * (not (v < _INF32))
    elif half_bits(xf):  # KIND_BF16
        for k in range(cnt):
            v = bf16_to_f32(xs[k])
            Q[k] = v
            F[k] = one * (v > -_INF32) | two * (not (v < _INF32))
    elif has_mask:
        for k in range(cnt):
            v = xs[k]
            ok = ms[k] != 0
            Q[k] = v if ok else ninf
            F[k] = one * ((v > -_INF32) & ok) | two * (not (v < _INF32))
    else:
        for k in range(cnt):
            v = xs[k]
            Q[k] = v
            F[k] = one * (v > -_INF32) | two * (not (v < _INF32))
    for i in range(rows):
        o = i * width
        marks = np.uint8(0)
        for j in range(width):
            marks |= F[o + j]
        if marks != one:
            return i
    return rows


@kernel("i8(S_1, i8, u1_1, b1, i8, i8, i8, F_1w, u1_1w, F_1w, F_1w)", variants=STORAGE, linked=True)
def _chunk_load(xf, kind, mf, has_mask, width, i0, rows, Q, F, R, M):  # pragma: no cover
    """Load one chunk of single-dimension categorical rows, envs in the vector lanes.

    Returns how many leading rows are valid (:func:`_chunk_valid`'s
    verdict). Float16/bfloat16 bits, and rows of at most 8 actions, are
    decoded and masked in row order by :func:`_chunk_valid` (one flat loop
    that vectorises for every storage kind) and then transposed to ``R[j *
    CHUNK + i]`` (action ``j``, row ``i``) by
    :func:`fastppo.kernels.chunks.rows_to_tile`, vectorised for those widths;
    wider float rows are masked and transposed in one scalar pass. The row
    maxima land in ``M``, so every later step
    (:func:`_chunk_draw`) runs over the chunk's rows in the inner loop:
    each row's max, float64 sum and inverse-CDF scan are vector lanes with
    no dependency chain between them (a row loop would wait on each add).
    Decoding while transposing, row by row, ran the bfloat16 path at 1.6x
    the float32 one ([4096x18], masked).

    Linked into the rows kernels (:func:`_categorical_rows`, :func:`_multi_rows`,
    and the checks), once per chunk of 64 rows.
    """
    two_pass = half_bits(xf) or width <= 8
    n_ok = rows
    if two_pass:
        n_ok = _chunk_valid(xf, kind, mf, has_mask, width, i0, rows, Q, F)
        rows_to_tile(Q[: rows * width], R, rows, width)
    else:
        # float rows wider than 8 are masked and transposed in one pass, row
        # by row (their transposition is scalar either way, and a separate
        # decode pass cost 10-15%); F[i] flags a NaN/+inf in row i
        base = i0 * width
        for i in range(rows):
            o = base + i * width
            xo = xf[o : o + width]
            mo = mf[o : o + width] if has_mask else mf[0:0]
            rb = False
            if has_mask:
                for j in range(width):
                    v = xo[j]
                    rb |= not (v < _INF32)
                    R[np.uint64(j * CHUNK + i)] = v if mo[j] != 0 else -_INF32
            else:
                for j in range(width):
                    v = xo[j]
                    rb |= not (v < _INF32)
                    R[np.uint64(j * CHUNK + i)] = v
            F[i] = rb
    # row maxima. Loops index per-action views from 0, so LLVM sees no
    # negative index to wrap and vectorises them.
    for i in range(rows):
        M[i] = R[i]
    for j in range(1, width):
        Rj = R[j * CHUNK : (j + 1) * CHUNK]
        for i in range(rows):
            # np.maximum (NaN-propagating; NaN rows are flagged anyway) is a
            # blend that is always stored. A select that keeps M[i] becomes a
            # masked store (vmaskmovps), microcoded and ~2x slower on AMD Zen.
            M[i] = np.maximum(M[i], Rj[i])
    if not two_pass:
        for i in range(rows):
            if F[i] != 0 or M[i] == -np.inf:
                return i
    return n_ok


@kernel("void(i8, i8, f8_1, b1, F_1, f4_1w, F_1, f8_1w, f8_1w, f8_1w, i8_1w)", linked=True)
def _chunk_draw(width, rows, u, deterministic, R, E, M, S, C, T, A):  # pragma: no cover - compiled
    """Draw one categorical per row of a chunk's tile ``R[j * CHUNK + i]`` with
    row maxima ``M``: the action ``A[i]`` and ``T[i] = log s`` (float64), so
    that its log-probability is ``float64(R[A[i] * CHUNK + i] - M[i]) - T[i]``.

    Per row the arithmetic, and its order, is the one a row loop would run
    (the module docstring): ``a = #{j : c_j <= u s}`` with ``c_j`` the running
    sums, which is the first ``j`` with ``u s < c_j`` as the ``c_j`` never
    decrease. Rows are the inner loop, so every step vectorises across envs.
    """
    # 3. e = expf32(l - m) (float32: 8 per instruction, a loop of its own) and
    #    s = sum_j e_j in float64, in action order
    for i in range(rows):
        S[i] = 0.0
    for j in range(width):
        Rj = R[j * CHUNK : (j + 1) * CHUNK]
        Ej = E[j * CHUNK : (j + 1) * CHUNK]
        for i in range(rows):
            Ej[i] = expf32_nonpos(np.float32(Rj[i] - M[i]))
        for i in range(rows):
            S[i] += Ej[i]
    # 4. the action
    if deterministic:
        for i in range(rows):
            A[i] = 0
        for j in range(width - 1, -1, -1):
            Rj = R[j * CHUNK : (j + 1) * CHUNK]
            for i in range(rows):
                A[i] = j if Rj[i] == M[i] else A[i]
    else:
        for i in range(rows):
            T[i] = u[i] * S[i]
            C[i] = 0.0
            A[i] = 0
        for j in range(width):
            Ej = E[j * CHUNK : (j + 1) * CHUNK]
            for i in range(rows):
                C[i] += Ej[i]
                A[i] += 1 if C[i] <= T[i] else 0
        for i in range(rows):
            if A[i] >= width:
                # u * s rounded up to s (rare): the last action with nonzero weight
                a = 0
                for j in range(width):
                    a = j if E[j * CHUNK + i] > 0.0 else a
                A[i] = a
    # 5. log s by log32 (8 per instruction); the log-probability is (l_a - m) - log s
    for i in range(rows):
        T[i] = log32(np.float32(S[i]))


# The samplers' work on a run of rows: (x, kind, mask, has_mask, offs, stream,
# deterministic, proto, act, logp) -> the first bad row of x or -1 (rows from
# it on may be partly written); the check alone: (x, kind, mask, has_mask,
# offs, proto) -> the first bad row or -1, nothing written.
_ROWS_SIG = f"i8(S_2, i8, u1_2, b1, i8_1, {STREAM}, b1, F_1, i8_1w, f4_1w)"
_VALID_SIG = "i8(S_2, i8, u1_2, b1, i8_1, F_1)"


@kernel(_VALID_SIG, variants=STORAGE)
def _categorical_valid(x, kind, mask, has_mask, offs, proto):  # pragma: no cover - compiled
    """The first bad row of ``x`` (a NaN or +inf logit, or no allowed finite
    logit), or -1: :func:`_chunk_valid` chunk by chunk."""
    n = x.shape[0]
    width = x.shape[1]
    xf = x.reshape(n * width)
    mf = mask.reshape(mask.shape[0] * mask.shape[1])
    Q = np.empty(CHUNK * width, dtype=proto.dtype)
    F = np.empty(CHUNK * width, dtype=np.uint8)
    for i0 in range(0, n, CHUNK):
        rows = min(n, i0 + CHUNK) - i0
        n_ok = _chunk_valid(xf, kind, mf, has_mask, width, i0, rows, Q, F)
        if n_ok < rows:
            return i0 + n_ok
    return -1


@kernel(_ROWS_SIG, variants=STORAGE)
def _categorical_rows(
    x, kind, mask, has_mask, offs, stream, deterministic, proto, act, logp
):  # pragma: no cover - compiled
    """Sample the rows of ``x`` chunk by chunk (:func:`_chunk_load`,
    :func:`_chunk_draw`); returns the first bad row or -1."""
    n = x.shape[0]
    width = x.shape[1]
    xf = x.reshape(n * width)
    mf = mask.reshape(mask.shape[0] * mask.shape[1])
    n_uni = 0 if deterministic else 1
    Q = np.empty(CHUNK * width, dtype=proto.dtype)
    F = np.empty(CHUNK * width, dtype=np.uint8)
    R = np.empty(CHUNK * width, dtype=proto.dtype)
    E = np.empty(CHUNK * width, dtype=np.float32)
    M = np.empty(CHUNK, dtype=proto.dtype)
    S = np.empty(CHUNK, dtype=np.float64)
    C = np.empty(CHUNK, dtype=np.float64)
    T = np.empty(CHUNK, dtype=np.float64)
    A = np.empty(CHUNK, dtype=np.int64)
    u = np.zeros(2 * CHUNK, dtype=np.float64)
    for i0 in range(0, n, CHUNK):
        rows = min(n, i0 + CHUNK) - i0
        chunk_uniforms(stream, i0, rows, n_uni, u)
        n_ok = _chunk_load(xf, kind, mf, has_mask, width, i0, rows, Q, F, R, M)
        _chunk_draw(width, rows, u, deterministic, R, E, M, S, C, T, A)
        ao = act[i0 : i0 + n_ok]  # indexed from 0: no negative-index wrap
        lo = logp[i0 : i0 + n_ok]
        for i in range(n_ok):
            a = A[i]
            ao[i] = a
            lo[i] = np.float64(R[a * CHUNK + i] - M[i]) - T[i]
        if n_ok < rows:
            return i0 + n_ok
    return -1


@kernel("i8(F_1, i8, i8, i8, i8, F_1w)", linked=True)
def _segment_max(R, lo, hi, rows, n_ok, M):  # pragma: no cover - compiled
    """``M[i]`` = the max of row ``i`` over the tile's actions ``lo:hi``; returns
    ``n_ok`` cut to the first row whose segment has no allowed finite logit."""
    for i in range(rows):
        M[i] = R[lo * CHUNK + i]
    for j in range(lo + 1, hi):
        Rj = R[j * CHUNK : (j + 1) * CHUNK]
        for i in range(rows):
            M[i] = np.maximum(M[i], Rj[i])  # a blend, as in _chunk_load
    for i in range(n_ok):
        if M[i] == -np.inf:
            return i
    return n_ok


@kernel(_VALID_SIG, variants=ARRAYS)
def _multi_valid(x, kind, mask, has_mask, offs, proto):  # pragma: no cover - compiled
    """The first bad row of ``x`` (a NaN or +inf logit, or a dimension with no
    allowed finite logit), or -1; :func:`_multi_rows`' checks, nothing written."""
    n = x.shape[0]
    width = x.shape[1]
    n_dim = offs.shape[0] - 1
    xf = x.reshape(n * width)
    mf = mask.reshape(mask.shape[0] * mask.shape[1])
    Q = np.empty(CHUNK * width, dtype=proto.dtype)
    F = np.empty(CHUNK * width, dtype=np.uint8)
    R = np.empty(CHUNK * width, dtype=proto.dtype)
    M = np.empty(CHUNK, dtype=proto.dtype)
    for i0 in range(0, n, CHUNK):
        rows = min(n, i0 + CHUNK) - i0
        n_ok = _chunk_load(xf, kind, mf, has_mask, width, i0, rows, Q, F, R, M)
        for d in range(n_dim):
            n_ok = _segment_max(R, offs[d], offs[d + 1], rows, n_ok, M)
        if n_ok < rows:
            return i0 + n_ok
    return -1


@kernel(_ROWS_SIG, variants=ARRAYS)
def _multi_rows(
    x, kind, mask, has_mask, offs, stream, deterministic, proto, act, logp
):  # pragma: no cover
    """Sample the rows of ``x`` chunk by chunk; returns the first bad row or -1
    (rows from it on may be partly written).

    A chunk is loaded into one tile (:func:`_chunk_load`); then each
    dimension ``d`` takes its actions' rows of the tile, their maxima
    (:func:`_segment_max`) and uniform ``d`` of each env's stream, and draws
    (:func:`_chunk_draw`). The log-probabilities of the dimensions are summed
    in float64, in dimension order, and rounded to float32 once.
    """
    n = x.shape[0]
    width = x.shape[1]
    n_dim = offs.shape[0] - 1
    xf = x.reshape(n * width)
    mf = mask.reshape(mask.shape[0] * mask.shape[1])
    n_uni = 0 if deterministic else n_dim
    Q = np.empty(CHUNK * width, dtype=proto.dtype)
    F = np.empty(CHUNK * width, dtype=np.uint8)
    R = np.empty(CHUNK * width, dtype=proto.dtype)
    E = np.empty(CHUNK * width, dtype=np.float32)
    M = np.empty(CHUNK, dtype=proto.dtype)
    S = np.empty(CHUNK, dtype=np.float64)
    C = np.empty(CHUNK, dtype=np.float64)
    T = np.empty(CHUNK, dtype=np.float64)
    A = np.empty(CHUNK, dtype=np.int64)
    L = np.empty(CHUNK, dtype=np.float64)
    u = np.zeros(CHUNK * (n_dim + 1), dtype=np.float64)
    for i0 in range(0, n, CHUNK):
        rows = min(n, i0 + CHUNK) - i0
        chunk_uniforms(stream, i0, rows, n_uni, u)
        n_ok = _chunk_load(xf, kind, mf, has_mask, width, i0, rows, Q, F, R, M)
        for i in range(rows):
            L[i] = 0.0
        for d in range(n_dim):
            lo = offs[d]
            hi = offs[d + 1]
            n_ok = _segment_max(R, lo, hi, rows, n_ok, M)
            Rd = R[lo * CHUNK : hi * CHUNK]
            _chunk_draw(hi - lo, rows, u[d * CHUNK :], deterministic, Rd, E, M, S, C, T, A)
            ao = act[i0 * n_dim + d : (i0 + n_ok) * n_dim]  # indexed from 0
            for i in range(n_ok):
                a = A[i]
                ao[i * n_dim] = a
                L[i] += np.float64(Rd[a * CHUNK + i] - M[i]) - T[i]
        lo_ = logp[i0 : i0 + n_ok]
        for i in range(n_ok):
            lo_[i] = L[i]
        if n_ok < rows:
            return i0 + n_ok
    return -1


# What the task loop calls, bound per sampler by specialized() (the template
# itself is never compiled).
_valid: Any = None
_rows: Any = None


def _by_task(
    x,
    kind,
    mask,
    has_mask,
    offs,
    stream,
    deterministic,
    prevalidate,
    proto,
    act,
    logp,
):  # pragma: no cover - compiled
    """Sample every env's categorical action; returns -1 or the first bad env.

    The body of :data:`categorical` (one dimension, ``offs = [0, W]``; its
    rows by :func:`_categorical_rows`) and :data:`multi_categorical` (the
    general case, float arrays only; :func:`_multi_rows`): tasks of ``CHUNK
    * TASK`` rows call the sampler's check (with ``prevalidate``, every task
    before the first write) and its rows kernel by symbol, with the task's
    rows and its stream (row 0 moved to the task's first row). So the
    ``parallel=True`` build is a loop of calls and compiles in a fraction of
    the time a copy of the chunk steps takes, and its rows run the very code
    of the serial build; a call per 512 rows costs nothing measurable.

    Parameters
    ----------
    x : [N, W] float32, float64 or uint16 (float16/bfloat16 bits, see ``kind``)
        Logits of ``D = len(offs) - 1`` categorical dimensions laid side by
        side: dimension ``d`` owns columns ``offs[d]:offs[d+1]``.
    mask : [N, W] uint8, nonzero = allowed (ignored unless ``has_mask``).
    offs : [D + 1] int64 segment bounds.
    stream : the draws' stream record (:data:`fastppo.kernels.rng.STREAM`:
        32-bit words of seed and counter, and the global index of row 0).
    prevalidate : run a validation pass first, so that nothing is written
        when a row is bad (the caller's ``out=`` buffers). When the outputs
        are fresh arrays the check rides along the sampling pass instead:
        partial outputs are then discarded by the caller.
    proto : empty array whose dtype is the working precision (float32, or
        float64 for float64 logits).
    act : [N * D] int64, written ``act[i*D + d]`` (action within dimension d).
    logp : [N] float32, sum of the dimensions' log-probabilities.

    Dimension ``d`` uses uniform ``d`` of the env's stream. A bad row has a
    NaN or +inf logit, or a dimension with no allowed finite logit.
    """
    n = x.shape[0]
    n_dim = offs.shape[0] - 1
    step = CHUNK * TASK
    if n <= step:  # one task: the calls without the views (an N = 1 actor's step)
        if prevalidate:
            b = _valid(x, kind, mask, has_mask, offs, proto)
            if b >= 0:
                return b
        return _rows(x, kind, mask, has_mask, offs, stream, deterministic, proto, act, logp)
    n_tasks = (n + step - 1) // step
    seed_lo, seed_hi, ctr_lo, ctr_hi, row0 = stream
    bad = np.full(n_tasks, -1, dtype=np.int64)
    if prevalidate:
        for t in numba.prange(n_tasks):
            r0 = t * step
            r1 = min(n, r0 + step)
            mt = mask[r0:r1] if has_mask else mask
            b = _valid(x[r0:r1], kind, mt, has_mask, offs, proto)
            bad[t] = r0 + b if b >= 0 else -1
        first = first_bad(bad)
        if first >= 0:
            return first
    for t in numba.prange(n_tasks):
        r0 = t * step
        r1 = min(n, r0 + step)
        mt = mask[r0:r1] if has_mask else mask
        st = (seed_lo, seed_hi, ctr_lo, ctr_hi, row0 + r0)
        b = _rows(
            x[r0:r1], kind, mt, has_mask, offs, st, deterministic, proto,
            act[r0 * n_dim : r1 * n_dim], logp[r0:r1],
        )  # fmt: skip
        bad[t] = r0 + b if b >= 0 else -1
    return first_bad(bad)


categorical = kernel_pair(_CATEGORICAL_SIG, variants=STORAGE)(
    specialized(_by_task, "_categorical", _valid=_categorical_valid, _rows=_categorical_rows)
)
categorical_serial, categorical_parallel = categorical
multi_categorical = kernel_pair(_CATEGORICAL_SIG, variants=ARRAYS)(
    specialized(_by_task, "_multi_categorical", _valid=_multi_valid, _rows=_multi_rows)
)
multi_categorical_serial, multi_categorical_parallel = multi_categorical
