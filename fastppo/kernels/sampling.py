"""Batched action sampling kernels: categorical (plain, masked, multi) and Gaussian.

Kernels return -1 or the first bad env index (NaN or +inf logits, rows with no
allowed action, non-finite Gaussian parameters), and the public layer raises
naming it. When the caller supplied ``out=`` buffers a validation pass runs
first, so nothing is written on error; with fresh outputs the same checks ride
along the sampling pass (the partial outputs are dropped). Work runs over
chunks of ``CHUNK`` rows, ``prange`` over chunks in the parallel build: rows
are independent and each draws from its own counter-based stream
(:mod:`fastppo.kernels.rng`), so results are bit-identical whatever the thread
count, the chunking or the split of a batch into slices. A chunk's uniforms
are generated first, envs in the inner loop, so Philox vectorises; a
single-dimension chunk is decoded, masked, checked and exponentiated in flat
loops over its contiguous ``rows x A`` logits.

Inputs arrive in their storage type: float32/float64 arrays, or uint16 bit
patterns of float16/bfloat16 (``kind``), so the byte-buffer samplers decode in
the same pass that samples and no float32 copy of the logits is ever made.

Categorical (inverse CDF, one uniform per env and dimension)
------------------------------------------------------------
With ``m = max_j l_j`` over allowed actions, ``e_j = exp32(l_j - m)`` (0 for a
masked action), ``s = sum_j e_j`` accumulated in float64 in action order, and
``u`` the env's uniform, the action is the first ``j`` with
``u * s < e_0 + ... + e_j``. If rounding lets ``u * s`` reach the total, the
last action with ``e_j > 0`` is taken, so a masked or out-of-range action is
never returned. The log-probability is ``(l_a - m) - log(s)`` in float64,
rounded to float32.

``exp32`` is a float32 exponential (Cody-Waite reduction by ln 2, the degree-5
Cephes ``expf`` polynomial, the power of two built from bits) that LLVM
vectorises; its error is within 2 ulp of float32, i.e. relative errors of
``1e-7`` in the probabilities, far below sampling noise. Below ``-87`` it
returns 0 (probability ratios under ``1.6e-38``).

Gaussian (Box-Muller)
---------------------
``z`` from :func:`fastppo.reference.rng.env_normals`; ``u = mean + exp(log_std)
* z``; ``log p = sum_j (-z_j^2 / 2 - log_std_j - log(2 pi) / 2)``. With
``squash``, ``a = tanh(u)`` and ``log p -= sum_j log(1 - tanh(u_j)^2)``,
computed as ``2 (log 2 - u - softplus(-2u))`` which stays finite where
``tanh(u)`` rounds to 1 (Haarnoja et al. 2018, arXiv:1801.01290, App. C).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fastppo._jit import inline, kernel, kernel_pair
from fastppo.kernels.codec import bf16_to_f32, f16_to_f32
from fastppo.kernels.rng import box_muller, env_block, uniform53

# Storage kinds of the logits / parameters.
KIND_F32 = 0
KIND_F64 = 1
KIND_F16 = 2
KIND_BF16 = 3

# The hot single-dimension path is IR-inlined (``inline``: ~10-20% faster);
# the multi-dimension and validation helpers are separate compiled functions
# (``kernel``) that Numba types and lowers once, shared by the serial and
# parallel builds, which keeps the cold compile of the kernels down.

# Rows per parallel task: large enough that a task's scratch allocation and
# scheduling are amortised, small enough to balance 2-64 threads at N=4096.
CHUNK = 64

_f32 = np.float32
_LOG2E = _f32(1.44269504088896341)
_C1 = _f32(0.693359375)  # ln 2 split: C1 + C2 = ln 2, C1 has 9 significant bits
_C2 = _f32(-2.12194440e-4)
_SHIFT = _f32(12582912.0)  # 1.5 * 2**23: adding it rounds to an integer
_P0 = _f32(1.9875691500e-4)
_P1 = _f32(1.3981999507e-3)
_P2 = _f32(8.3334519073e-3)
_P3 = _f32(4.1665795894e-2)
_P4 = _f32(1.6666665459e-1)
_P5 = _f32(5.0000001201e-1)
_ONE = _f32(1.0)
_ZERO = _f32(0.0)
_INF32 = _f32(np.inf)
_LO = _f32(-87.0)
_I127 = np.int32(127)
_I23 = np.int32(23)

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG2 = math.log(2.0)


@inline
def exp32(x):  # pragma: no cover - compiled
    """float32 ``exp(x)`` for ``x <= 0`` (``-inf`` gives 0), branch-free so it vectorises.

    ``x = k ln2 + r`` with ``|r| <= ln2 / 2``; ``exp(r)`` by the Cephes
    ``expf`` polynomial; ``2**k`` assembled as float32 bits. Every operation
    is a float32 IEEE operation, so :mod:`fastppo.reference.sampling`
    reproduces it bit for bit in numpy.
    """
    xc = x if x > _LO else _LO
    kd = xc * _LOG2E + _SHIFT
    ki = np.float32(kd).view(np.int32)
    k = kd - _SHIFT
    r = xc - k * _C1
    r = r - k * _C2
    z = r * r
    y = _P0 * r + _P1
    y = y * r + _P2
    y = y * r + _P3
    y = y * r + _P4
    y = y * r + _P5
    y = y * z + r + _ONE
    # the low bits of kd hold k + 2**22 (two's complement); only k's low bits
    # matter after the shift, and -126 <= k <= 0 keeps the exponent normal.
    sc = np.int32((ki + _I127) << _I23).view(np.float32)
    return y * sc if x > _LO else _ZERO


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


@inline
def chunk_uniforms(seed_lo, seed_hi, ctr_lo, ctr_hi, env0, rows, n_uni, u):  # pragma: no cover
    """``u[k * CHUNK + i]`` = uniform ``k`` of env ``env0 + i``, for ``i < rows``, ``k < n_uni``.

    Rows are the inner loop: the Philox rounds of different envs are
    independent, so LLVM runs several envs per vector register.
    """
    for b in range((n_uni + 1) // 2):
        for i in range(rows):
            w0, w1, w2, w3 = env_block(seed_lo, seed_hi, ctr_lo, ctr_hi, env0 + i, b)
            u[2 * b * CHUNK + i] = uniform53(w0, w1)
            u[(2 * b + 1) * CHUNK + i] = uniform53(w2, w3)


@kernel
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
        e[j] = exp32(np.float32(r[j] - m))
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
    return a - lo, np.float64(r[a] - m) - math.log(s)


@kernel
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


@inline
def _chunk_prepare(xf, kind, mf, has_mask, width, i0, rows, R, M):  # pragma: no cover
    """Decode, mask and check one chunk of single-dimension rows; row maxima into ``M``.

    The chunk's rows are contiguous in ``xf`` (the logits, flattened), so the
    decode, the mask and the NaN/+inf check run as flat loops over ``rows *
    width`` values that LLVM vectorises without a per-row remainder. Returns
    how many leading rows are valid (``rows`` when all are).
    """
    base = i0 * width
    cnt = rows * width
    if kind == KIND_F16:
        for k in range(cnt):
            R[k] = f16_to_f32(xf[base + k])
    elif kind == KIND_BF16:
        for k in range(cnt):
            R[k] = bf16_to_f32(xf[base + k])
    else:
        for k in range(cnt):
            R[k] = xf[base + k]
    bad = False
    if has_mask:
        for k in range(cnt):
            v = R[k]
            bad |= not (v < _INF32)
            R[k] = v if mf[base + k] != 0 else -_INF32
    else:
        for k in range(cnt):
            bad |= not (R[k] < _INF32)
    n_ok = rows
    if bad:  # rare: find the first row holding a NaN/+inf (before masking)
        for i in range(rows):
            if n_ok < rows:
                break
            for j in range(width):
                v = xf[base + i * width + j]
                if kind == KIND_F16:
                    w = np.float64(f16_to_f32(v))
                elif kind == KIND_BF16:
                    w = np.float64(bf16_to_f32(v))
                else:
                    w = np.float64(v)
                if not (w < np.inf):
                    n_ok = i
                    break
    for i in range(n_ok):
        o = i * width
        m = R[o]
        for j in range(1, width):
            m = max(m, R[o + j])
        if m == -np.inf:
            n_ok = i
            break
        M[i] = m
    return n_ok


@inline
def _chunk_flat(
    xf, kind, mf, has_mask, width, i0, rows, u, deterministic, R, E, M, act, logp
):  # pragma: no cover
    """One chunk of single-dimension categorical rows, in flat passes.

    The chunk's rows are contiguous in ``xf`` (the logits, flattened), so
    decoding, masking, the NaN/+inf check and the ``exp`` run as flat loops
    over ``rows * width`` values that LLVM vectorises without a per-row
    remainder; only the max, the sum and the inverse-CDF scan go row by row.
    Same arithmetic, in the same order, as :func:`_sample_segment`. Returns
    -1, or the first bad row (nothing of that row or later is written).
    """
    n_ok = _chunk_prepare(xf, kind, mf, has_mask, width, i0, rows, R, M)
    for i in range(n_ok):
        o = i * width
        m = M[i]
        for j in range(width):
            E[o + j] = np.float32(R[o + j] - m)
    for k in range(n_ok * width):
        E[k] = exp32(E[k])
    for i in range(n_ok):
        o = i * width
        m = M[i]
        s = 0.0
        for j in range(width):
            s += E[o + j]
        if deterministic:
            a = 0
            for j in range(width):
                if R[o + j] == m:
                    a = j
                    break
        else:
            t = u[i] * s
            c = 0.0
            last = 0
            a = -1
            for j in range(width):
                ej = E[o + j]
                if ej > 0.0:
                    last = j
                c += ej
                if t < c:
                    a = j
                    break
            if a < 0:
                a = last
        act[i0 + i] = a
        logp[i0 + i] = np.float64(R[o + a] - m) - math.log(s)
    return -1 if n_ok == rows else i0 + n_ok


@kernel_pair
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
    bad = np.full(n_chunks, -1, dtype=np.int64)
    xf = x.reshape(n * width)
    mf = mask.reshape(mask.shape[0] * mask.shape[1])
    if prevalidate:
        for c in numba.prange(n_chunks):
            R = np.empty(CHUNK * width, dtype=proto.dtype)
            M = np.empty(CHUNK, dtype=proto.dtype)
            i0 = c * CHUNK
            rows = min(n, i0 + CHUNK) - i0
            n_ok = _chunk_prepare(xf, kind, mf, has_mask, width, i0, rows, R, M)
            if n_ok < rows:
                bad[c] = i0 + n_ok
        first = _first_bad(bad)
        if first >= 0:
            return first
    n_uni = 0 if deterministic else 1
    for c in numba.prange(n_chunks):
        R = np.empty(CHUNK * width, dtype=proto.dtype)
        E = np.empty(CHUNK * width, dtype=np.float32)
        M = np.empty(CHUNK, dtype=proto.dtype)
        u = np.zeros(2 * CHUNK, dtype=np.float64)
        i0 = c * CHUNK
        rows = min(n, i0 + CHUNK) - i0
        chunk_uniforms(seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset + i0, rows, n_uni, u)
        bad[c] = _chunk_flat(
            xf, kind, mf, has_mask, width, i0, rows, u, deterministic, R, E, M, act, logp
        )
    return _first_bad(bad)


categorical_serial, categorical_parallel = categorical


@kernel_pair
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


@kernel
def _gaussian_row_ok(pm, pl, i, il, kind, mcol, lcol, a_dim, r):  # pragma: no cover
    """False if row ``i``'s mean or log-std holds a NaN or +-inf (branch-free OR)."""
    load_row(pm, i, kind, mcol, a_dim, r)
    bad = False
    for j in range(a_dim):
        bad |= not (abs(r[j]) < np.inf)
    load_row(pl, il, kind, lcol, a_dim, r)
    for j in range(a_dim):
        bad |= not (abs(r[j]) < np.inf)
    return not bad


@inline
def _softplus(x):  # pragma: no cover - compiled
    """``log(1 + exp(x))`` without overflow."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@kernel_pair
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

    Normal ``j`` of an env is Box-Muller pair ``j // 2`` of its stream (block
    ``j // 2``), cosine for even ``j``, sine for odd ``j``.
    """
    n = pm.shape[0]
    n_chunks = (n + CHUNK - 1) // CHUNK
    bad = np.full(n_chunks, -1, dtype=np.int64)
    for c in numba.prange(n_chunks):
        r = np.empty(a_dim, dtype=np.float64)
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            il = 0 if shared_std else i
            if not _gaussian_row_ok(pm, pl, i, il, kind, mcol, lcol, a_dim, r):
                bad[c] = i
                break
    first = _first_bad(bad)
    if first >= 0:
        return first
    n_pair = (a_dim + 1) // 2
    n_uni = 0 if deterministic else 2 * n_pair
    for c in numba.prange(n_chunks):
        mu = np.empty(a_dim, dtype=np.float64)
        ls = np.empty(a_dim, dtype=np.float64)
        sd = np.empty(a_dim, dtype=np.float64)
        uu = np.zeros(CHUNK * 2 * n_pair, dtype=np.float64)
        z = np.zeros(CHUNK * 2 * n_pair, dtype=np.float64)
        i0 = c * CHUNK
        rows = min(n, i0 + CHUNK) - i0
        # uniforms, then normals, for the whole chunk with envs innermost, so
        # the loops are free to vectorise; Box-Muller is plain arithmetic (no
        # libm calls), about 1.5x faster than math.log/cos/sin even scalar.
        chunk_uniforms(seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset + i0, rows, n_uni, uu)
        if not deterministic:
            for k in range(n_pair * CHUNK):
                b = k // CHUNK
                kr = k - b * CHUNK
                z0, z1 = box_muller(uu[2 * b * CHUNK + kr], uu[(2 * b + 1) * CHUNK + kr])
                z[2 * b * CHUNK + kr] = z0
                z[(2 * b + 1) * CHUNK + kr] = z1
        if shared_std:  # a state-independent std: one exp per dimension per chunk
            load_row(pl, 0, kind, lcol, a_dim, ls)
            for j in range(a_dim):
                sd[j] = math.exp(ls[j])
        for i in range(i0, i0 + rows):
            load_row(pm, i, kind, mcol, a_dim, mu)
            if not shared_std:
                load_row(pl, i, kind, lcol, a_dim, ls)
                for j in range(a_dim):
                    sd[j] = math.exp(ls[j])
            total = 0.0
            for j in range(a_dim):
                zj = z[j * CHUNK + i - i0]
                u = mu[j] + sd[j] * zj
                lp = -0.5 * zj * zj - ls[j] - _HALF_LOG_2PI
                if squash:
                    lp -= 2.0 * (_LOG2 - u - _softplus(-2.0 * u))
                    u = math.tanh(u)
                act[i, j] = u
                total += lp
            logp[i] = total
    return -1


gaussian_serial, gaussian_parallel = gaussian


@kernel_pair
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


@kernel_pair
def gaussian_logp_entropy(mean, log_std, shared_std, act, squash, logp, ent):  # pragma: no cover
    """Diagonal-Gaussian log-prob of stored actions and (pre-squash) entropy.

    ``logp = sum_j (-((a_j - mu_j) / sigma_j)^2 / 2 - log_std_j - log(2 pi)/2)``;
    with ``squash``, ``u = atanh(a)`` (``a`` clipped to ``+-(1 - 2**-24)``)
    replaces ``a`` and ``2 (log 2 - u - softplus(-2u))`` is subtracted per
    dimension. ``ent = sum_j (log_std_j + 1/2 + log(2 pi)/2)``. Inputs are
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
            if squash:
                lim = 1.0 - 5.960464477539063e-08
                a = math.atanh(min(max(a, -lim), lim))
            z = (a - mean[i, j]) * math.exp(-ls)
            lp = -0.5 * z * z - ls - _HALF_LOG_2PI
            if squash:
                lp -= 2.0 * (_LOG2 - a - _softplus(-2.0 * a))
            total += lp
            h += ls + 0.5 + _HALF_LOG_2PI
        logp[i] = total
        ent[i] = h


gaussian_logp_entropy_serial, gaussian_logp_entropy_parallel = gaussian_logp_entropy
