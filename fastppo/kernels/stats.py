"""Running-statistics kernels: blocked two-pass batch moments and Chan's merge.

The batch ``x`` is a C-contiguous ``[rows, features]`` float32/float64 array; all
arithmetic is float64. Rows are cut into fixed blocks of ``rows_per_block`` rows
(a function of the feature count only, never of the thread count). Each block
gets its moments by the corrected two-pass algorithm; the blocks are then merged
in block order with Chan et al.'s pairwise update, so the serial and the
parallel build do the same operations in the same order and agree bit for bit.

The running state is ``(count, mean, var)``: ``mean``/``var`` are float64
``[features]`` arrays updated in place and the exact count lives in Python (an
int, which never overflows); kernels receive it as a float64 only to form the
merge weights ``n_a / n`` and ``n_b / n``, where a relative rounding of 1e-16 is
harmless.

References
----------
Chan, Golub & LeVeque (1979/1983), "Updating formulae and a pairwise algorithm
for computing sample variances" / "Algorithms for computing the sample variance:
analysis and recommendations", The American Statistician 37(3).
Welford (1962), "Note on a method for calculating corrected sums of squares and
products", Technometrics 4(3).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fastppo._jit import inline, kernel_pair

# A block of this many elements (32 KiB of float32, 64 KiB of float64) stays in
# L1/L2 between the two passes, so the second pass costs no memory traffic.
BLOCK_ELEMENTS = 8192
# Without a mask, ``rows_per_super`` consecutive rows are summed as one flat run
# of about this many elements into as many accumulators, then folded: a batch
# with few features (returns have one) still runs a long, vectorisable inner
# loop instead of a loop of length 1 per row.
SUPER_WIDTH = 64


def layout(n_features: int) -> tuple[int, int]:
    """``(rows_per_super, rows_per_block)`` for a batch with ``n_features`` columns.

    Depends on the feature count only, so every build and every thread count
    cuts a batch the same way. ``rows_per_block`` is a multiple of
    ``rows_per_super``.
    """
    d = max(1, n_features)
    m = max(1, SUPER_WIDTH // d)
    return m, max(m, (BLOCK_ELEMENTS // d) // m * m)


@inline
def _merge_finite(count_a, mean_a, var_a, n_b, mean_b, m2_b):  # pragma: no cover - compiled
    """Whether :func:`_merge_state` would store finite values (a merge of two
    finite states still overflows when the means are near +-1e300)."""
    if count_a == 0.0:
        return math.isfinite(m2_b / n_b)
    tot = count_a + n_b
    w_a = count_a / tot
    w_b = n_b / tot
    delta = mean_b - mean_a
    return math.isfinite(mean_a + delta * w_b) and math.isfinite(
        var_a * w_a + (m2_b / n_b) * w_b + delta * delta * (w_a * w_b)
    )


@inline
def _merge_state(count_a, mean, var, n_b, mean_b, m2_b, j):  # pragma: no cover - compiled
    # Chan et al. in variance form: with w_a = n_a/n and w_b = n_b/n,
    # mean = mean_a + delta*w_b and var = var_a*w_a + var_b*w_b + delta^2*w_a*w_b.
    # The weights stay in [0, 1], so nothing overflows however large n_a grows.
    if count_a == 0.0:
        # copy, so a first update reproduces the batch moments exactly
        mean[j] = mean_b
        var[j] = m2_b / n_b
    else:
        tot = count_a + n_b
        w_a = count_a / tot
        w_b = n_b / tot
        delta = mean_b - mean[j]
        mean[j] += delta * w_b
        var[j] = var[j] * w_a + (m2_b / n_b) * w_b + delta * delta * (w_a * w_b)


@inline
def _block_moments(x, xf, valid, masked, r0, r1, m, s, dv, q):  # pragma: no cover - compiled
    # Moments of rows [r0, r1): on return s[:D] holds the mean and q[:D] the
    # sum of squared deviations (corrected two-pass); the count is returned.
    # s, dv, q are zeroed scratch of width m*D.
    n_feat = x.shape[1]
    w = m * n_feat
    if masked:
        n = 0
        for r in range(r0, r1):
            if valid[r] != 0:
                n += 1
                for j in range(n_feat):
                    s[j] += x[r, j]
    else:
        n = r1 - r0
        n_sup = n // m
        for u in range(n_sup):
            # a slice per super-row keeps the index a plain range variable,
            # which Numba knows is non-negative: no wraparound test, so LLVM
            # vectorises the loop
            off = (r0 + u * m) * n_feat
            xs = xf[off : off + w]
            for k in range(w):
                s[k] += xs[k]
        for r in range(r0 + n_sup * m, r1):
            for j in range(n_feat):
                s[j] += x[r, j]
        for u in range(1, m):
            for j in range(n_feat):
                s[j] += s[u * n_feat + j]
    if n == 0:
        return 0
    inv = 1.0 / n
    for j in range(n_feat):
        s[j] *= inv
    if masked:
        for r in range(r0, r1):
            if valid[r] != 0:
                for j in range(n_feat):
                    dev = x[r, j] - s[j]
                    dv[j] += dev
                    q[j] += dev * dev
    else:
        for k in range(n_feat, w):
            s[k] = s[k - n_feat]  # the mean tiled across the super-row
        n_sup = n // m
        for u in range(n_sup):
            off = (r0 + u * m) * n_feat
            xs = xf[off : off + w]
            for k in range(w):
                dev = xs[k] - s[k]
                dv[k] += dev
                q[k] += dev * dev
        for r in range(r0 + n_sup * m, r1):
            for j in range(n_feat):
                dev = x[r, j] - s[j]
                dv[j] += dev
                q[j] += dev * dev
        for u in range(1, m):
            for j in range(n_feat):
                dv[j] += dv[u * n_feat + j]
                q[j] += q[u * n_feat + j]
    for j in range(n_feat):
        # Corrected two-pass: sum(dev) is zero in exact arithmetic, so
        # sum(dev)^2/n removes the rounding error of the block mean.
        c = q[j] - dv[j] * dv[j] * inv
        q[j] = c if c > 0.0 else 0.0
    return n


@kernel_pair("i8(F_2, u1_1, i8, i8, f8, f8_1w, f8_1w)")
def _update(x, valid, rows_per_super, rows_per_block, count_a, mean, var):  # pragma: no cover
    """Fold the valid rows of ``x`` into ``(count_a, mean, var)``.

    Parameters
    ----------
    x : float32/float64 [R, D], C-contiguous, R >= 1
    valid : uint8 [R] (nonzero = row counts) or [0] for "all rows"
    rows_per_super, rows_per_block : int, from :func:`layout`
    count_a : float64, the state's count before the update
    mean, var : float64 [D], the state, updated in place

    Returns
    -------
    int
        The number of rows folded in, 0 when none was valid (state untouched),
        -1 when the batch moments are not finite (a NaN/inf in a valid row,
        or values whose squares overflow float64), -2 when merging them into
        the state would overflow; the state is then untouched.
    """
    n_rows, n_feat = x.shape
    masked = valid.shape[0] > 0
    xf = x.reshape(n_rows * n_feat)
    w = rows_per_super * n_feat
    n_blocks = (n_rows + rows_per_block - 1) // rows_per_block
    s = np.zeros((n_blocks, w))
    dv = np.zeros((n_blocks, w))
    q = np.zeros((n_blocks, w))
    bn = np.zeros(n_blocks, np.int64)
    for b in numba.prange(n_blocks):
        r0 = b * rows_per_block
        r1 = min(r0 + rows_per_block, n_rows)
        bn[b] = _block_moments(x, xf, valid, masked, r0, r1, rows_per_super, s[b], dv[b], q[b])
    # Block order, not completion order: this is what keeps serial == parallel.
    n_b = 0
    for b in range(n_blocks):
        n = bn[b]
        if n > 0:
            if n_b == 0:
                for j in range(n_feat):
                    s[0, j] = s[b, j]
                    q[0, j] = q[b, j]
            else:
                wb = n / (n_b + n)
                f = n_b * wb
                for j in range(n_feat):
                    delta = s[b, j] - s[0, j]
                    s[0, j] += delta * wb
                    q[0, j] += q[b, j] + delta * delta * f
            n_b += n
    if n_b == 0:
        return 0
    for j in range(n_feat):
        if not (math.isfinite(s[0, j]) and math.isfinite(q[0, j])):
            return -1
    for j in range(n_feat):
        if not _merge_finite(count_a, mean[j], var[j], float(n_b), s[0, j], q[0, j]):
            return -2
    for j in range(n_feat):
        _merge_state(count_a, mean, var, float(n_b), s[0, j], q[0, j], j)
    return n_b


update_serial, update_parallel = _update


@kernel_pair("void(F_2, f8_1, f8_1, b1, f8, F_2w)")
def _affine(x, shift, factor, center_first, clip, out):  # pragma: no cover - compiled
    """``out = (x - shift) * factor`` (``center_first``) or ``x * factor + shift``, clipped.

    ``x``/``out`` are ``[R, D]`` (float32/float64, same dtype), ``shift`` and
    ``factor`` float64 ``[D]``; arithmetic is float64, ``clip <= 0`` means none.
    Normalising multiplies by ``factor = 1 / sqrt(var + eps)`` rather than
    dividing: Numba's Python error model guards every division against zero,
    which keeps the loop scalar; the product is within two ulps of the quotient.
    """
    n_rows, n_feat = x.shape
    for r in numba.prange(n_rows):
        for j in range(n_feat):
            if center_first:
                y = (x[r, j] - shift[j]) * factor[j]
            else:
                y = x[r, j] * factor[j] + shift[j]
            # comparisons, not min/max: a NaN stays NaN, as in numpy's clip
            if clip > 0.0:
                if y > clip:
                    y = clip
                elif y < -clip:
                    y = -clip
            out[r, j] = y


affine_serial, affine_parallel = _affine
