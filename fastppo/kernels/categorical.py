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

import numba
import numpy as np

from fastppo._jit import STORAGE, kernel, kernel_pair
from fastppo.kernels.chunks import (
    _INF32,
    CHUNK,
    KIND_BF16,
    KIND_F16,
    TASK,
    chunk_uniforms,
    first_bad,
    half_bits,
    load_row,
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


@kernel("Tup(i8, f8)(F_1, f4_1w, i8, i8, f8, b1)", linked=True)
def _sample_segment(r, e, lo, hi, u, deterministic):  # pragma: no cover - compiled
    """Inverse-CDF draw from ``softmax(r[lo:hi])``; masked entries of ``r`` are -inf.

    ``r`` is float32 (float64 for float64 logits), ``e`` float32 scratch.
    Returns ``(index - lo, log-probability as float64)``, or ``(-1, 0)`` when
    no entry is allowed (the max is -inf). Index bounds, not slices: a slice
    is a new array with a reference count to bump, per row.
    """
    m = r[lo]
    for j in range(lo + 1, hi):
        m = max(m, r[j])
    if m == -np.inf:
        return -1, 0.0
    for j in range(lo, hi):
        e[j] = expf32_nonpos(np.float32(r[j] - m))
    s = 0.0
    for j in range(lo, hi):
        s += e[j]
    if deterministic:
        a = lo
        for j in range(lo, hi):
            if r[j] == m:
                a = j
                break
    else:
        t = u * s
        c = 0.0
        last = lo
        a = -1
        for j in range(lo, hi):
            ej = e[j]
            if ej > 0.0:
                last = j
            c += ej
            if t < c:
                a = j
                break
        if a < 0:
            # u * s rounded up to s: the last action with nonzero weight.
            a = last
    return a - lo, np.float64(r[a] - m) - np.float64(log32(np.float32(s)))


@kernel("b1(S_2, i8, i8, u1_2, b1, F_1w)", variants=ARRAYS, linked=True)
def _load_checked(x, i, kind, mask, has_mask, r):  # pragma: no cover - compiled
    """Load row ``i`` into ``r`` with masked entries set to -inf; False on NaN/+inf.

    ``not (v < inf)`` is one compare that catches NaN and +inf but lets -inf
    through; the flag is OR-reduced without branches so the loop vectorises.
    """
    width = r.shape[0]
    load_row(x, i, kind, 0, width, r)
    bad = False
    if has_mask:
        for j in range(width):
            v = r[j]
            bad |= not (v < _INF32)
            r[j] = v if mask[i, j] != 0 else -_INF32
    else:
        for j in range(width):
            bad |= not (r[j] < _INF32)
    return not bad


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
    (:func:`_chunk_sample`) runs over the chunk's rows in the inner loop:
    each row's max, float64 sum and inverse-CDF scan are vector lanes with
    no dependency chain between them (a row loop would wait on each add).
    Decoding while transposing, row by row, ran the bfloat16 path at 1.6x
    the float32 one ([4096x18], masked).

    Compiled on its own (not IR-inlined): the serial and parallel builds of
    :func:`categorical` share it, and a call per chunk of 64 rows costs
    nothing measurable.
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


@kernel(
    "void(i8, i8, i8, i8, f8_1, b1, F_1, f4_1w, F_1, f8_1w, f8_1w, f8_1w, i8_1w, i8_1w, f4_1w)",
    linked=True,
)
def _chunk_sample(
    width, i0, rows, n_ok, u, deterministic, R, E, M, S, C, T, A, act, logp
):  # pragma: no cover - compiled
    """Draw the actions of a chunk loaded by :func:`_chunk_load`; writes rows ``< n_ok``.

    Per row the arithmetic, and its order, is the one of
    :func:`_sample_segment`: ``a = #{j : c_j <= u s}`` with ``c_j`` the
    running sums, which is the first ``j`` with ``u s < c_j`` as the ``c_j``
    never decrease.
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
    # 5. log-probabilities: (l_a - m) - log(s), log s by log32 (8 per instruction)
    for i in range(rows):
        T[i] = log32(np.float32(S[i]))
    ao = act[i0 : i0 + n_ok]  # indexed from 0: no negative-index wrap
    lo = logp[i0 : i0 + n_ok]
    for i in range(n_ok):
        a = A[i]
        ao[i] = a
        lo[i] = np.float64(R[a * CHUNK + i] - M[i]) - T[i]


@kernel_pair(_CATEGORICAL_SIG, variants=STORAGE)
def categorical(
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

    One dimension (``offs = [0, W]``); :func:`multi_categorical` takes the
    general case with the same signature and, for one dimension, the same
    results (the separate kernels keep each one's compile small).

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
    width = x.shape[1]
    n_chunks = (n + CHUNK - 1) // CHUNK
    n_tasks = (n_chunks + TASK - 1) // TASK
    bad = np.full(n_chunks, -1, dtype=np.int64)
    xf = x.reshape(n * width)
    mf = mask.reshape(mask.shape[0] * mask.shape[1])
    # With the caller's buffers, every row is checked before the first write
    # (nothing written on error) and no output-sized scratch is allocated
    # (out= calls allocate nothing the size of the batch); fresh outputs are
    # checked along the sampling pass and dropped on error.
    if prevalidate:
        for t in numba.prange(n_tasks):
            Q = np.empty(CHUNK * width, dtype=proto.dtype)
            F = np.empty(CHUNK * width, dtype=np.uint8)
            for c in range(t * TASK, min(n_chunks, (t + 1) * TASK)):
                i0 = c * CHUNK
                rows = min(n, i0 + CHUNK) - i0
                n_ok = _chunk_valid(xf, kind, mf, has_mask, width, i0, rows, Q, F)
                if n_ok < rows:
                    bad[c] = i0 + n_ok
        first = first_bad(bad)
        if first >= 0:
            return first
    n_uni = 0 if deterministic else 1
    for t in numba.prange(n_tasks):
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
        for c in range(t * TASK, min(n_chunks, (t + 1) * TASK)):
            i0 = c * CHUNK
            rows = min(n, i0 + CHUNK) - i0
            chunk_uniforms(stream, i0, rows, n_uni, u)
            n_ok = _chunk_load(xf, kind, mf, has_mask, width, i0, rows, Q, F, R, M)
            _chunk_sample(width, i0, rows, n_ok, u, deterministic, R, E, M, S, C, T, A, act, logp)
            if n_ok < rows:
                bad[c] = i0 + n_ok
    return first_bad(bad)


categorical_serial, categorical_parallel = categorical


@kernel_pair(_CATEGORICAL_SIG, variants=ARRAYS)
def multi_categorical(
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
    """Sample every env's (multi-)categorical action; returns -1 or the first bad env.

    The arguments are :func:`categorical`'s (``offs`` with ``D + 1`` bounds,
    ``act`` of ``N * D``). Row by row: dimension ``d`` draws from its segment
    with uniform ``d`` of the env's stream.
    """
    n = x.shape[0]
    width = x.shape[1]
    n_dim = offs.shape[0] - 1
    n_chunks = (n + CHUNK - 1) // CHUNK
    bad = np.full(n_chunks, -1, dtype=np.int64)
    if prevalidate:
        for c in numba.prange(n_chunks):
            r = np.empty(width, dtype=proto.dtype)
            for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
                ok = _load_checked(x, i, kind, mask, has_mask, r)
                for d in range(n_dim):
                    m = -np.inf
                    for j in range(offs[d], offs[d + 1]):
                        m = max(m, r[j])
                    ok &= m != -np.inf
                if not ok:
                    bad[c] = i
                    break
        first = first_bad(bad)
        if first >= 0:
            return first
    n_uni = 0 if deterministic else n_dim
    for c in numba.prange(n_chunks):
        r = np.empty(width, dtype=proto.dtype)
        e = np.empty(width, dtype=np.float32)
        u = np.zeros(CHUNK * (n_dim + 1), dtype=np.float64)
        i0 = c * CHUNK
        rows = min(n, i0 + CHUNK) - i0
        chunk_uniforms(stream, i0, rows, n_uni, u)
        for i in range(i0, i0 + rows):
            ok = _load_checked(x, i, kind, mask, has_mask, r)
            total = 0.0
            for d in range(n_dim):
                a, lp = _sample_segment(
                    r, e, offs[d], offs[d + 1], u[d * CHUNK + i - i0], deterministic
                )
                ok &= a >= 0
                act[i * n_dim + d] = a
                total += lp
            logp[i] = total
            if not ok:
                bad[c] = i
                break
    return first_bad(bad)


multi_categorical_serial, multi_categorical_parallel = multi_categorical
