# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Running statistics, the one implementation, as stateful objects.

Per-step batches are tiny (``[8, 4]``, ``[16, 17]`` observations, ``[16]``
rewards): there the cost is the call itself. :class:`Updater` (running
moments, normalize/denormalize) and :class:`ReturnScaler` (VecNormalize's
reward scaling) acquire the state's buffers once, at construction, so a step
acquires only the batch's buffers and enters C sooner than a Numba dispatch
types its arguments. A batch's moments are blocked corrected two-pass moments
(summed over super-rows of about ``SUPER_WIDTH`` elements), merged with
Chan's update in block order and then into the state in variance form;
``n_threads > 1`` computes the blocks on OpenMP threads (``prange``) and
merges them in the same order, so every thread count gives the same bits.
The pure-numpy twin is ``fastppo.reference.stats``; the block layout is
``fastppo.stats.layout``.

Rebuild after editing: ``pip install -e .``.

References: Chan, Golub & LeVeque (1983), "Algorithms for computing the sample
variance: analysis and recommendations", The American Statistician 37(3).
"""

from cython.parallel cimport prange
from libc.math cimport fabs, fmax, isfinite, sqrt
from libc.stdlib cimport calloc, free, malloc

ctypedef fused floating:
    float
    double


# The largest magnitude of a discounted return (and of the running mean) a
# ReturnNormalizer accepts: its square, and so every variance it merges, stays
# far inside float64 (1e300 < 1.8e308).
RETURN_LIMIT = 1e150
cdef double _RETURN_LIMIT = RETURN_LIMIT

cdef inline bint _merge_finite(double count_a, double mean_a, double var_a, double n_b,
                              double mean_b, double m2_b) noexcept nogil:
    # what _merge_state would store, without storing it: a merge of two finite
    # states can still overflow (delta**2 of means near +-1e300)
    cdef double tot, w_a, w_b, delta
    if count_a == 0.0:
        return isfinite(m2_b / n_b)
    tot = count_a + n_b
    w_a = count_a / tot
    w_b = n_b / tot
    delta = mean_b - mean_a
    return isfinite(mean_a + delta * w_b) and isfinite(
        var_a * w_a + (m2_b / n_b) * w_b + delta * delta * (w_a * w_b))


cdef inline void _merge_state(double count_a, double* mean, double* var,
                              double n_b, double mean_b, double m2_b,
                              Py_ssize_t j) noexcept nogil:
    # variance-form Chan merge; weights in [0, 1] so a huge count cannot overflow
    cdef double tot, w_a, w_b, delta
    if count_a == 0.0:
        mean[j] = mean_b
        var[j] = m2_b / n_b
    else:
        tot = count_a + n_b
        w_a = count_a / tot
        w_b = n_b / tot
        delta = mean_b - mean[j]
        mean[j] += delta * w_b
        var[j] = var[j] * w_a + (m2_b / n_b) * w_b + delta * delta * (w_a * w_b)


cdef Py_ssize_t _block_moments(const floating* x, Py_ssize_t n_feat,
                               const unsigned char* valid, bint masked,
                               Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t m,
                               double* s, double* dv, double* q) noexcept nogil:
    # corrected two-pass moments of rows [r0, r1): s[:D] = mean, q[:D] = m2
    cdef Py_ssize_t w = m * n_feat, n, n_sup, u, r, j, k, off
    cdef double inv, dev, c
    if masked:
        n = 0
        for r in range(r0, r1):
            if valid[r] != 0:
                n += 1
                for j in range(n_feat):
                    s[j] += x[r * n_feat + j]
    else:
        n = r1 - r0
        n_sup = n // m
        for u in range(n_sup):
            off = (r0 + u * m) * n_feat
            for k in range(w):
                s[k] += x[off + k]
        for r in range(r0 + n_sup * m, r1):
            for j in range(n_feat):
                s[j] += x[r * n_feat + j]
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
                    dev = x[r * n_feat + j] - s[j]
                    dv[j] += dev
                    q[j] += dev * dev
    else:
        for k in range(n_feat, w):
            s[k] = s[k - n_feat]
        n_sup = n // m
        for u in range(n_sup):
            off = (r0 + u * m) * n_feat
            for k in range(w):
                dev = x[off + k] - s[k]
                dv[k] += dev
                q[k] += dev * dev
        for r in range(r0 + n_sup * m, r1):
            for j in range(n_feat):
                dev = x[r * n_feat + j] - s[j]
                dv[j] += dev
                q[j] += dev * dev
        for u in range(1, m):
            for j in range(n_feat):
                dv[j] += dv[u * n_feat + j]
                q[j] += q[u * n_feat + j]
    for j in range(n_feat):
        c = q[j] - dv[j] * dv[j] * inv
        q[j] = c if c > 0.0 else 0.0
    return n


cdef Py_ssize_t _one_block(const floating* x, Py_ssize_t n_feat, const unsigned char* valid,
                           bint masked, Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t m,
                           double* scratch, double* res) noexcept nogil:
    # block [r0, r1): res = (n, mean[D], m2[D]); scratch holds 3 * m * D zeros on entry
    cdef Py_ssize_t w = m * n_feat, j, n
    n = _block_moments(x, n_feat, valid, masked, r0, r1, m, scratch, scratch + w,
                       scratch + 2 * w)
    res[0] = <double> n
    for j in range(n_feat):
        res[1 + j] = scratch[j]
        res[1 + n_feat + j] = scratch[2 * w + j]
    return n


cdef Py_ssize_t _update(const floating* x, Py_ssize_t n_rows, Py_ssize_t n_feat,
                        const unsigned char* valid, bint masked,
                        Py_ssize_t rows_per_super, Py_ssize_t rows_per_block,
                        double count_a, double* mean, double* var,
                        int n_threads) noexcept nogil:
    # Blocks of rows_per_block rows get their moments independently (in
    # parallel with n_threads > 1: OpenMP threads, each block its own scratch)
    # and are then merged in block order into (acc_mean, acc_m2): the thread
    # count never changes a bit of the result.
    # Returns the rows folded in, or (state untouched) -1: batch moments not
    # finite, -2: the merge with the state would overflow, -4: out of memory.
    cdef Py_ssize_t w = rows_per_super * n_feat, j, k, n, b, n_b = 0, oom = 0
    cdef Py_ssize_t nb = (n_rows + rows_per_block - 1) // rows_per_block, stride = 1 + 2 * n_feat
    cdef double wb, f, delta
    cdef double* scratch
    cdef double* res = <double*> malloc(nb * stride * sizeof(double))
    cdef double* acc = <double*> calloc(2 * n_feat + 3 * w, sizeof(double))
    if res == NULL or acc == NULL:
        free(res)
        free(acc)
        return -4  # out of memory
    cdef double* acc_mean = acc
    cdef double* acc_m2 = acc + n_feat
    if n_threads > 1 and nb > 1:
        for b in prange(nb, num_threads=n_threads, schedule="static"):
            scratch = <double*> calloc(3 * w, sizeof(double))
            if scratch == NULL:
                oom += 1
            else:
                _one_block(x, n_feat, valid, masked, b * rows_per_block,
                           min((b + 1) * rows_per_block, n_rows), rows_per_super, scratch,
                           res + b * stride)
                free(scratch)
    else:
        scratch = acc + 2 * n_feat
        for b in range(nb):
            for k in range(3 * w):
                scratch[k] = 0.0
            _one_block(x, n_feat, valid, masked, b * rows_per_block,
                       min((b + 1) * rows_per_block, n_rows), rows_per_super, scratch,
                       res + b * stride)
    if oom:
        free(res)
        free(acc)
        return -4
    for b in range(nb):
        n = <Py_ssize_t> res[b * stride]
        if n > 0:
            if n_b == 0:
                for j in range(n_feat):
                    acc_mean[j] = res[b * stride + 1 + j]
                    acc_m2[j] = res[b * stride + 1 + n_feat + j]
            else:
                wb = <double> n / <double> (n_b + n)
                f = n_b * wb
                for j in range(n_feat):
                    delta = res[b * stride + 1 + j] - acc_mean[j]
                    acc_mean[j] += delta * wb
                    acc_m2[j] += res[b * stride + 1 + n_feat + j] + delta * delta * f
            n_b += n
    free(res)
    if n_b > 0:
        for j in range(n_feat):
            if not (isfinite(acc_mean[j]) and isfinite(acc_m2[j])):
                free(acc)
                return -1
        for j in range(n_feat):
            if not _merge_finite(count_a, mean[j], var[j], <double> n_b, acc_mean[j], acc_m2[j]):
                free(acc)
                return -2
        for j in range(n_feat):
            _merge_state(count_a, mean, var, <double> n_b, acc_mean[j], acc_m2[j], j)
    free(acc)
    return n_b


cdef inline double _clip(double y, double clip) noexcept nogil:
    # y clipped to [-clip, clip] when clip > 0: comparisons, not min/max, so a
    # NaN stays NaN, as in np.clip (selects: gcc vectorises the loops)
    y = clip if (clip > 0.0 and y > clip) else y
    return -clip if (clip > 0.0 and y < -clip) else y


cdef inline void _affine_row(const floating* x, Py_ssize_t cs, floating* out, Py_ssize_t n,
                             const double* mu, const double* factor, bint normalize,
                             double clip) noexcept nogil:
    # one row of n features, x's elements cs apart; one simple loop per case,
    # selects for the clip: gcc vectorises these (cs a constant where inlined)
    cdef Py_ssize_t j
    cdef double y
    if normalize:
        for j in range(n):
            y = (x[j * cs] - mu[j]) * factor[j]
            out[j] = <floating> _clip(y, clip)
    else:
        for j in range(n):
            y = x[j * cs] * factor[j] + mu[j]
            out[j] = <floating> _clip(y, clip)


cdef inline void _affine_run(const floating* x, Py_ssize_t cs, floating* out, Py_ssize_t n,
                             double mu, double factor, bint normalize,
                             double clip) noexcept nogil:
    # n values of one feature, x's cs apart: its constants in registers (the
    # expressions of _affine_row, so the same bits)
    cdef Py_ssize_t k
    cdef double y
    if normalize:
        for k in range(n):
            y = (x[k * cs] - mu) * factor
            out[k] = <floating> _clip(y, clip)
    else:
        for k in range(n):
            y = x[k * cs] * factor + mu
            out[k] = <floating> _clip(y, clip)


cdef inline void _affine_span(const floating* x, Py_ssize_t cs, floating* out, Py_ssize_t n,
                              double mu, double factor, bint normalize,
                              double clip) noexcept nogil:
    # _affine_run with the common steps as constants, which gcc vectorises
    # (a run from every other element loads two vectors and permutes)
    if cs == 1:
        _affine_run(x, 1, out, n, mu, factor, normalize, clip)
    elif cs == 2:
        _affine_run(x, 2, out, n, mu, factor, normalize, clip)
    else:
        _affine_run(x, cs, out, n, mu, factor, normalize, clip)


cdef inline void _affine_rows(const floating* x, Py_ssize_t rs, Py_ssize_t cs, floating* out,
                              Py_ssize_t r0, Py_ssize_t r1, Py_ssize_t n_cols,
                              const double* mu, const double* factor, bint one,
                              bint normalize, double clip) noexcept nogil:
    # rows [r0, r1) of x ([R, n_cols], rows rs and elements cs apart) into the
    # C-contiguous out; ``one``: every element is the one feature's. A strided
    # view is mapped as it lies, not copied first (normalize_returns [2048,
    # 256] float32 from every other element: 204 -> 157 us, 125 us contiguous;
    # znver4, one pinned core)
    cdef Py_ssize_t r
    for r in range(r0, r1):
        if one:
            _affine_span(x + r * rs, cs, out + r * n_cols, n_cols, mu[0], factor[0],
                         normalize, clip)
        elif cs == 1:
            _affine_row(x + r * rs, 1, out + r * n_cols, n_cols, mu, factor, normalize, clip)
        elif cs == 2:
            _affine_row(x + r * rs, 2, out + r * n_cols, n_cols, mu, factor, normalize, clip)
        else:
            _affine_row(x + r * rs, cs, out + r * n_cols, n_cols, mu, factor, normalize, clip)


cdef int _affine_all(const floating* x, Py_ssize_t rs, Py_ssize_t cs, floating* out,
                     Py_ssize_t n_rows, Py_ssize_t n_cols, const double* mu, const double* var,
                     Py_ssize_t n_feat, double epsilon, bint normalize, double clip,
                     int n_threads, bint columns=False) noexcept nogil:
    # The whole affine map: the per-feature factor, then the rows (in row
    # chunks on n_threads > 1). x is [n_rows, n_cols] with rows rs and
    # elements cs apart, out C-contiguous; n_cols is n_feat, or any width
    # when n_feat is 1 (one feature). ``columns``: x (contiguous: rs and cs
    # are 1) and out are feature-major [n_feat, n_rows] (a Fortran-ordered
    # batch's transpose),
    # swept one feature's run at a time; so is a contiguous batch of one
    # feature, whose rows would be one value each (a row loop of length 1 ran
    # 5x slower: normalize_returns [2048, 256] float32 without the update 724
    # -> 133 us, znver4). Returns 0, or -1 when out of memory.
    cdef Py_ssize_t j, c, rows, pieces, r0
    cdef bint one = n_feat == 1
    cdef double* factor = <double*> calloc(n_feat, sizeof(double))
    if factor == NULL:
        return -1
    # sqrt and division are correctly rounded: the same factor numpy
    # computes for the Numba kernel, so the two agree bit for bit
    for j in range(n_feat):
        factor[j] = sqrt(var[j] + epsilon)
        if normalize:
            factor[j] = 1.0 / factor[j]
    if not columns and one and cs == 1 and rs == n_cols:  # contiguous: one run
        n_rows, n_cols, rs = n_rows * n_cols, 1, 1
    rows = max(1, 65536 // n_cols)  # 256-512 KiB per task
    if columns or (one and n_cols == 1):
        rows = 65536
        pieces = (n_rows + rows - 1) // rows  # tasks per feature
        if n_threads > 1 and n_feat * pieces > 1:
            for c in prange(n_feat * pieces, num_threads=n_threads, schedule="static"):
                j = c // pieces
                r0 = (c % pieces) * rows
                _affine_span(x + j * n_rows + r0 * rs, rs, out + j * n_rows + r0,
                             min(n_rows, r0 + rows) - r0, mu[j], factor[j], normalize, clip)
        else:
            for j in range(n_feat):
                _affine_span(x + j * n_rows, rs, out + j * n_rows, n_rows, mu[j], factor[j],
                             normalize, clip)
    elif n_threads > 1 and n_rows > rows:
        for c in prange((n_rows + rows - 1) // rows, num_threads=n_threads, schedule="static"):
            _affine_rows(x, rs, cs, out, c * rows, min(n_rows, (c + 1) * rows), n_cols, mu,
                         factor, one, normalize, clip)
    else:
        _affine_rows(x, rs, cs, out, 0, n_rows, n_cols, mu, factor, one, normalize, clip)
    free(factor)
    return 0


cdef inline bint _overlaps(const void* a, Py_ssize_t na, const void* b, Py_ssize_t nb) noexcept:
    return (<const char*> a < <const char*> b + nb) and (<const char*> b < <const char*> a + na)


cdef class Updater:
    """The update of one running state ``(count, mean, var)``.

    Parameters
    ----------
    mean, var : float64 [D], C-contiguous, writeable
        The state's arrays; kept (not copied) and updated in place.
    rows_per_super, rows_per_block : int
        From ``fastppo.stats.layout(D)``.

    The methods trust their inputs (the public layer validates): ``x`` is a
    C-contiguous ``[R, D]`` batch with ``R >= 1``, ``valid`` a uint8 ``[R]``
    mask or None. They return the number of rows folded in, 0 for none, -1
    for non-finite batch moments (state untouched), like the Numba kernel.
    """
    cdef double[::1] mean
    cdef double[::1] var
    cdef Py_ssize_t n_feat, rows_per_super, rows_per_block

    def __init__(self, double[::1] mean not None, double[::1] var not None,
                 Py_ssize_t rows_per_super, Py_ssize_t rows_per_block):
        if var.shape[0] != mean.shape[0] or rows_per_super < 1 or rows_per_block < 1:
            raise ValueError("Updater: inconsistent state or layout")
        self.mean = mean
        self.var = var
        self.n_feat = mean.shape[0]
        self.rows_per_super = rows_per_super
        self.rows_per_block = rows_per_block

    def update_f32(self, const float[:, ::1] x not None, const unsigned char[::1] valid,
                   double count_a, int n_threads=1):
        return self._run(&x[0, 0], x.shape[0], x.shape[1], valid, count_a, n_threads)

    def update_f64(self, const double[:, ::1] x not None, const unsigned char[::1] valid,
                   double count_a, int n_threads=1):
        return self._run(&x[0, 0], x.shape[0], x.shape[1], valid, count_a, n_threads)

    def affine_f32(self, const float[:, :] x not None, float[:, ::1] out not None,
                   double epsilon, bint normalize, double clip, int n_threads=1,
                   bint columns=False):
        """``out = (x - mean) * (1 / sqrt(var + epsilon))`` (``normalize``) or
        ``x * sqrt(var + epsilon) + mean``, clipped to ``[-clip, clip]`` when
        ``clip > 0``; float64 arithmetic, the same bits on any ``n_threads``
        and any layout of ``x``. ``x`` (any strides, aligned) and ``out`` are
        ``[R, D]`` (or ``[R, W]`` of one feature's values when ``D`` is 1), or
        with ``columns`` feature-major ``[D, R]``, both C-contiguous (the
        transposes of Fortran-ordered ``[R, D]`` arrays)."""
        self._affine(&x[0, 0], x.shape[0], x.shape[1], x.strides[0], x.strides[1], &out[0, 0],
                     out.shape[0], out.shape[1], epsilon, normalize, clip, n_threads, columns)

    def affine_f64(self, const double[:, :] x not None, double[:, ::1] out not None,
                   double epsilon, bint normalize, double clip, int n_threads=1,
                   bint columns=False):
        """float64 twin of :meth:`affine_f32`."""
        self._affine(&x[0, 0], x.shape[0], x.shape[1], x.strides[0], x.strides[1], &out[0, 0],
                     out.shape[0], out.shape[1], epsilon, normalize, clip, n_threads, columns)

    cdef int _affine(self, const floating* x, Py_ssize_t n_rows, Py_ssize_t n_cols,
                     Py_ssize_t rs, Py_ssize_t cs, floating* out, Py_ssize_t out_rows,
                     Py_ssize_t out_cols, double epsilon, bint normalize, double clip,
                     int n_threads, bint columns) except -1:
        cdef int ok
        cdef Py_ssize_t size = sizeof(floating), n_feat
        cdef const char* lo = <const char*> x
        cdef const char* hi
        if out_rows != n_rows or out_cols != n_cols:
            raise ValueError("Updater: x/out shape does not match the state")
        if n_rows == 0 or n_cols == 0:
            return 0
        # the raw pointers below need whole, aligned elements (the public
        # layer copies anything else); strides of a length-1 axis are free
        if n_rows == 1:
            rs = n_cols * cs
        if n_cols == 1:
            cs = size
        if rs % size or cs % size or <size_t> x % size:
            raise ValueError("Updater: x is not aligned to whole elements")
        rs, cs = rs // size, cs // size
        if columns:  # feature-major: the shapes are [D, R]
            if cs != 1 or rs != n_cols:
                raise ValueError("Updater: feature-major x must be C-contiguous")
            n_feat = n_rows
        else:
            n_feat = n_cols if self.n_feat != 1 else 1
        if n_feat != self.n_feat:
            raise ValueError("Updater: x/out shape does not match the state")
        # the span of x's bytes, whatever its strides' signs
        lo += min(0, (n_rows - 1) * rs) * size + min(0, (n_cols - 1) * cs) * size
        hi = (<const char*> x) + (max(0, (n_rows - 1) * rs) + max(0, (n_cols - 1) * cs) + 1) * size
        if _overlaps(out, n_rows * n_cols * size, lo, hi - lo):
            raise ValueError("Updater: out overlaps x")
        with nogil:
            if columns:
                ok = _affine_all(x, 1, 1, out, n_cols, n_rows, &self.mean[0], &self.var[0],
                                 n_feat, epsilon, normalize, clip, n_threads, True)
            else:
                ok = _affine_all(x, rs, cs, out, n_rows, n_cols, &self.mean[0], &self.var[0],
                                 n_feat, epsilon, normalize, clip, n_threads)
        if ok < 0:
            raise MemoryError()
        return 0

    cdef Py_ssize_t _run(self, const floating* x, Py_ssize_t n_rows, Py_ssize_t n_feat,
                         const unsigned char[::1] valid, double count_a,
                         int n_threads) except? -5:
        cdef bint masked = valid is not None
        cdef const unsigned char* vp = NULL
        cdef Py_ssize_t n
        # the kernels never check; these three guard the raw pointers below
        if n_feat != self.n_feat or n_rows < 1:
            raise ValueError("Updater: batch shape does not match the state")
        if masked:
            if valid.shape[0] != n_rows:
                raise ValueError("Updater: valid length does not match the batch")
            vp = &valid[0]
        with nogil:
            n = _update(x, n_rows, n_feat, vp, masked, self.rows_per_super,
                        self.rows_per_block, count_a, &self.mean[0], &self.var[0], n_threads)
        if n == -4:
            raise MemoryError()
        return n


cdef Py_ssize_t _return_step(const floating* r, const unsigned char* term,
                             const unsigned char* trunc, const unsigned char* valid,
                             bint masked, floating* out, Py_ssize_t n_steps, Py_ssize_t n_envs,
                             double gamma, double clip, double epsilon, double count_a,
                             double* ret, double* mean, double* var) noexcept nogil:
    # per step: the corrected two-pass moments of the valid returns (as one block
    # of _update), then one Chan merge
    cdef Py_ssize_t t, i, k, n, total = 0
    cdef double s, inv, m, m2, c, dev, scale, ca = count_a
    cdef double bound = 0.0, step_max
    for i in range(n_envs):
        bound = fmax(bound, fabs(ret[i]))
    for t in range(n_steps):
        step_max = 0.0
        for i in range(n_envs):
            k = t * n_envs + i
            if not isfinite(r[k]):
                return -1  # before anything is written
            step_max = fmax(step_max, fabs(r[k]))
        bound += step_max
    # |R| <= bound for every return of the block (gamma <= 1); with |mean| too
    # below RETURN_LIMIT every merged variance stays below 3 * RETURN_LIMIT**2,
    # finite. Checked before anything is written.
    if not (bound + fabs(mean[0]) < _RETURN_LIMIT):
        return -2
    for t in range(n_steps):
        n = 0
        s = 0.0
        for i in range(n_envs):
            k = t * n_envs + i
            if not masked or valid[k] != 0:
                ret[i] = ret[i] * gamma + r[k]
                s += ret[i]
                n += 1
        if n > 0:
            inv = 1.0 / n
            m = s * inv
            m2 = 0.0
            c = 0.0
            for i in range(n_envs):
                k = t * n_envs + i
                if not masked or valid[k] != 0:
                    dev = ret[i] - m
                    c += dev
                    m2 += dev * dev
            m2 = m2 - c * c * inv
            if m2 < 0.0:
                m2 = 0.0
            _merge_state(ca, mean, var, <double> n, m, m2, 0)
            ca += n
            total += n
        scale = sqrt(var[0] + epsilon)
        for i in range(n_envs):
            k = t * n_envs + i
            out[k] = <floating> _clip(r[k] / scale, clip)
        for i in range(n_envs):
            k = t * n_envs + i
            if (not masked or valid[k] != 0) and (term[k] != 0 or trunc[k] != 0):
                ret[i] = 0.0
    return total


cdef class ReturnScaler:
    """The per-step state of ``fastppo.ReturnNormalizer``: VecNormalize's reward
    scaling over a ``[T, N]`` block (the one implementation; tested against
    ``fastppo.reference.stats.return_normalize``).

    Parameters
    ----------
    ret : float64 [N], the running discounted returns (kept, updated in place)
    mean, var : float64 [1], the return statistics (kept, updated in place)

    ``step_f32``/``step_f64`` take C-contiguous ``[T, N]`` rewards, uint8 (or
    bool: the same bytes) flags (``valid`` may be None) and ``out``, and
    ``step1_*`` the ``[N]`` buffers of one step; they raise ``ValueError`` on a shape
    mismatch or an ``out`` overlapping an input, and return the number of
    returns folded into the statistics, or -1 (nothing written) when a reward
    is not finite, -2 (nothing written) when a return could reach
    ``RETURN_LIMIT`` in magnitude.
    """
    cdef double[::1] ret
    cdef double[::1] mean
    cdef double[::1] var

    def __init__(self, double[::1] ret not None, double[::1] mean not None,
                 double[::1] var not None):
        if mean.shape[0] != 1 or var.shape[0] != 1 or ret.shape[0] < 1:
            raise ValueError("ReturnScaler: ret must be [N >= 1], mean and var [1]")
        self.ret = ret
        self.mean = mean
        self.var = var

    def step_f32(self, const float[:, ::1] r not None, const unsigned char[:, ::1] term not None,
                 const unsigned char[:, ::1] trunc not None, const unsigned char[:, ::1] valid,
                 float[:, ::1] out not None, double gamma, double clip, double epsilon,
                 double count_a):
        self._check(r.shape[0], r.shape[1], term.shape[0], term.shape[1],
                    trunc.shape[0], trunc.shape[1], out.shape[0], out.shape[1], valid)
        cdef Py_ssize_t n = r.shape[0] * r.shape[1], nb = n * sizeof(float)
        if (_overlaps(&out[0, 0], nb, &r[0, 0], nb) or _overlaps(&out[0, 0], nb, &term[0, 0], n)
                or _overlaps(&out[0, 0], nb, &trunc[0, 0], n)
                or (valid is not None and _overlaps(&out[0, 0], nb, &valid[0, 0], n))):
            raise ValueError("ReturnScaler: out overlaps an input")
        return self._run(&r[0, 0], &term[0, 0], &trunc[0, 0], valid, &out[0, 0],
                         r.shape[0], r.shape[1], gamma, clip, epsilon, count_a)

    def step_f64(self, const double[:, ::1] r not None, const unsigned char[:, ::1] term not None,
                 const unsigned char[:, ::1] trunc not None, const unsigned char[:, ::1] valid,
                 double[:, ::1] out not None, double gamma, double clip, double epsilon,
                 double count_a):
        self._check(r.shape[0], r.shape[1], term.shape[0], term.shape[1],
                    trunc.shape[0], trunc.shape[1], out.shape[0], out.shape[1], valid)
        cdef Py_ssize_t n = r.shape[0] * r.shape[1], nb = n * sizeof(double)
        if (_overlaps(&out[0, 0], nb, &r[0, 0], nb) or _overlaps(&out[0, 0], nb, &term[0, 0], n)
                or _overlaps(&out[0, 0], nb, &trunc[0, 0], n)
                or (valid is not None and _overlaps(&out[0, 0], nb, &valid[0, 0], n))):
            raise ValueError("ReturnScaler: out overlaps an input")
        return self._run(&r[0, 0], &term[0, 0], &trunc[0, 0], valid, &out[0, 0],
                         r.shape[0], r.shape[1], gamma, clip, epsilon, count_a)

    def step1_f32(self, const float[::1] r not None, const unsigned char[::1] term not None,
                  const unsigned char[::1] trunc not None, const unsigned char[::1] valid,
                  float[::1] out not None, double gamma, double clip, double epsilon,
                  double count_a):
        """One step: ``[N]`` buffers, otherwise as :meth:`step_f32` (saves the
        ``[None]`` views a per-step caller would make)."""
        cdef Py_ssize_t n = r.shape[0]
        self._check(1, n, 1, term.shape[0], 1, trunc.shape[0], 1, out.shape[0], None)
        if valid is not None and valid.shape[0] != n:
            raise ValueError("ReturnScaler: valid shape does not match")
        cdef Py_ssize_t nb = n * sizeof(float)
        if (_overlaps(&out[0], nb, &r[0], nb) or _overlaps(&out[0], nb, &term[0], n)
                or _overlaps(&out[0], nb, &trunc[0], n)
                or (valid is not None and _overlaps(&out[0], nb, &valid[0], n))):
            raise ValueError("ReturnScaler: out overlaps an input")
        return self._run1(&r[0], &term[0], &trunc[0], valid, &out[0], n, gamma, clip,
                          epsilon, count_a)

    def step1_f64(self, const double[::1] r not None, const unsigned char[::1] term not None,
                  const unsigned char[::1] trunc not None, const unsigned char[::1] valid,
                  double[::1] out not None, double gamma, double clip, double epsilon,
                  double count_a):
        """float64 twin of :meth:`step1_f32`."""
        cdef Py_ssize_t n = r.shape[0]
        self._check(1, n, 1, term.shape[0], 1, trunc.shape[0], 1, out.shape[0], None)
        if valid is not None and valid.shape[0] != n:
            raise ValueError("ReturnScaler: valid shape does not match")
        cdef Py_ssize_t nb = n * sizeof(double)
        if (_overlaps(&out[0], nb, &r[0], nb) or _overlaps(&out[0], nb, &term[0], n)
                or _overlaps(&out[0], nb, &trunc[0], n)
                or (valid is not None and _overlaps(&out[0], nb, &valid[0], n))):
            raise ValueError("ReturnScaler: out overlaps an input")
        return self._run1(&r[0], &term[0], &trunc[0], valid, &out[0], n, gamma, clip,
                          epsilon, count_a)

    cdef Py_ssize_t _run1(self, const floating* r, const unsigned char* term,
                          const unsigned char* trunc, const unsigned char[::1] valid,
                          floating* out, Py_ssize_t n_envs, double gamma, double clip,
                          double epsilon, double count_a):
        cdef bint masked = valid is not None
        cdef const unsigned char* vp = &valid[0] if masked else NULL
        cdef Py_ssize_t n
        with nogil:
            n = _return_step(r, term, trunc, vp, masked, out, 1, n_envs, gamma, clip,
                             epsilon, count_a, &self.ret[0], &self.mean[0], &self.var[0])
        return n

    cdef int _check(self, Py_ssize_t t, Py_ssize_t n, Py_ssize_t t1, Py_ssize_t n1,
                    Py_ssize_t t2, Py_ssize_t n2, Py_ssize_t t3, Py_ssize_t n3,
                    const unsigned char[:, ::1] valid) except -1:
        # the loops trust these: every buffer is exactly [T, N], N the env count
        if (n != self.ret.shape[0] or t < 1 or t1 != t or t2 != t or t3 != t
                or n1 != n or n2 != n or n3 != n):
            raise ValueError("ReturnScaler: shapes do not match")
        if valid is not None and (valid.shape[0] != t or valid.shape[1] != n):
            raise ValueError("ReturnScaler: valid shape does not match")
        return 0

    cdef Py_ssize_t _run(self, const floating* r, const unsigned char* term,
                         const unsigned char* trunc, const unsigned char[:, ::1] valid,
                         floating* out, Py_ssize_t n_steps, Py_ssize_t n_envs,
                         double gamma, double clip, double epsilon, double count_a):
        cdef bint masked = valid is not None
        cdef const unsigned char* vp = &valid[0, 0] if masked else NULL
        cdef Py_ssize_t n
        with nogil:
            n = _return_step(r, term, trunc, vp, masked, out, n_steps, n_envs, gamma, clip,
                             epsilon, count_a, &self.ret[0], &self.mean[0], &self.var[0])
        return n


# ----------------------------------------------------------------------------- C API
# The same cores for compiled callers: the trainer's fused rollout
# (fastppo.stats.cabi binds these for Numba) folds observations and rewards
# into the running statistics with exactly the arithmetic the per-step
# Python path runs through Updater and ReturnScaler. float64 data, serial;
# a NULL ``valid`` counts every row. Same return codes as the methods.

cdef api Py_ssize_t fastppo_rms_update_f64(
        const double* x, Py_ssize_t n_rows, Py_ssize_t n_feat, const unsigned char* valid,
        Py_ssize_t rows_per_super, Py_ssize_t rows_per_block, double count_a, double* mean,
        double* var) noexcept nogil:
    return _update(x, n_rows, n_feat, valid, valid != NULL, rows_per_super, rows_per_block,
                   count_a, mean, var, 1)


cdef api int fastppo_rms_normalize_f64(
        const double* x, double* out, Py_ssize_t n_rows, Py_ssize_t n_feat, const double* mean,
        const double* var, double epsilon, double clip) noexcept nogil:
    return _affine_all(x, n_feat, 1, out, n_rows, n_feat, mean, var, n_feat, epsilon, True,
                       clip, 1)


cdef api Py_ssize_t fastppo_return_step_f64(
        const double* r, const unsigned char* term, const unsigned char* trunc,
        const unsigned char* valid, double* out, Py_ssize_t n_envs, double gamma, double clip,
        double epsilon, double count_a, double* ret, double* mean, double* var) noexcept nogil:
    return _return_step(r, term, trunc, valid, valid != NULL, out, 1, n_envs, gamma, clip,
                        epsilon, count_a, ret, mean, var)
