"""Batched action sampling kernels: categorical (plain, masked, multi) and Gaussian.

Kernels return -1 or the first bad env index (NaN or +inf logits, rows with no
allowed action, non-finite Gaussian parameters), and the public layer raises
naming it. When the caller supplied ``out=`` buffers nothing is written on
error: the kernels validate every row first (and allocate nothing the size of
the batch); with fresh outputs the checks ride along the sampling pass and the
partial results are dropped. Work runs over chunks of ``CHUNK``
rows, grouped ``TASK`` chunks to a task that allocates its scratch once;
``prange`` runs over tasks in the parallel build. Rows are independent and
each draws from its own counter-based stream (:mod:`fastppo.kernels.rng`), so
results are bit-identical whatever the thread count, the chunking or the split
of a batch into slices. A chunk's random words are generated first, envs in
the inner loop, so Philox vectorises; every later step of a chunk also runs
with envs in the vector lanes (the single-dimension categorical transposes its
chunk of logits to action-major order for that).

Inputs arrive in their storage type: float32/float64 arrays, or uint16 bit
patterns of float16/bfloat16 (``kind``), so the byte-buffer samplers decode in
the same pass that samples and no float32 copy of the logits is ever made.

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
polynomial, vectorised, within 1 ulp; 0 below ``-104``), i.e. relative errors
of ``1.2e-7`` in the probabilities, far below sampling noise. ``log32`` is the float32
Cephes ``logf`` of :mod:`fastppo.kernels.rng` (within 1 ulp); with the
rounding of ``s`` to float32, ``log s`` is within 1.9e-7 absolute for ``s <=
18`` and 1.1e-6 for ``s <= 2**24`` (measured on 1e6 random ``s`` each), in
float32 terms about one ulp of a log-probability near -1 to -3.

Gaussian (Box-Muller)
---------------------
``z`` float32 from :func:`fastppo.kernels.rng.box_muller32` (pair ``p`` of
normals from words ``(w0, w1)`` / ``(w2, w3)`` of block ``p // 2``); then in
float64 ``u = mean + exp(log_std) * z``; ``log p = sum_j (-z_j^2 / 2 -
log_std_j - log(2 pi) / 2)``. With ``squash``, the action is ``a = tanh(u)``
rounded to float32, and ``log p`` is the density of that action as
``gaussian_logp_entropy`` evaluates it: at ``u' = atanh(a)`` (clipped), minus
``sum_j log(1 - tanh(u'_j)^2)`` (:mod:`fastppo.kernels.squash`; Haarnoja et
al. 2018, arXiv:1801.01290, App. C). So a PPO ratio starts at exactly 1, even
for saturated actions.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fastppo._jit import STORAGE, inline, kernel, kernel_pair
from fastppo.kernels.codec import bf16_to_f32, f16_to_f32
from fastppo.kernels.fastmath import expf32
from fastppo.kernels.rng import box_muller32, env_block, log32, normal_words, uniform53
from fastppo.kernels.squash import unsquash

# Storage kinds of the logits / parameters.
KIND_F32 = 0
KIND_F64 = 1
KIND_F16 = 2
KIND_BF16 = 3

# Small arithmetic helpers are IR-inlined (``inline``); everything a kernel
# does per chunk or per row is a separate compiled function (``kernel``) that
# Numba types and lowers once per signature and the serial and parallel builds
# share. Inlining the chunk bodies bought nothing measurable at 64 rows a call
# and cost about a minute of compile per parallel variant.

# Rows per chunk: a chunk's scratch (logits, weights, normals) stays in L1.
CHUNK = 64
# Chunks per parallel task; a task allocates its scratch once (per chunk, the
# allocations cost as much as the arithmetic at N = 4096). 512 rows a task
# still gives 8 tasks at N = 4096, 32 at the parallel threshold's sizes.
TASK = 8

_f32 = np.float32
_INF32 = _f32(np.inf)

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)

# |log_std| must stay below this: exp(+-700) is a normal float64 (exp overflows
# at 709.8), so std is positive and finite and (u - mean) / std is defined.
LOG_STD_LIMIT = 700.0

# The multi-discrete sampler takes arrays only (no byte-buffer entry).
ARRAYS = STORAGE[:2]

# (x, kind, mask, has_mask, offs, seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset,
#  deterministic, prevalidate, proto, act, logp) -> first bad env or -1
_CATEGORICAL_SIG = "i8(S_2, i8, u1_2, b1, i8_1, i8, i8, i8, i8, i8, b1, b1, F_1, i8_1w, f4_1w)"


@inline
def load_row(x, i, kind, col0, n, r):  # pragma: no cover - compiled
    """``r[:n] = float64(x[i, col0:col0+n])``, decoding float16/bfloat16 bits.

    The branch on ``kind`` sits outside the loops; every branch type-checks
    for every storage dtype (integer casts of a float are legal), and only
    the one matching the dtype runs.
    """
    if kind == KIND_F16:
        for j in range(n):
            r[j] = f16_to_f32(x[i, col0 + j])
    elif kind == KIND_BF16:
        for j in range(n):
            r[j] = bf16_to_f32(x[i, col0 + j])
    else:
        for j in range(n):
            r[j] = x[i, col0 + j]


@inline
def _first_bad(bad):  # pragma: no cover - compiled
    for c in range(bad.shape[0]):
        if bad[c] >= 0:
            return bad[c]
    return -1


@kernel("void(i8, i8, i8, i8, i8, i8, i8, f8_1w)")
def chunk_uniforms(seed_lo, seed_hi, ctr_lo, ctr_hi, env0, rows, n_uni, u):  # pragma: no cover
    """``u[k * CHUNK + i]`` = uniform ``k`` of env ``env0 + i``, for ``i < rows``, ``k < n_uni``.

    Rows are the inner loop: the Philox rounds of different envs are
    independent, so LLVM runs several envs per vector register. Compiled on
    its own: it does not depend on the logits' dtype, so every sampler
    variant shares one compile of the (large) unrolled Philox.
    """
    for b in range((n_uni + 1) // 2):
        # views indexed from 0: no negative-index wrap for LLVM to keep
        u0 = u[2 * b * CHUNK : (2 * b + 1) * CHUNK]
        u1 = u[(2 * b + 1) * CHUNK : (2 * b + 2) * CHUNK]
        for i in range(rows):
            w0, w1, w2, w3 = env_block(seed_lo, seed_hi, ctr_lo, ctr_hi, env0 + i, b)
            u0[i] = uniform53(w0, w1)
            u1[i] = uniform53(w2, w3)


@kernel("Tup(i8, f8)(F_1, f4_1w, i8, i8, f8, b1)")
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
        e[j] = expf32(np.float32(r[j] - m))
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


@kernel("b1(S_2, i8, i8, u1_2, b1, F_1w)", variants=ARRAYS)
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


@kernel("i8(S_1, i8, u1_1, b1, i8, i8, i8, u1_1w)", variants=STORAGE)
def _chunk_valid(xf, kind, mf, has_mask, width, i0, rows, F):  # pragma: no cover - compiled
    """How many leading rows of a chunk are valid (``rows`` when all are).

    The ``out=`` path's validation pass, run over every chunk before the
    first write; the verdict is :func:`_chunk_load`'s (a NaN/+inf anywhere in
    the row, masked or not, or no allowed action), reached without the
    transpose and the maxima: the chunk's rows are contiguous in ``xf``, so
    one flat loop over ``rows * width`` values marks each entry in ``F``
    (uint8 scratch) with bit 1 if it is allowed and above ``-inf`` and bit 2
    if it is NaN/+inf; a row is valid when the OR of its marks is 1.
    """
    base = i0 * width
    cnt = rows * width
    one = np.uint8(1)
    two = np.uint8(2)
    # one loop per (kind, mask) pair, as in _chunk_load, so each vectorises
    if kind == KIND_F16 and has_mask:
        for k in range(cnt):
            v = f16_to_f32(xf[base + k])
            F[k] = one * ((v > -_INF32) & (mf[base + k] != 0)) | two * (not (v < _INF32))
    elif kind == KIND_F16:
        for k in range(cnt):
            v = f16_to_f32(xf[base + k])
            F[k] = one * (v > -_INF32) | two * (not (v < _INF32))
    elif kind == KIND_BF16 and has_mask:
        for k in range(cnt):
            v = bf16_to_f32(xf[base + k])
            F[k] = one * ((v > -_INF32) & (mf[base + k] != 0)) | two * (not (v < _INF32))
    elif kind == KIND_BF16:
        for k in range(cnt):
            v = bf16_to_f32(xf[base + k])
            F[k] = one * (v > -_INF32) | two * (not (v < _INF32))
    elif has_mask:
        for k in range(cnt):
            v = xf[base + k]
            F[k] = one * ((v > -_INF32) & (mf[base + k] != 0)) | two * (not (v < _INF32))
    else:
        for k in range(cnt):
            v = xf[base + k]
            F[k] = one * (v > -_INF32) | two * (not (v < _INF32))
    for i in range(rows):
        o = i * width
        marks = np.uint8(0)
        for j in range(width):
            marks |= F[o + j]
        if marks != one:
            return i
    return rows


@kernel("i8(S_1, i8, u1_1, b1, i8, i8, i8, F_1w, F_1w, i8_1w)", variants=STORAGE)
def _chunk_load(xf, kind, mf, has_mask, width, i0, rows, R, M, A):  # pragma: no cover - compiled
    """Load one chunk of single-dimension categorical rows, envs in the vector lanes.

    The chunk's logits are decoded, masked and transposed to ``R[j * CHUNK +
    i]`` (action ``j``, row ``i``) in one pass, and the row maxima land in
    ``M``, so every later step (:func:`_chunk_sample`) runs over the chunk's
    rows in the inner loop: each row's max, float64 sum and inverse-CDF scan
    are vector lanes with no dependency chain between them (a row loop would
    wait on each add). Returns how many leading rows are valid (``rows`` when
    all are): a row is bad when it holds a NaN/+inf (masked or not) or allows
    no action.

    Compiled on its own (not IR-inlined): the serial and parallel builds of
    :func:`categorical` share it, and a call per chunk of 64 rows costs
    nothing measurable.
    """
    base = i0 * width
    # 1. decode, mask, transpose; a NaN/+inf (masked or not) marks its row
    #    in A (int64 scratch), a flag until the scan. Row views indexed from 0 and
    #    float32 constants keep the loads vectorised (about 2x faster).
    for i in range(rows):
        o = base + i * width
        xo = xf[o : o + width]
        mo = mf[o : o + width] if has_mask else mf[0:0]
        rb = False
        # one loop per (kind, mask) pair: a branch left in the loop body
        # keeps LLVM from vectorising it
        if kind == KIND_F16 and has_mask:
            for j in range(width):
                v = f16_to_f32(xo[j])
                rb |= not (v < _INF32)
                R[np.uint64(j * CHUNK + i)] = v if mo[j] != 0 else -_INF32
        elif kind == KIND_F16:
            for j in range(width):
                v = f16_to_f32(xo[j])
                rb |= not (v < _INF32)
                R[np.uint64(j * CHUNK + i)] = v
        elif kind == KIND_BF16 and has_mask:
            for j in range(width):
                v = bf16_to_f32(xo[j])
                rb |= not (v < _INF32)
                R[np.uint64(j * CHUNK + i)] = v if mo[j] != 0 else -_INF32
        elif kind == KIND_BF16:
            for j in range(width):
                v = bf16_to_f32(xo[j])
                rb |= not (v < _INF32)
                R[np.uint64(j * CHUNK + i)] = v
        elif has_mask:
            for j in range(width):
                v = xo[j]
                rb |= not (v < _INF32)
                R[np.uint64(j * CHUNK + i)] = v if mo[j] != 0 else -_INF32
        else:
            for j in range(width):
                v = xo[j]
                rb |= not (v < _INF32)
                R[np.uint64(j * CHUNK + i)] = v
        A[i] = rb
    # 2. row maxima; the first row with a NaN/+inf or nothing allowed. Loops
    #    index per-action views from 0, so LLVM sees no negative index to
    #    wrap and vectorises them.
    for i in range(rows):
        M[i] = R[i]
    for j in range(1, width):
        Rj = R[j * CHUNK : (j + 1) * CHUNK]
        for i in range(rows):
            # np.maximum (NaN-propagating; NaN rows are flagged anyway) is a
            # blend that is always stored. A select that keeps M[i] becomes a
            # masked store (vmaskmovps), microcoded and ~2x slower on AMD Zen.
            M[i] = np.maximum(M[i], Rj[i])
    for i in range(rows):
        if A[i] != 0 or M[i] == -np.inf:
            return i
    return rows


@kernel("void(i8, i8, i8, i8, f8_1, b1, F_1, f4_1w, F_1, f8_1w, f8_1w, f8_1w, i8_1w, i8_1w, f4_1w)")
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
            Ej[i] = expf32(np.float32(Rj[i] - M[i]))
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
    for i in range(n_ok):
        a = A[i]
        act[i0 + i] = a
        logp[i0 + i] = np.float64(R[a * CHUNK + i] - M[i]) - T[i]


@kernel_pair(_CATEGORICAL_SIG, variants=STORAGE)
def categorical(
    x,
    kind,
    mask,
    has_mask,
    offs,
    seed_lo,
    seed_hi,
    ctr_lo,
    ctr_hi,
    env_offset,
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
    seed_lo, seed_hi, ctr_lo, ctr_hi : 32-bit words of seed and counter.
    env_offset : global index of row 0 (its stream id).
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
            F = np.empty(CHUNK * width, dtype=np.uint8)
            for c in range(t * TASK, min(n_chunks, (t + 1) * TASK)):
                i0 = c * CHUNK
                rows = min(n, i0 + CHUNK) - i0
                n_ok = _chunk_valid(xf, kind, mf, has_mask, width, i0, rows, F)
                if n_ok < rows:
                    bad[c] = i0 + n_ok
        first = _first_bad(bad)
        if first >= 0:
            return first
    n_uni = 0 if deterministic else 1
    for t in numba.prange(n_tasks):
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
            chunk_uniforms(seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset + i0, rows, n_uni, u)
            n_ok = _chunk_load(xf, kind, mf, has_mask, width, i0, rows, R, M, A)
            _chunk_sample(width, i0, rows, n_ok, u, deterministic, R, E, M, S, C, T, A, act, logp)
            if n_ok < rows:
                bad[c] = i0 + n_ok
    return _first_bad(bad)


categorical_serial, categorical_parallel = categorical


@kernel_pair(_CATEGORICAL_SIG, variants=ARRAYS)
def multi_categorical(
    x,
    kind,
    mask,
    has_mask,
    offs,
    seed_lo,
    seed_hi,
    ctr_lo,
    ctr_hi,
    env_offset,
    deterministic,
    prevalidate,
    proto,
    act,
    logp,
):  # pragma: no cover - compiled
    """Sample every env's (multi-)categorical action; returns -1 or the first bad env.

    Parameters
    ----------
    x : [N, W] float32, float64 or uint16 (float16/bfloat16 bits, see ``kind``)
        Logits of ``D = len(offs) - 1`` categorical dimensions laid side by
        side: dimension ``d`` owns columns ``offs[d]:offs[d+1]``.
    mask : [N, W] uint8, nonzero = allowed (ignored unless ``has_mask``).
    offs : [D + 1] int64 segment bounds.
    seed_lo, seed_hi, ctr_lo, ctr_hi : 32-bit words of seed and counter.
    env_offset : global index of row 0 (its stream id).
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
        first = _first_bad(bad)
        if first >= 0:
            return first
    n_uni = 0 if deterministic else n_dim
    for c in numba.prange(n_chunks):
        r = np.empty(width, dtype=proto.dtype)
        e = np.empty(width, dtype=np.float32)
        u = np.zeros(CHUNK * (n_dim + 1), dtype=np.float64)
        i0 = c * CHUNK
        rows = min(n, i0 + CHUNK) - i0
        chunk_uniforms(seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset + i0, rows, n_uni, u)
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
    return _first_bad(bad)


multi_categorical_serial, multi_categorical_parallel = multi_categorical


@inline
def load1(x, i, j, kind):  # pragma: no cover - compiled
    """``float64(x[i, j])``, decoding float16/bfloat16 bits per ``kind``."""
    if kind == KIND_F16:
        return np.float64(f16_to_f32(x[i, j]))
    if kind == KIND_BF16:
        return np.float64(bf16_to_f32(x[i, j]))
    return np.float64(x[i, j])


@inline
def _cols_below(x, col, a_dim, kind, i0, i1, bound):  # pragma: no cover - compiled
    """True if every ``|x[i0:i1, col:col+a_dim]| < bound`` (so no NaN, and no inf).

    The flag is OR-reduced without branches so the scan vectorises; when the
    columns are the whole rows (the array path) it is one flat loop.
    """
    w = x.shape[1]
    bad = False
    if col == 0 and w == a_dim:
        xf = x.reshape(x.shape[0] * w)
        if kind == KIND_F16:
            for k in range(i0 * w, i1 * w):
                bad |= not (abs(f16_to_f32(xf[k])) < bound)
        elif kind == KIND_BF16:
            for k in range(i0 * w, i1 * w):
                bad |= not (abs(bf16_to_f32(xf[k])) < bound)
        else:
            for k in range(i0 * w, i1 * w):
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


@kernel_pair(
    "i8(S_2, i8, S_2, i8, i8, i8, b1, i8, i8, i8, i8, i8, b1, b1, f4_2w, f4_1w)", variants=STORAGE
)
def gaussian(
    pm,
    mcol,
    pl,
    lcol,
    a_dim,
    kind,
    shared_std,
    seed_lo,
    seed_hi,
    ctr_lo,
    ctr_hi,
    env_offset,
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
    bad = np.full(n_tasks, -1, dtype=np.int64)
    if shared_std and n > 0:
        # one row of log-stds for every env: checked once
        bad0 = _gaussian_rows_ok(pl, lcol, pl, lcol, a_dim, kind, True, 0, 1, LOG_STD_LIMIT)
        if bad0 >= 0:
            return 0
    for t in numba.prange(n_tasks):
        i0 = t * TASK * CHUNK
        bad[t] = _gaussian_rows_ok(
            pm, mcol, pl, lcol, a_dim, kind, shared_std, i0, min(n, i0 + TASK * CHUNK), np.inf
        )
    first = _first_bad(bad)
    if first >= 0:
        return first
    # a state-independent std: one exp per dimension per call
    ls0 = np.empty(a_dim, dtype=np.float64)
    sd0 = np.empty(a_dim, dtype=np.float64)
    if shared_std:
        for j in range(a_dim):
            ls0[j] = load1(pl, 0, lcol + j, kind)
            sd0[j] = math.exp(ls0[j])
    for t in numba.prange(n_tasks):
        _gaussian_task(
            pm,
            mcol,
            pl,
            lcol,
            a_dim,
            kind,
            shared_std,
            seed_lo,
            seed_hi,
            ctr_lo,
            ctr_hi,
            env_offset,
            squash,
            deterministic,
            act,
            logp,
            t,
            ls0,
            sd0,
        )
    return -1


@kernel("void(i8, i8, i8, i8, i8, i8, i8, i4_1w, i4_1w, f4_1w, f4_1w)")
def chunk_normals(
    seed_lo, seed_hi, ctr_lo, ctr_hi, env0, rows, n_pair, ia, ib, zc, zs
):  # pragma: no cover - compiled
    """Box-Muller pairs ``p < n_pair`` of envs ``env0 + i``, ``i < rows``: cosines in
    ``zc[p * CHUNK + i]``, sines in ``zs[p * CHUNK + i]`` (``ia``/``ib`` scratch).

    Philox for every (block, env) of the chunk with envs innermost, then
    Box-Muller as a separate pass: both loops vectorise (8 float32 normals per
    instruction), the Philox one on 4 envs per register. All four words of a
    block are used: pair 2b from (w0, w1), pair 2b + 1 from (w2, w3).
    Compiled on its own, shared by every Gaussian sampler variant.
    """
    n_blk = (n_pair + 1) // 2
    # views indexed from 0: no negative-index wrap for LLVM to keep
    for b in range(n_blk):
        ia0 = ia[2 * b * CHUNK : (2 * b + 1) * CHUNK]
        ib0 = ib[2 * b * CHUNK : (2 * b + 1) * CHUNK]
        ia1 = ia[(2 * b + 1) * CHUNK : (2 * b + 2) * CHUNK]
        ib1 = ib[(2 * b + 1) * CHUNK : (2 * b + 2) * CHUNK]
        for i in range(rows):
            w0, w1, w2, w3 = env_block(seed_lo, seed_hi, ctr_lo, ctr_hi, env0 + i, b)
            ia0[i], ib0[i] = normal_words(w0, w1)
            ia1[i], ib1[i] = normal_words(w2, w3)
    for p in range(n_pair):
        iap = ia[p * CHUNK : (p + 1) * CHUNK]
        ibp = ib[p * CHUNK : (p + 1) * CHUNK]
        zcp = zc[p * CHUNK : (p + 1) * CHUNK]
        zsp = zs[p * CHUNK : (p + 1) * CHUNK]
        for i in range(rows):
            zcp[i], zsp[i] = box_muller32(iap[i], ibp[i])


@kernel(
    "void(S_2, i8, S_2, i8, i8, i8, b1, i8, i8, i8, i8, i8, b1, b1, f4_2w, f4_1w, i8, f8_1, f8_1)",
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
    seed_lo,
    seed_hi,
    ctr_lo,
    ctr_hi,
    env_offset,
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
    ia = np.empty(n_blk * 2 * CHUNK, dtype=np.int32)
    ib = np.empty(n_blk * 2 * CHUNK, dtype=np.int32)
    zc = np.empty(n_blk * 2 * CHUNK, dtype=np.float32)
    zs = np.empty(n_blk * 2 * CHUNK, dtype=np.float32)
    lacc = np.empty(CHUNK, dtype=np.float64)
    for c in range(t * TASK, min(n_chunks, (t + 1) * TASK)):
        i0 = c * CHUNK
        rows = min(n, i0 + CHUNK) - i0
        if deterministic:
            zc[:] = 0.0
            zs[:] = 0.0
        else:
            chunk_normals(
                seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset + i0, rows, n_pair, ia, ib, zc, zs
            )
        # then dimension by dimension with envs innermost: the normals are
        # read contiguously and the log-density accumulates per env in
        # ``lacc`` (same j order as a row loop, so the same float64 sums).
        lacc[:] = 0.0
        for j in range(a_dim):
            zsrc = zs if j & 1 else zc
            off = (j >> 1) * CHUNK
            if shared_std and not squash:
                ls = ls0[j]
                sd = sd0[j]
                zv = zsrc[off : off + CHUNK]
                if kind == KIND_F32 or kind == KIND_F64:  # no decode: a tight loop
                    actj = act[i0 : i0 + rows, j]
                    pmj = pm[i0 : i0 + rows, mcol + j]
                    for i in range(rows):
                        actj[i] = np.float64(pmj[i]) + sd * np.float64(zv[i])
                else:
                    for i in range(rows):
                        zj = np.float64(zv[i])
                        act[i0 + i, j] = load1(pm, i0 + i, mcol + j, kind) + sd * zj
                for i in range(rows):
                    zj = np.float64(zv[i])
                    lacc[i] += -0.5 * zj * zj - ls - _HALF_LOG_2PI
            else:
                for i in range(rows):
                    ii = i0 + i
                    zj = np.float64(zsrc[off + i])
                    if shared_std:
                        ls = ls0[j]
                        sd = sd0[j]
                    else:
                        ls = load1(pl, ii, lcol + j, kind)
                        sd = math.exp(ls)
                    mu = load1(pm, ii, mcol + j, kind)
                    u = mu + sd * zj
                    if squash:
                        # the density of the float32 action returned, exactly as
                        # gaussian_logp_entropy and the MLP head evaluate it
                        a = np.float32(math.tanh(u))
                        act[ii, j] = a
                        u, ld = unsquash(np.float64(a))
                        zj = (u - mu) / sd
                        lacc[i] += -0.5 * zj * zj - ls - _HALF_LOG_2PI - ld
                    else:
                        act[ii, j] = u
                        lacc[i] += -0.5 * zj * zj - ls - _HALF_LOG_2PI
        for i in range(rows):
            logp[i0 + i] = lacc[i]


gaussian_serial, gaussian_parallel = gaussian


@kernel_pair("i8(F_2, u1_2, b1, i8_1, F_1w, F_1w)")
def categorical_logp_entropy(x, mask, has_mask, act, logp, ent):  # pragma: no cover
    """Log-prob of stored actions and entropy per env; returns -1 or the first bad env.

    A row is bad when it holds a NaN/+inf logit, allows no action, or its
    action is out of range or masked. Float64 throughout (libm exp/log):
    ``lse = m + log(sum_j exp(l_j - m))``, ``logp = l_a - lse``,
    ``H = log(s) - sum_j p_j (l_j - m)`` over allowed ``j`` with ``p_j > 0``
    (a masked logit contributes nothing, never ``0 * -inf``).
    """
    n = x.shape[0]
    width = x.shape[1]
    n_chunks = (n + CHUNK - 1) // CHUNK
    bad = np.full(n_chunks, -1, dtype=np.int64)
    for c in numba.prange(n_chunks):
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            a = act[i]
            ok = 0 <= a < width
            if ok:
                ok = x[i, a] != -np.inf and (not has_mask or mask[i, a] != 0)
            for j in range(width):
                v = x[i, j]
                if v != v or v == np.inf:
                    ok = False
            if not ok:
                bad[c] = i
                break
    first = _first_bad(bad)
    if first >= 0:
        return first
    for c in numba.prange(n_chunks):
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            m = -np.inf
            for j in range(width):
                if (not has_mask or mask[i, j] != 0) and x[i, j] > m:
                    m = np.float64(x[i, j])
            s = 0.0
            w = 0.0
            for j in range(width):
                if not has_mask or mask[i, j] != 0:
                    d = x[i, j] - m
                    p = math.exp(d)
                    if p > 0.0:
                        s += p
                        w += p * d
            ls = math.log(s)
            logp[i] = (x[i, act[i]] - m) - ls
            ent[i] = ls - w / s
    return -1


categorical_logp_entropy_serial, categorical_logp_entropy_parallel = categorical_logp_entropy


@kernel_pair("void(F_2, F_2, b1, F_2, b1, F_1w, F_1w)")
def gaussian_logp_entropy(mean, log_std, shared_std, act, squash, logp, ent):  # pragma: no cover
    """Diagonal-Gaussian log-prob of stored actions and (pre-squash) entropy.

    ``logp = sum_j (-((a_j - mu_j) / sigma_j)^2 / 2 - log_std_j - log(2 pi)/2)``;
    with ``squash``, ``u = atanh(a)`` replaces ``a`` and ``log(1 - tanh(u)^2)``
    is subtracted per dimension (one clip limit and log-det: ``kernels.squash``).
    ``ent = sum_j (log_std_j + 1/2 + log(2 pi)/2)``. Inputs are
    validated by the caller.
    """
    n = mean.shape[0]
    a_dim = mean.shape[1]
    for i in numba.prange(n):
        # prange indices are unsigned: keep the row index int64 so the
        # branch below does not unify int64 with uint64 (-> float64).
        il = np.int64(0) if shared_std else np.int64(i)
        total = 0.0
        h = 0.0
        for j in range(a_dim):
            ls = np.float64(log_std[il, j])
            a = float(act[i, j])
            ld = 0.0
            if squash:
                a, ld = unsquash(a)
            z = (a - mean[i, j]) * math.exp(-ls)
            lp = -0.5 * z * z - ls - _HALF_LOG_2PI - ld
            total += lp
            h += ls + 0.5 + _HALF_LOG_2PI
        logp[i] = total
        ent[i] = h


gaussian_logp_entropy_serial, gaussian_logp_entropy_parallel = gaussian_logp_entropy
