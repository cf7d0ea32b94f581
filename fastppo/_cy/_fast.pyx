# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""The fast path of ``gae``, ``vtrace``, ``discounted_returns`` (every size),
``sample_categorical`` and ``sample_gaussian`` (small calls).

For a small sweep the Python layer and Numba's dispatch are the whole cost:
typing and unboxing 13-19 arguments alone takes ~2 us, the general
validation 5-20 us more. Here the common case -- plain C-contiguous, aligned,
native-order numpy arrays of matching dtypes (or, for the sweeps, all
Fortran-ordered: batch-major ``[N, T]`` rollouts passed transposed, which the
entries hand to the batch-major kernels), bool/uint8 flags, float
hyperparameters; plain torch CPU tensors too, read through torch's DLPack
exchange API (the sweeps straight from its description, :func:`_arr_of_tensor`;
the samplers through numpy views, :func:`_dlpack_view`) -- is recognised with a
few C-level reads of each array header, the memory ranges of outputs and
inputs are compared in C, and the serial kernel is entered through its C
entry point (:mod:`fastppo.kernels.cabi`) with the GIL released. The sweeps also make,
in C, the conversions the general path would make of a small problem:
strided or unaligned views (and Fortran-ordered arrays of a time-major
call) are copied in C order, float 0/1 flags become uint8; the bounds of the caller's
views still count for the overlap test.

A sweep of any size is taken: from its ``set_limit`` size on, the
``set_blocks`` rule may split it into blocks of envs, and the serial
kernel's steps (the validation's row ranges, then the blocks) run on OpenMP
threads, the same bits as one call (:func:`_threaded`).

Every function returns ``None`` when anything is unusual (another array
type, a flag that is not 0/1, a bad hyperparameter, an ambiguous truncation,
a large categorical problem that the parallel build should take, a
non-finite input the kernel refused): the caller then runs the general
path, which validates in full and raises the house errors. So this module
never raises for bad input and holds no error messages of its own; on a
nonzero kernel status nothing was written.

Entry points are resolved on first use by ``loader(kind, dtype_index)``
(kind 0 gae, 1 vtrace, 2 discounted_returns, 3 categorical, 4 gaussian;
dtype 0 float32, 1 float64), so a process compiles or loads only the ones it
calls. The samplers take problems below their ``set_limit`` size (logits,
means): above it the public layer's parallel build is the better choice.

Rebuild after editing: ``pip install -e .``.
"""

import sys

cimport numpy as cnp
from cython.parallel cimport prange
from cpython.exc cimport PyErr_Clear
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.stdint cimport int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport free
from libc.string cimport memcpy

cnp.import_array()

ctypedef int64_t (*gae_fn)(void*, void*, void*, unsigned char*, unsigned char*, void*,
                           unsigned char*, int64_t, double, double, int64_t, int64_t,
                           int64_t, int64_t, void*, void*) noexcept nogil
ctypedef int64_t (*vtrace_fn)(void*, void*, void*, void*, void*, unsigned char*,
                              unsigned char*, void*, unsigned char*, int64_t, double,
                              double, double, double, double, int64_t, int64_t,
                              int64_t, int64_t, void*, void*) noexcept nogil
ctypedef int64_t (*categorical_fn)(void*, int64_t, unsigned char*, int64_t, int64_t, int64_t,
                                   int64_t*, int64_t, int64_t, int64_t, int64_t, int64_t,
                                   int64_t, int64_t, int64_t, int64_t, int64_t*,
                                   float*) noexcept nogil
ctypedef int64_t (*gaussian_fn)(void*, int64_t, void*, int64_t, int64_t, int64_t, int64_t,
                                int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, float*,
                                float*) noexcept nogil
ctypedef int64_t (*returns_fn)(void*, void*, unsigned char*, unsigned char*, void*,
                               unsigned char*, int64_t, double, int64_t, int64_t,
                               int64_t, int64_t, void*) noexcept nogil
ctypedef int64_t (*env_step_fn)(double*, int64_t*, void*, int64_t, int64_t, int64_t, float*,
                                double*, unsigned char*, unsigned char*, float*,
                                int64_t) noexcept nogil

# Must match fastppo.kernels.sweep's option bits (checked by configure()).
cdef enum:
    HAS_TRUNC = 1
    HAS_FINAL = 2
    HAS_VALID = 4
    BATCH_MAJOR = 8
    CHECK_ROWS = 16
    STATUS = 32
    BLOCK = 64

cdef enum:
    N_KINDS = 5
cdef void* _entries[N_KINDS][2]
cdef Py_ssize_t _limits[N_KINDS]
cdef object _loader = None
cdef object _blocks = None
cdef unsigned char _no_mask = 0

cdef object _tensor_type = None  # torch.Tensor, once torch is imported

cdef int _FLOAT_FLAGS = cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_ALIGNED
cdef int _OUT_FLAGS = _FLOAT_FLAGS | cnp.NPY_ARRAY_WRITEABLE


def configure(loader, tuple options):
    """Set the entry-point loader (limits start at 0: no categorical call is
    taken, and every sweep runs in one call until ``set_blocks`` gives a rule).

    ``options``: fastppo.kernels.sweep's (HAS_TRUNC, HAS_FINAL, HAS_VALID,
    BATCH_MAJOR, CHECK_ROWS, STATUS, BLOCK), which this module's must equal.
    """
    global _loader
    if options != (HAS_TRUNC, HAS_FINAL, HAS_VALID, BATCH_MAJOR, CHECK_ROWS, STATUS, BLOCK):
        raise RuntimeError("fastppo._cy._fast is stale; rebuild with `pip install -e .`")
    _loader = loader
    for k in range(N_KINDS):
        _limits[k] = 0
        for d in range(2):
            _entries[k][d] = NULL


def set_limit(int kind, Py_ssize_t size):
    """Kind ``kind`` takes problems of fewer than ``size`` elements (logits);
    a sweep takes any size, and from ``size`` on asks ``set_blocks``'s rule
    whether to run on threads."""
    if not 0 <= kind < N_KINDS:
        raise ValueError(f"set_limit: kind must be in [0, {N_KINDS}), got {kind}")
    _limits[kind] = size


def set_blocks(rule):
    """``rule(kind, T, N, batch_major) -> (block, parts)``: a large sweep's envs
    per block (``N``: one serial call) and its validation's row ranges."""
    global _blocks
    _blocks = rule


cdef void* _entry(int kind, int d) except? NULL:
    cdef void* p = _entries[kind][d]
    if p == NULL:
        p = <void*><uintptr_t>_loader(kind, d)
        _entries[kind][d] = p
    return p


cdef struct Span:
    char* lo
    char* hi


cdef inline Span _span_of(char* data, cnp.npy_intp item, int nd, cnp.npy_intp* dims,
                          cnp.npy_intp* steps) noexcept:
    """The bytes an array may touch, whatever its steps: the bounds
    ``np.may_share_memory`` compares (``data .. data + nbytes`` when contiguous)."""
    cdef Span s
    cdef int i
    cdef cnp.npy_intp step
    s.lo = data
    s.hi = s.lo
    for i in range(nd):
        if dims[i] == 0:
            return s
    s.hi += item
    for i in range(nd):
        step = (dims[i] - 1) * steps[i]
        if step < 0:
            s.lo += step
        else:
            s.hi += step
    return s


cdef inline Span _span(cnp.ndarray a) noexcept:
    """:func:`_span_of` an ndarray."""
    return _span_of(<char*>cnp.PyArray_DATA(a), cnp.PyArray_ITEMSIZE(a), cnp.PyArray_NDIM(a),
                    cnp.PyArray_DIMS(a), cnp.PyArray_STRIDES(a))


cdef inline bint _overlap(Span a, Span b) noexcept:
    # an empty array's span is empty and shares nothing, as numpy says, even
    # where its pointer lies inside the other span
    return a.lo < a.hi and b.lo < b.hi and a.lo < b.hi and b.lo < a.hi


def may_share_memory(cnp.ndarray a, cnp.ndarray b):
    """``np.may_share_memory(a, b)``: whether the byte ranges ``a`` and ``b`` may
    touch overlap (numpy's default bounds test, never an exact solve). The one
    overlap rule: the fast path's output checks and the general path's
    ``_checks`` both use it, at ~30 ns a pair where numpy's takes ~280."""
    return _overlap(_span(a), _span(b))


cdef inline bint _dims_are(int nd_a, cnp.npy_intp* dims_a, int nd, cnp.npy_intp* dims) noexcept:
    """A shape ``dims_a[:nd_a]`` is ``dims[:nd]``."""
    cdef int i
    if nd_a != nd:
        return False
    for i in range(nd):
        if dims_a[i] != dims[i]:
            return False
    return True


cdef inline bint _shape_is(cnp.ndarray a, int nd, cnp.npy_intp* dims) noexcept:
    """``a`` has ``nd`` dimensions of sizes ``dims[:nd]``."""
    return _dims_are(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), nd, dims)


cdef inline bint _same_shape(cnp.ndarray a, cnp.ndarray b) noexcept:
    return _shape_is(a, cnp.PyArray_NDIM(b), cnp.PyArray_DIMS(b))


cdef inline bint _typed(object x, int typenum, int flags, int nd, cnp.npy_intp* dims) noexcept:
    """``x`` is a native-byte-order ndarray of ``typenum``, shape ``dims[:nd]``, ``flags`` set."""
    if type(x) is not cnp.ndarray:
        return False
    cdef cnp.ndarray a = <cnp.ndarray>x
    return (
        cnp.PyArray_TYPE(a) == typenum
        and cnp.PyArray_ISNOTSWAPPED(a)
        and cnp.PyArray_CHKFLAGS(a, flags)
        and _shape_is(a, nd, dims)
    )


ctypedef fused real:
    float
    double


cdef inline unsigned int _not_flag(real v) noexcept nogil:
    """1 where a float flag is neither 0 nor 1 (NaN included), else 0: the one
    float-flag rule, which the conversion below and the scan naming a refused
    value both test."""
    return (v != 0) & (v != 1)


cdef bint _bytes_of_flags(const real* src, unsigned char* dst, Py_ssize_t n) noexcept nogil:
    """``dst = src != 0`` for 0/1 float flags; False if a value is neither (NaN
    included). The sweeps' fast path, the general path's
    ``_checks.flag_array`` and ``ReturnNormalizer`` all convert here."""
    cdef unsigned int bad = 0  # (a byte accumulator vectorised worse)
    cdef Py_ssize_t i
    cdef real v
    for i in range(n):  # branch-free: the compiler vectorises it
        v = src[i]
        bad |= _not_flag(v)
        dst[i] = v != 0
    return bad == 0


cdef Py_ssize_t _first_bad_flag(const real* src, Py_ssize_t n) noexcept nogil:
    """The index of the first value of ``src`` that is neither 0 nor 1, else -1
    (run only after :func:`_bytes_of_flags` refused, to name the value)."""
    cdef Py_ssize_t i
    for i in range(n):
        if _not_flag(src[i]):
            return i
    return -1


cdef int _LAYOUT_FLAGS = (cnp.NPY_ARRAY_C_CONTIGUOUS | cnp.NPY_ARRAY_F_CONTIGUOUS
                          | cnp.NPY_ARRAY_ALIGNED | cnp.NPY_ARRAY_NOTSWAPPED)


cdef inline int _layout(cnp.ndarray a) noexcept:
    """``a``'s contiguity and alignment flags, and NOTSWAPPED where its bytes are
    native (a requirement bit numpy never stores in an array's flags)."""
    cdef int f = cnp.PyArray_FLAGS(a) & _LAYOUT_FLAGS
    return f | cnp.NPY_ARRAY_NOTSWAPPED if cnp.PyArray_ISNOTSWAPPED(a) else f


cdef inline bint _float_flags_as_laid(int typenum, int layout, int order) noexcept:
    """Whether an array of ``typenum`` and ``layout`` (:func:`_layout`) holds
    flags :func:`_flag_array_bytes` converts: native, aligned float32/float64,
    contiguous in ``order`` (``NPY_ARRAY_C_CONTIGUOUS`` or
    ``NPY_ARRAY_F_CONTIGUOUS``). The one rule, for ndarrays and the sweeps'
    ``Arr`` alike."""
    cdef int need = order | cnp.NPY_ARRAY_ALIGNED | cnp.NPY_ARRAY_NOTSWAPPED
    return (typenum == cnp.NPY_FLOAT32 or typenum == cnp.NPY_FLOAT64) and (layout & need) == need


cdef inline bint _float_flag_array(cnp.ndarray a, int order) noexcept:
    """:func:`_float_flags_as_laid` of ndarray ``a``."""
    return _float_flags_as_laid(cnp.PyArray_TYPE(a), _layout(a), order)


ctypedef fused item:
    float
    double
    unsigned char


cdef void _gather(const char* src, item* dst, Py_ssize_t rows, Py_ssize_t n,
                  Py_ssize_t row_step, Py_ssize_t step) noexcept nogil:
    """``dst[i * n + j] = src[i * row_step bytes][j * step items]``, one loop per
    row. Steps 2-4 (``x[:, ::2]``, a field of ``[T, N, k]`` records) run a loop
    whose step is a constant, which the compiler vectorises into loads and
    permutes; rows apart (a column slice of a wider array) are copied whole.
    The runtime-step loop left for other steps compiles to gathers, no faster
    than scalar code. [2048, 256] views, znver4: float32 every other element
    94 -> 70 us, bool 146 -> 28-42 us (19 us where rows continue each other,
    one run: :func:`_c_copy`), float32 rows apart 72 -> 28 us."""
    cdef Py_ssize_t i
    for i in range(rows):
        if step == 2:
            _gather_row(<const item*>(src + i * row_step), dst + i * n, n, 2)
        elif step == 3:
            _gather_row(<const item*>(src + i * row_step), dst + i * n, n, 3)
        elif step == 4:
            _gather_row(<const item*>(src + i * row_step), dst + i * n, n, 4)
        elif step == 1:
            memcpy(dst + i * n, src + i * row_step, n * sizeof(item))
        else:
            _gather_row(<const item*>(src + i * row_step), dst + i * n, n, step)


cdef inline void _gather_row(const item* row, item* dst, Py_ssize_t n,
                             Py_ssize_t step) noexcept nogil:
    """One row of :func:`_gather`; inlined where ``step`` is a literal, so each
    call site compiles its own loop."""
    cdef Py_ssize_t j
    for j in range(n):
        dst[j] = row[j * step]


cdef inline Py_ssize_t _abs(Py_ssize_t x) noexcept nogil:
    return -x if x < 0 else x


cdef extern from *:
    """
    /* Register-tile transposes (16 x 16 float32, 8 x 8 float64, AVX-512): a
       tile loads TILE runs of TILE elements, one from each of w <= TILE
       columns (zeros for the rest), transposes them in registers (unpack, then
       128-bit lane shuffles) and stores TILE rows of w elements (masked
       stores where w < TILE: narrow arrays, the columns left over). */
    #include <stddef.h>
    #if defined(__AVX512F__)
    #include <immintrin.h>
    /* The 4 x 4 transpose of 128-bit lanes across x[c], x[s+c], x[2s+c],
       x[3s+c] into o[c], o[s+c], o[2s+c], o[3s+c] (SHUF: the lane shuffle
       of vector type V). */
    #define FASTPPO_LANES(V, SHUF, x, o, c, s) do {                                   \
        V u0 = SHUF(x[c], x[(s) + (c)], 0x44), u1 = SHUF(x[c], x[(s) + (c)], 0xEE);   \
        V u2 = SHUF(x[2 * (s) + (c)], x[3 * (s) + (c)], 0x44);                        \
        V u3 = SHUF(x[2 * (s) + (c)], x[3 * (s) + (c)], 0xEE);                        \
        o[c] = SHUF(u0, u2, 0x88);                                                    \
        o[(s) + (c)] = SHUF(u0, u2, 0xDD);                                            \
        o[2 * (s) + (c)] = SHUF(u1, u3, 0x88);                                        \
        o[3 * (s) + (c)] = SHUF(u1, u3, 0xDD);                                        \
    } while (0)
    /* r[i]: TILE elements of column i < w (T apart), zeros for the rest; a:
       the first unpack round, pairs of columns interleaved */
    #define FASTPPO_LOAD(TILE, LOADU, ZERO, UNLO, UNHI, y, T, w, r, a) do {            \
        int k_;                                                                       \
        for (k_ = 0; k_ < (TILE); k_++) r[k_] = k_ < (w) ? LOADU((y) + k_ * (T)) : ZERO(); \
        for (k_ = 0; k_ < (TILE); k_ += 2) {                                          \
            a[k_] = UNLO(r[k_], r[k_ + 1]);                                           \
            a[k_ + 1] = UNHI(r[k_], r[k_ + 1]);                                       \
        }                                                                             \
    } while (0)
    /* TILE rows of w elements, N apart: whole vectors, or masked where w < TILE */
    #define FASTPPO_STORE(TILE, STOREU, MSTORE, MASK, d, N, o, w) do {                 \
        int k_;                                                                       \
        if ((w) == (TILE)) {                                                          \
            for (k_ = 0; k_ < (TILE); k_++) STOREU((d) + k_ * (N), o[k_]);            \
        } else {                                                                      \
            MASK m_ = (MASK) ((1u << (w)) - 1);                                       \
            for (k_ = 0; k_ < (TILE); k_++) MSTORE((d) + k_ * (N), m_, o[k_]);        \
        }                                                                             \
    } while (0)
    static inline void fastppo_tile_f32(const float* y, ptrdiff_t T, float* d, ptrdiff_t N,
                                        int w) {
        __m512 r[16], a[16], o[16];
        int i, c;
        FASTPPO_LOAD(16, _mm512_loadu_ps, _mm512_setzero_ps, _mm512_unpacklo_ps,
                     _mm512_unpackhi_ps, y, T, w, r, a);
        for (i = 0; i < 16; i += 4) {
            __m512d p = _mm512_castps_pd(a[i]), q = _mm512_castps_pd(a[i + 2]);
            __m512d u = _mm512_castps_pd(a[i + 1]), v = _mm512_castps_pd(a[i + 3]);
            r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(p, q));
            r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p, q));
            r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(u, v));
            r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(u, v));
        }
        /* r[4g + c], lane L: column 4L + c, rows 4g..4g+3 */
        for (c = 0; c < 4; c++) FASTPPO_LANES(__m512, _mm512_shuffle_f32x4, r, o, c, 4);
        FASTPPO_STORE(16, _mm512_storeu_ps, _mm512_mask_storeu_ps, __mmask16, d, N, o, w);
    }
    static inline void fastppo_tile_f64(const double* y, ptrdiff_t T, double* d, ptrdiff_t N,
                                        int w) {
        __m512d r[8], a[8], o[8];
        int c;
        FASTPPO_LOAD(8, _mm512_loadu_pd, _mm512_setzero_pd, _mm512_unpacklo_pd,
                     _mm512_unpackhi_pd, y, T, w, r, a);
        /* a[2h + c], lane L: column 2L + c, rows 2h, 2h+1 */
        for (c = 0; c < 2; c++) FASTPPO_LANES(__m512d, _mm512_shuffle_f64x2, a, o, c, 2);
        FASTPPO_STORE(8, _mm512_storeu_pd, _mm512_mask_storeu_pd, __mmask8, d, N, o, w);
    }
    #define FASTPPO_TILES 1
    #else
    #define FASTPPO_TILES 0
    #endif

    /* d[t * cols + n] = y[n * ld + t] for t < rows, n < cols: the C-ordered copy of
       a [rows, cols] view whose columns are contiguous runs ld elements apart
       (a Fortran-ordered array, a transpose). Returns 0 (nothing done) in a
       build without AVX-512. Tiles of TILE columns: the first rows up to a
       64-byte boundary of the tile's first column element by element, then
       register tiles that each load whole cache lines (numpy's large arrays
       start 16 bytes past one: without that shift every tile straddled lines,
       and columns a power of two of bytes apart evicted the halves before the
       next tile came), then the rows left; the columns left over are one
       narrower tile (w < TILE), or copied directly when only one is left (a
       tile for it cost more: [4096, 17] float32 10.5 -> 12.1 us). */
    #define FASTPPO_TRANSPOSE(NAME, TYPE, TILE, TILEFN)                                     \
    static int NAME(const TYPE* y, ptrdiff_t ld, ptrdiff_t rows, ptrdiff_t cols, TYPE* d) { \
        ptrdiff_t n0, n, t, lead, w;                                                       \
        if (!FASTPPO_TILES) return 0;                                                      \
        for (n0 = 0; n0 < cols; n0 += TILE) {                                              \
            const TYPE* c0 = y + n0 * ld;                                                  \
            size_t mis = (size_t) c0 & 63;                                                 \
            w = cols - n0 < TILE ? cols - n0 : TILE;                                       \
            if (w == 1) { /* one column left: a tile would mostly move zeros */          \
                for (t = 0; t < rows; t++) d[t * cols + n0] = c0[t];                       \
                break;                                                                     \
            }                                                                              \
            lead = mis % sizeof(TYPE) ? 0 : (ptrdiff_t) (((64 - mis) & 63) / sizeof(TYPE)); \
            if (lead > rows) lead = rows;                                                  \
            for (t = 0; t < lead; t++)                                                     \
                for (n = n0; n < n0 + w; n++) d[t * cols + n] = y[n * ld + t];             \
            if (w == TILE)                                                                 \
                for (; t + TILE <= rows; t += TILE)                                        \
                    TILEFN(c0 + t, ld, d + t * cols + n0, cols, TILE);                     \
            else                                                                           \
                for (; t + TILE <= rows; t += TILE)                                        \
                    TILEFN(c0 + t, ld, d + t * cols + n0, cols, (int) w);                  \
            for (; t < rows; t++)                                                          \
                for (n = n0; n < n0 + w; n++) d[t * cols + n] = y[n * ld + t];             \
        }                                                                                  \
        return 1;                                                                          \
    }
    #if FASTPPO_TILES
    FASTPPO_TRANSPOSE(fastppo_transpose_f32, float, 16, fastppo_tile_f32)
    FASTPPO_TRANSPOSE(fastppo_transpose_f64, double, 8, fastppo_tile_f64)
    #else
    static int fastppo_transpose_f32(const float* y, ptrdiff_t ld, ptrdiff_t rows,
                                     ptrdiff_t cols, float* d) { return 0; }
    static int fastppo_transpose_f64(const double* y, ptrdiff_t ld, ptrdiff_t rows,
                                     ptrdiff_t cols, double* d) { return 0; }
    #endif
    """
    int fastppo_transpose_f32(const float* y, Py_ssize_t ld, Py_ssize_t rows,
                              Py_ssize_t cols, float* d) noexcept nogil
    int fastppo_transpose_f64(const double* y, Py_ssize_t ld, Py_ssize_t rows,
                              Py_ssize_t cols, double* d) noexcept nogil


cdef void _transpose(const char* src, item* dst, Py_ssize_t rows, Py_ssize_t n,
                     Py_ssize_t row_step, Py_ssize_t col_step) noexcept nogil:
    """:func:`_gather` for views whose columns lie further apart than their rows
    (a Fortran-ordered array, a transpose), in 8 x 8 blocks: eight columns
    read into a small tile, eight rows written from it, so a block's lines
    stay in L1 and, where rows are adjacent, both loops vectorise (reading
    element by element along rows missed a line per element). A Fortran
    [2048, 256] float32 array 1.47 ms -> 160-190 us, [4096, 17] 68 -> 23 us
    (znver4; numpy's strided copy was as slow as the element-wise loop).
    Where the columns are contiguous runs a whole number of items apart, an
    AVX-512 build moves register tiles instead (``fastppo_transpose_*``
    above): [2048, 256] float32 160-190 -> 80 us, float64 360-390 -> 190 us."""
    cdef Py_ssize_t rb = rows - rows % 8, nb = n - n % 8, i0, j0, i, j
    if row_step == sizeof(item) and col_step > 0 and col_step % sizeof(item) == 0:
        if item is float:
            if fastppo_transpose_f32(<const float*> src, col_step // sizeof(item), rows, n,
                                     dst):
                return
        elif item is double:
            if fastppo_transpose_f64(<const double*> src, col_step // sizeof(item), rows, n,
                                     dst):
                return
    for j0 in range(0, nb, 8):
        for i0 in range(0, rb, 8):
            if row_step == sizeof(item):  # adjacent rows: the tile's loads vectorise
                _block8(<const item*>(src + j0 * col_step + i0 * row_step), col_step,
                        dst + i0 * n + j0, n)
            else:
                for i in range(i0, i0 + 8):
                    for j in range(j0, j0 + 8):
                        dst[i * n + j] = (<const item*>(src + i * row_step + j * col_step))[0]
    # the edges: columns past the blocks (every row), then rows past them
    for j in range(nb, n):
        for i in range(rows):
            dst[i * n + j] = (<const item*>(src + i * row_step + j * col_step))[0]
    for i in range(rb, rows):
        for j in range(nb):
            dst[i * n + j] = (<const item*>(src + i * row_step + j * col_step))[0]


cdef inline void _block8(const item* src, Py_ssize_t col_step, item* dst,
                         Py_ssize_t n) noexcept nogil:
    """One 8 x 8 block of :func:`_transpose` whose rows are adjacent: its eight
    columns (``col_step`` bytes apart) into a tile, then eight rows of ``dst``
    (``n`` items apart) from it."""
    cdef item t[64]
    cdef const item* c
    cdef item* d
    cdef int ii, jj
    for jj in range(8):
        c = <const item*>(<const char*>src + jj * col_step)
        for ii in range(8):
            t[ii * 8 + jj] = c[ii]
    for ii in range(8):
        d = dst + ii * n
        for jj in range(8):
            d[jj] = t[ii * 8 + jj]


cdef inline bint _columns_apart(Py_ssize_t rows, Py_ssize_t row_step,
                                Py_ssize_t step) noexcept nogil:
    """Whether a view's neighbours within a row lie further apart than its
    rows (``row_step`` and ``step`` in bytes), so that a row loop would read a
    cache line per element (Fortran order, a transpose)."""
    return rows > 1 and _abs(step) > _abs(row_step)


def row_readable(cnp.ndarray a):
    """Whether a row loop may read the 1-D or 2-D ``a`` as it lies: aligned,
    and no further apart within a row than between rows (where
    :func:`c_contiguous` would copy row by row, not in blocks). An element-wise
    map over such a view skips the copy."""
    cdef int nd = cnp.PyArray_NDIM(a)
    if nd < 1 or nd > 2 or not cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_ALIGNED):
        return False
    return nd == 1 or cnp.PyArray_DIM(a, 1) < 2 or not _columns_apart(
        cnp.PyArray_DIM(a, 0), cnp.PyArray_STRIDE(a, 0), cnp.PyArray_STRIDE(a, 1)
    )


cdef inline void _copy(const char* src, item* dst, Py_ssize_t rows, Py_ssize_t n,
                       Py_ssize_t row_step, Py_ssize_t step) noexcept nogil:
    """The rows of a view in C order: blocked where its columns lie further
    apart than its rows, else row by row."""
    if _columns_apart(rows, row_step, step * <Py_ssize_t>sizeof(item)):
        _transpose(src, dst, rows, n, row_step, step * <Py_ssize_t>sizeof(item))
    else:
        _gather(src, dst, rows, n, row_step, step)


# ----------------------------------------------------------------- scratch blocks
# A call's temporaries (the C copy of a strided view, converted flags) are
# megabytes at rollout sizes. Allocated fresh each call, glibc could give them
# back to the system on free (its heap trim, depending on what earlier calls
# left on the heap) and take them again on the next call: a page fault per 4
# KiB. In such a process, vtrace [2048x256] float32 from four strided views
# took 6.2 ms with 3,040 page faults a call, against 0.86 ms for the
# contiguous call (znver4, pinned); with the cache below, 1.6 ms and about
# 100. Blocks of at least SCRATCH_MIN bytes therefore come from a small cache
# of freed blocks (at most SCRATCH_SLOTS of them, SCRATCH_MAX bytes in all,
# 64-byte aligned) and go back to it when the array they back is freed. Only
# temporaries use it; results are numpy's own allocations. The GIL guards
# the cache: blocks are taken and released with it held.
cdef extern from "stdlib.h":
    void* aligned_alloc(size_t alignment, size_t size) nogil
cdef enum:
    _SLOTS = 8
cdef Py_ssize_t _MIN = 1 << 18, _MAX = 1 << 26
SCRATCH_SLOTS, SCRATCH_MIN, SCRATCH_MAX = _SLOTS, _MIN, _MAX
cdef void* _slot_ptr[_SLOTS]
cdef Py_ssize_t _slot_size[_SLOTS]
cdef int _n_slots = 0
cdef Py_ssize_t _slot_bytes = 0


cdef class _Block:
    """The owner (``base``) of an array backed by a scratch block: returns the
    block to the cache when the array is freed."""
    cdef void* ptr
    cdef Py_ssize_t size

    def __dealloc__(self):
        global _n_slots, _slot_bytes
        if self.ptr == NULL:
            return
        if _n_slots < _SLOTS and _slot_bytes + self.size <= _MAX:
            _slot_ptr[_n_slots] = self.ptr
            _slot_size[_n_slots] = self.size
            _n_slots += 1
            _slot_bytes += self.size
        else:
            free(self.ptr)
        self.ptr = NULL


cdef cnp.ndarray _scratch(int nd, cnp.npy_intp* dims, int typenum, bint fortran):
    """An uninitialised temporary, ``PyArray_EMPTY``'s twin, whose memory
    (from SCRATCH_MIN bytes) is a cached block: the best fit among the cached
    blocks no more than twice its size, else a new one."""
    global _n_slots, _slot_bytes
    cdef cnp.dtype descr = cnp.PyArray_DescrFromType(typenum)
    cdef Py_ssize_t nbytes = descr.itemsize, i, best = -1
    for i in range(nd):
        nbytes *= dims[i]
    if nbytes < _MIN:
        return cnp.PyArray_EMPTY(nd, dims, typenum, fortran)
    for i in range(_n_slots):
        if nbytes <= _slot_size[i] <= 2 * nbytes and (
                best < 0 or _slot_size[i] < _slot_size[best]):
            best = i
    cdef _Block block = _Block.__new__(_Block)
    if best >= 0:
        block.ptr, block.size = _slot_ptr[best], _slot_size[best]
        _n_slots -= 1
        _slot_bytes -= block.size
        _slot_ptr[best], _slot_size[best] = _slot_ptr[_n_slots], _slot_size[_n_slots]
    else:
        block.size = (nbytes + 63) // 64 * 64
        block.ptr = aligned_alloc(64, block.size)
        if block.ptr == NULL:
            raise MemoryError()
    # with its own data, numpy takes these as the array's flags: writeable,
    # aligned, and C- or Fortran-ordered
    cdef cnp.ndarray out = cnp.PyArray_New(cnp.ndarray, nd, dims, typenum, NULL, block.ptr,
                                           0, cnp.NPY_ARRAY_FARRAY if fortran
                                           else cnp.NPY_ARRAY_CARRAY, None)
    cnp.set_array_base(out, block)
    return out


def scratch_cached() -> tuple:
    """``(blocks, bytes)`` held by the scratch cache now (for tests)."""
    return _n_slots, _slot_bytes


cdef object _c_copy(cnp.ndarray a):
    """A C-ordered copy of ``a`` (``np.ascontiguousarray``'s values). Aligned
    1-D and 2-D float32/float64/bool/uint8 arrays are gathered in C: for every
    other float32 of a [512, 64] view, 3.5 us against 9.3 us for numpy's
    strided copy (znver4); anything else is numpy's copy."""
    cdef int nd = cnp.PyArray_NDIM(a)
    cdef int t = cnp.PyArray_TYPE(a)
    cdef Py_ssize_t size = cnp.PyArray_ITEMSIZE(a)
    if nd < 1 or nd > 2 or not cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_ALIGNED) or not (
        t == cnp.NPY_FLOAT32 or t == cnp.NPY_FLOAT64 or t == cnp.NPY_BOOL or t == cnp.NPY_UINT8
    ):
        return cnp.PyArray_NewCopy(a, cnp.NPY_CORDER)
    cdef Py_ssize_t rows = cnp.PyArray_DIM(a, 0) if nd == 2 else 1
    cdef Py_ssize_t n = cnp.PyArray_DIM(a, nd - 1)
    cdef Py_ssize_t row_step = cnp.PyArray_STRIDE(a, 0) if nd == 2 else 0
    cdef Py_ssize_t step = cnp.PyArray_STRIDE(a, nd - 1) // size  # aligned: a whole number
    cdef cnp.ndarray out = _scratch(nd, cnp.PyArray_DIMS(a), t, False)
    cdef const char* src = <const char*>cnp.PyArray_DATA(a)
    cdef void* dst = cnp.PyArray_DATA(out)
    if rows > 1 and row_step == n * step * size:  # rows that continue each other: one run
        n, rows = n * rows, 1
    with nogil:
        if size == 4:
            _copy(src, <float*>dst, rows, n, row_step, step)
        elif size == 8:
            _copy(src, <double*>dst, rows, n, row_step, step)
        else:
            _copy(src, <unsigned char*>dst, rows, n, row_step, step)
    return out


def c_contiguous(cnp.ndarray a):
    """``np.ascontiguousarray(a)`` for the general path: ``a`` when C-contiguous,
    else the copy :func:`_c_copy` makes (the small-call path's, so both paths
    copy alike)."""
    if cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_C_CONTIGUOUS):
        return a
    return _c_copy(a)


cdef inline bint _unit(object x) noexcept:
    """A Python float in [0, 1]."""
    if type(x) is not float:
        return False
    cdef double v = <double>x
    return 0.0 <= v <= 1.0


cdef inline bint _positive(object x) noexcept:
    """A Python float > 0 (inf allowed, NaN not)."""
    if type(x) is not float:
        return False
    return <double>x > 0.0


# DLPack's C ABI (dlpack.h): the DLTensor a producer fills, and the table of
# the exchange API (DLPack 1.2) that hands one over without a capsule.
cdef extern from *:
    """
    typedef struct { int32_t device_type; int32_t device_id; } fastppo_DLDevice;
    typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } fastppo_DLDataType;
    typedef struct {
        void* data; fastppo_DLDevice device; int32_t ndim; fastppo_DLDataType dtype;
        int64_t* shape; int64_t* strides; uint64_t byte_offset;
    } fastppo_DLTensor;
    typedef struct { uint32_t major; uint32_t minor; } fastppo_DLPackVersion;
    typedef struct {
        fastppo_DLPackVersion version; void* prev_api;
        void* managed_tensor_allocator;
        void* managed_tensor_from_py_object_no_sync;
        void* managed_tensor_to_py_object_no_sync;
        int (*dltensor_from_py_object_no_sync)(void*, fastppo_DLTensor*);
        void* current_work_stream;
    } fastppo_DLPackExchangeAPI;
    """
    ctypedef struct DLDevice "fastppo_DLDevice":
        int32_t device_type
    ctypedef struct DLDataType "fastppo_DLDataType":
        uint8_t code
        uint8_t bits
        uint16_t lanes
    ctypedef struct DLTensor "fastppo_DLTensor":
        void* data
        DLDevice device
        int32_t ndim
        DLDataType dtype
        int64_t* shape
        int64_t* strides
        uint64_t byte_offset
    ctypedef struct DLPackVersion "fastppo_DLPackVersion":
        uint32_t major
    ctypedef struct DLPackExchangeAPI "fastppo_DLPackExchangeAPI":
        DLPackVersion version
        int (*dltensor_from_py_object_no_sync)(void*, DLTensor*) noexcept


cdef extern from *:
    """
    /* A writeable ndarray over memory it does not own (its base is set after). */
    static PyObject* fastppo_view_of(int typenum, int nd, npy_intp* dims, npy_intp* steps,
                                     void* data) {
        return PyArray_NewFromDescr(&PyArray_Type, PyArray_DescrFromType(typenum), nd, dims,
                                    steps, data, NPY_ARRAY_WRITEABLE, NULL);
    }
    """
    object _view_of "fastppo_view_of"(int, int, cnp.npy_intp*, cnp.npy_intp*, void*)


cdef enum:
    _DL_INT = 0
    _DL_UINT = 1
    _DL_FLOAT = 2
    _DL_BOOL = 6
    _DL_CPU = 1


# torch's DLPack exchange API (DLPack 1.2+, torch.Tensor.__dlpack_c_exchange_api__),
# once torch is imported; NULL where torch has none
cdef const DLPackExchangeAPI* _dlpack_api = NULL
cdef object _is_neg = None  # torch.Tensor.is_neg


# numpy's type numbers by DLPack type code (int, uint, float) and width (8,
# 16, 32, 64 bits); -1 where numpy has none (an 8-bit float)
cdef int _DL_TYPES[3][4]
_DL_TYPES[_DL_INT][:] = [cnp.NPY_INT8, cnp.NPY_INT16, cnp.NPY_INT32, cnp.NPY_INT64]
_DL_TYPES[_DL_UINT][:] = [cnp.NPY_UINT8, cnp.NPY_UINT16, cnp.NPY_UINT32, cnp.NPY_UINT64]
_DL_TYPES[_DL_FLOAT][:] = [-1, cnp.NPY_FLOAT16, cnp.NPY_FLOAT32, cnp.NPY_FLOAT64]


cdef inline int _dl_typenum(DLDataType t) noexcept:
    """The numpy type number of a DLPack dtype numpy views as it is, else -1
    (bfloat16, complex, vectors: the general path explains)."""
    cdef int w = 0 if t.bits == 8 else 1 if t.bits == 16 else 2 if t.bits == 32 else 3
    if t.lanes != 1 or t.bits != 8 << w:
        return -1
    if t.code == _DL_BOOL:
        return cnp.NPY_BOOL if w == 0 else -1
    return _DL_TYPES[t.code][w] if t.code <= _DL_FLOAT else -1


cdef int _dl_read(object x, DLTensor* t) except -2:
    """Fill ``t`` for a CPU ``torch.Tensor`` ``x`` numpy can read as it lies and
    return its numpy type number, else -1 (declined; the general path
    explains).

    One C call of torch's DLPack exchange API fills the DLTensor (pointer,
    shape, strides, dtype, device) on the stack, with no allocation and no
    Python arguments to parse (47 ns, znver4). DLPack has no negative bit: a
    tensor with it set (``z.conj().imag``) would be read with its values'
    signs flipped, so it is declined, as ``numpy()`` refuses it (``is_neg``,
    65 ns, is the one Python-level call). A tensor that needs a gradient is
    read as its detached view, which is what the general path takes."""
    cdef int typenum
    if _is_neg(x):
        return -1
    if _dlpack_api.dltensor_from_py_object_no_sync(<void*>x, t) != 0:
        PyErr_Clear()  # the general path explains
        return -1
    typenum = _dl_typenum(t.dtype)
    if t.device.device_type != _DL_CPU or typenum < 0 or not 0 <= t.ndim <= 64:
        return -1
    return typenum


cdef inline void _dl_steps(DLTensor* t, cnp.npy_intp* dims, cnp.npy_intp* steps) noexcept:
    """``t``'s shape and byte steps (a compact row-major tensor has no strides
    before DLPack 1.2)."""
    cdef cnp.npy_intp item = t.dtype.bits // 8, size = item
    cdef int k
    for k in range(t.ndim - 1, -1, -1):
        dims[k] = <cnp.npy_intp>t.shape[k]
        if t.strides != NULL:
            steps[k] = <cnp.npy_intp>t.strides[k] * item
        else:
            steps[k] = size
            size *= dims[k]


cdef object _dlpack_view(object x):
    """The numpy view of a CPU ``torch.Tensor`` ``x``, with ``x`` as its base (as
    ``Tensor.numpy()`` makes it), else None (:func:`_dl_read` says which).
    0.15-0.2 us a view, against 0.7 for ``Tensor.numpy()`` (znver4)."""
    cdef DLTensor t
    cdef cnp.npy_intp dims[64]
    cdef cnp.npy_intp steps[64]
    cdef int typenum = _dl_read(x, &t)
    if typenum < 0:
        return None
    _dl_steps(&t, dims, steps)
    a = _view_of(typenum, t.ndim, dims, steps, <char*>t.data + t.byte_offset)
    cnp.set_array_base(a, x)  # the tensor keeps its storage alive
    return a


cdef const DLPackExchangeAPI* _exchange_api(object tensor_type) noexcept:
    """The DLPack exchange API of ``tensor_type`` (major version 1, with the
    non-owning export), else NULL."""
    cdef const DLPackExchangeAPI* api
    try:
        cap = getattr(tensor_type, "__dlpack_c_exchange_api__", None)
    except Exception:
        return NULL
    if cap is None or not PyCapsule_IsValid(cap, "dlpack_exchange_api"):
        return NULL
    api = <const DLPackExchangeAPI*>PyCapsule_GetPointer(cap, "dlpack_exchange_api")
    if api.version.major != 1 or api.dltensor_from_py_object_no_sync == NULL:
        return NULL
    return api


cdef object _torch_tensor_type():
    """``torch.Tensor`` once torch is imported, else None. torch is looked up,
    never imported: a process without it pays one dict lookup per
    non-ndarray argument."""
    global _tensor_type, _dlpack_api, _is_neg
    if _tensor_type is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        _is_neg = getattr(torch.Tensor, "is_neg", None)
        if _is_neg is not None:
            _dlpack_api = _exchange_api(torch.Tensor)
        _tensor_type = torch.Tensor
    return _tensor_type


cdef object _ndarray_of(object x):
    """``x`` for an ndarray, the numpy view of a plain ``torch.Tensor`` (what the
    general path's ``as_array`` takes first), else None (declined).

    torch is looked up, never imported (:func:`_torch_tensor_type`). A
    tensor that needs a gradient is taken
    as its detached view, as the general path takes it; one numpy cannot view
    at all (off the CPU, bfloat16) goes to the general path, which explains.
    """
    if type(x) is cnp.ndarray:
        return x
    if _torch_tensor_type() is None or type(x) is not _tensor_type:
        return None
    if _dlpack_api != NULL:
        try:
            v = _dlpack_view(x)
        except Exception:
            v = None  # is_neg refused; numpy() below decides
        if v is not None:
            return v
    try:
        return x.numpy()
    except Exception:
        pass
    # numpy cannot view a tensor that needs a gradient: its detached view is
    # what the general path's as_array takes. (Checked only after the refusal,
    # so a plain tensor pays nothing; the raise above is most of this call.)
    try:
        if x.requires_grad:
            return x.detach().numpy()
    except Exception:
        pass
    return None


ctypedef unsigned char uchar


cdef inline void _lag_run(const uchar* a, Py_ssize_t sa, const uchar* b, Py_ssize_t sb,
                          uchar* o, Py_ssize_t so, Py_ssize_t n) noexcept nogil:
    """``o[k] = not (a[k] or b[k])`` along n elements, each array's ``s*``
    bytes apart (constants where inlined: gcc vectorises the common ones)."""
    cdef Py_ssize_t k
    for k in range(n):
        o[k * so] = (a[k * sa] | b[k * sb]) == 0


cdef inline void _lag_span(const uchar* a, Py_ssize_t sa, const uchar* b, Py_ssize_t sb,
                           uchar* o, Py_ssize_t so, Py_ssize_t n) noexcept nogil:
    if sa == 1 and sb == 1 and so == 1:
        _lag_run(a, 1, b, 1, o, 1, n)
    elif sa == 2 and sb == 2 and so == 1:
        _lag_run(a, 2, b, 2, o, 1, n)
    else:
        _lag_run(a, sa, b, sb, o, so, n)


def next_valid(cnp.ndarray a, cnp.ndarray b, cnp.ndarray out):
    """``out[t] = not (a[t - 1] or b[t - 1])`` for ``t >= 1`` (row 0 is left to
    the caller): ``next_step_valid``'s lag, read from 1-byte flag arrays of
    any strides and written into ``out`` (any strides) in one pass, along
    ``out``'s rows when they are its shorter step, else down its columns
    (``next_step_valid`` [2048, 256]: 29 -> 20 us from bool flags, 64 -> 31 us
    from every other byte, where numpy's two passes followed the flags' copy;
    znver4, one pinned core).
    Raises ``ValueError`` unless all three are 1-D or 2-D 1-byte arrays of one
    shape, ``out`` writeable and apart from both."""
    cdef int nd = cnp.PyArray_NDIM(out)
    if (nd < 1 or nd > 2 or cnp.PyArray_NDIM(a) != nd or cnp.PyArray_NDIM(b) != nd
            or cnp.PyArray_ITEMSIZE(a) != 1 or cnp.PyArray_ITEMSIZE(b) != 1
            or cnp.PyArray_ITEMSIZE(out) != 1
            or not cnp.PyArray_CHKFLAGS(out, cnp.NPY_ARRAY_WRITEABLE)
            or not cnp.PyArray_SAMESHAPE(a, out) or not cnp.PyArray_SAMESHAPE(b, out)):
        raise ValueError("next_valid: 1-D or 2-D 1-byte arrays of one shape, out writeable")
    if _overlap(_span(out), _span(a)) or _overlap(_span(out), _span(b)):
        raise ValueError("next_valid: out overlaps an input")
    cdef Py_ssize_t T = cnp.PyArray_DIM(out, 0), N = cnp.PyArray_DIM(out, 1) if nd == 2 else 1
    cdef Py_ssize_t a0 = cnp.PyArray_STRIDE(a, 0), b0 = cnp.PyArray_STRIDE(b, 0)
    cdef Py_ssize_t o0 = cnp.PyArray_STRIDE(out, 0)
    cdef Py_ssize_t a1 = cnp.PyArray_STRIDE(a, 1) if nd == 2 else 0
    cdef Py_ssize_t b1 = cnp.PyArray_STRIDE(b, 1) if nd == 2 else 0
    cdef Py_ssize_t o1 = cnp.PyArray_STRIDE(out, 1) if nd == 2 else 0
    cdef const uchar* pa = <const uchar*> cnp.PyArray_DATA(a)
    cdef const uchar* pb = <const uchar*> cnp.PyArray_DATA(b)
    cdef uchar* po = <uchar*> cnp.PyArray_DATA(out)
    cdef Py_ssize_t t, n
    if T < 2 or N == 0:
        return
    with nogil:
        if N > 1 and _abs(o1) <= _abs(o0):  # along rows: row t from row t - 1
            if a0 == N * a1 and b0 == N * b1 and o0 == N * o1:  # rows continue: one run
                _lag_span(pa, a1, pb, b1, po + o0, o1, (T - 1) * N)
            else:
                for t in range(1, T):
                    _lag_span(pa + (t - 1) * a0, a1, pb + (t - 1) * b0, b1, po + t * o0, o1, N)
        elif N > 1 and a1 == T * a0 and b1 == T * b0 and o1 == T * o0:
            # columns that continue each other (Fortran order): one run, whose
            # first step of each column reads the column before (reset by the
            # caller with row 0)
            _lag_span(pa, a0, pb, b0, po + o0, o0, T * N - 1)
        else:
            for n in range(N):
                _lag_span(pa + n * a1, a0, pb + n * b1, b0, po + o0 + n * o1, o0, T - 1)


def float_flags(cnp.ndarray a):
    """``(bytes, -1)`` for aligned, native, C- or Fortran-contiguous
    float32/float64 0/1 flags: their uint8 values (``!= 0``) in ``a``'s order;
    ``(None, k)`` where the value at flat index ``k`` (memory order) is neither
    0 nor 1. The general path's conversion (``_checks.flag_array``); raises
    ``ValueError`` for any other array (the caller converts first)."""
    cdef bint c = cnp.PyArray_CHKFLAGS(a, cnp.NPY_ARRAY_C_CONTIGUOUS)
    if not _float_flag_array(a, cnp.NPY_ARRAY_C_CONTIGUOUS if c else cnp.NPY_ARRAY_F_CONTIGUOUS):
        raise ValueError("float_flags: an aligned, native, contiguous float32/float64 array")
    u = _flag_array_bytes(a, not c)
    if u is not None:
        return u, -1
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
        return None, _first_bad_flag(<const float*>cnp.PyArray_DATA(a), n)
    return None, _first_bad_flag(<const double*>cnp.PyArray_DATA(a), n)


def flag_bytes(cnp.ndarray a):
    """``a`` for bool or uint8 flags; for C-contiguous float32/float64 0/1 flags
    their uint8 bytes (the sweeps' conversion, :func:`_bytes_of_flags`); None
    for anything else or a value that is neither 0 nor 1, which the general
    path names."""
    cdef int t = cnp.PyArray_TYPE(a)
    if t == cnp.NPY_BOOL or t == cnp.NPY_UINT8:
        return a
    if not _float_flag_array(a, cnp.NPY_ARRAY_C_CONTIGUOUS):
        return None
    return _flag_array_bytes(a, False)


cdef object _flag_array_bytes(cnp.ndarray a, bint fortran):
    """The uint8 array of contiguous float32/float64 0/1 flags ``a`` (C order, or
    Fortran order where ``a`` is Fortran-ordered: the same flat run), or
    None where a value is neither 0 nor 1."""
    cdef cnp.ndarray u = _scratch(cnp.PyArray_NDIM(a), cnp.PyArray_DIMS(a), cnp.NPY_UINT8,
                                  fortran)
    cdef Py_ssize_t n = cnp.PyArray_SIZE(a)
    cdef unsigned char* dst = <unsigned char*>cnp.PyArray_DATA(u)
    cdef bint ok
    if cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32:
        ok = _bytes_of_flags(<const float*>cnp.PyArray_DATA(a), dst, n)
    else:
        ok = _bytes_of_flags(<const double*>cnp.PyArray_DATA(a), dst, n)
    return u if ok else None


def ndarray_of(x):
    """:func:`_ndarray_of` for the running statistics' per-step calls."""
    return _ndarray_of(x)


cdef object _as_array_rest = None  # _checks' views of everything else


def set_as_array_rest(rest):
    """The Python function :func:`as_array` hands what it does not view in C
    (``_checks._as_array_rest``: DLPack objects, ``__array__``, the errors)."""
    global _as_array_rest
    _as_array_rest = rest


def as_array(str fn, str name, x):
    """``_checks.as_array``: an ndarray (subclasses too) as it is, a plain CPU
    tensor's view (:func:`_ndarray_of`), else ``set_as_array_rest``'s
    function. In C because every array argument of the general paths passes
    here: 35 against 85 ns an ndarray, and 0.15 us less a tensor than the
    Python function and its call of :func:`ndarray_of` (znver4)."""
    if type(x) is cnp.ndarray:
        return x
    v = _ndarray_of(x)
    if v is not None:
        return v
    if isinstance(x, cnp.ndarray):
        return x
    return _as_array_rest(fn, name, x)


cdef struct Arr:
    # What a sweep's recogniser reads of one input: an ndarray's fields, or a
    # torch tensor's DLTensor with no ndarray made around it (an ndarray made
    # and freed cost 45 ns a tensor, on [8x4] calls of 1.4-2.4 us)
    char* data
    int type
    cnp.npy_intp item
    int nd
    cnp.npy_intp dims[2]
    cnp.npy_intp steps[2]
    int flags           # its layout (:func:`_layout`'s bits)


cdef inline bint _arr_of_ndarray(cnp.ndarray a, Arr* A) noexcept:
    """Fill ``A`` from a 0-D, 1-D or 2-D ndarray; False for more dimensions."""
    cdef int i, nd = cnp.PyArray_NDIM(a)
    if nd > 2:
        return False
    A.data = <char*>cnp.PyArray_DATA(a)
    A.type = cnp.PyArray_TYPE(a)
    A.item = cnp.PyArray_ITEMSIZE(a)
    A.nd = nd
    for i in range(nd):
        A.dims[i] = cnp.PyArray_DIM(a, i)
        A.steps[i] = cnp.PyArray_STRIDE(a, i)
    A.flags = _layout(a)
    return True


cdef bint _contiguous(int nd, cnp.npy_intp* dims, cnp.npy_intp* steps, cnp.npy_intp item,
                      bint fortran) noexcept:
    """numpy's contiguity rule: the steps of every axis longer than 1 are those
    of a compact array, in C (last axis fastest) or Fortran order."""
    cdef cnp.npy_intp want = item
    cdef int k, i
    for k in range(nd):
        if dims[k] == 0:  # an empty array is contiguous whatever its steps
            return True
    for k in range(nd):
        i = k if fortran else nd - 1 - k
        if dims[i] != 1:
            if steps[i] != want:
                return False
            want *= dims[i]
    return True


cdef int _arr_of_tensor(object x, Arr* A) noexcept:
    """Fill ``A`` from a CPU ``torch.Tensor`` of at most two dimensions
    (:func:`_dl_read`) and return 1, else 0 (declined: the general path
    explains)."""
    cdef DLTensor t
    cdef int typenum
    try:
        typenum = _dl_read(x, &t)
    except Exception:
        return 0  # is_neg refused: the general path explains
    if typenum < 0 or t.ndim > 2:
        return 0
    _dl_steps(&t, A.dims, A.steps)
    A.data = <char*>t.data + t.byte_offset
    A.type = typenum
    A.item = t.dtype.bits // 8
    A.nd = t.ndim
    A.flags = cnp.NPY_ARRAY_NOTSWAPPED
    if <uintptr_t>A.data % <uintptr_t>A.item == 0:
        A.flags |= cnp.NPY_ARRAY_ALIGNED
    if _contiguous(A.nd, A.dims, A.steps, A.item, False):
        A.flags |= cnp.NPY_ARRAY_C_CONTIGUOUS
    if _contiguous(A.nd, A.dims, A.steps, A.item, True):
        A.flags |= cnp.NPY_ARRAY_F_CONTIGUOUS
    return 1


cdef inline Span _arr_span(Arr* A) noexcept:
    return _span_of(A.data, A.item, A.nd, A.dims, A.steps)


cdef inline bint _arr_shape_is(Arr* A, int nd, cnp.npy_intp* dims) noexcept:
    return _dims_are(A.nd, A.dims, nd, dims)


cdef inline bint _arr_has(Arr* A, int flags) noexcept:
    """``A`` has every bit of ``flags`` and native byte order."""
    cdef int need = flags | cnp.NPY_ARRAY_NOTSWAPPED
    return (A.flags & need) == need


cdef class _Batch:
    """The recognised inputs of one sweep call (pointers, spans, and the
    rewards' dtype and shape). Each input is an ndarray or a plain CPU
    ``torch.Tensor``, read through an :c:type:`Arr`; an ndarray is made
    (a tensor's view, a copy in the sweep's order, converted float flags)
    only where a copy or conversion needs one."""
    cdef int kind
    cdef bint large                 # at or above the kind's limit: maybe threaded
    cdef int d                      # 0 float32, 1 float64
    cdef int rtype                  # rewards' numpy type number
    cdef int nd                     # rewards' dimensions (1 or 2)
    cdef cnp.npy_intp dims[2]       # and shape
    cdef int order                  # every array's contiguity flag: C, or F (batch-major)
    cdef int64_t T, N
    cdef int64_t options
    cdef void* r
    cdef void* lv
    cdef double lv64
    cdef float lv32
    cdef unsigned char* te
    cdef unsigned char* tr
    cdef unsigned char* ok
    cdef void* fv
    cdef Span spans[18]             # 9 inputs, and the caller's views of those copied
    cdef int n_spans
    cdef list copies                # what _ordered copied: its pointers are in use

    cdef int _read(self, object x, Arr* A) except -1:
        """Fill ``A`` from ``x``: 1 for an ndarray or a plain CPU tensor read as
        it lies, 0 for anything else (declined)."""
        if type(x) is cnp.ndarray:
            return _arr_of_ndarray(<cnp.ndarray>x, A)
        if x is None or _torch_tensor_type() is None or type(x) is not _tensor_type:
            return 0
        if _dlpack_api == NULL:  # a torch without the exchange API: numpy()
            v = _ndarray_of(x)
            return 0 if v is None else _arr_of_ndarray(<cnp.ndarray>self._keep(v), A)
        return _arr_of_tensor(x, A)

    cdef bint _add(self, Arr* A) noexcept:
        self.spans[self.n_spans] = _arr_span(A)
        self.n_spans += 1
        return True

    cdef object _ordered(self, object x, Arr* A):
        """:meth:`_read` ``x`` into ``A`` and put it in the sweep's order
        (:meth:`_order`): the object ``A`` then describes, or None (declined)."""
        if not self._read(x, A):
            return None
        return self._order(x, A)

    cdef object _order(self, object x, Arr* A):
        """``x`` (read into ``A``) as it lies, or, for a native-byte-order array
        without the sweep's order flag (strided, unaligned, or
        Fortran-ordered in a time-major call), the copy the general path
        would make (:func:`_c_copy`), with ``A`` describing it and the view's
        bounds recorded for the overlap test. A 2-D array is copied only in a
        time-major sweep: a batch-major one takes every 2-D array in place or
        declines, as the general path keeps batch-major only when every 2-D
        array is Fortran-ordered (a 1-D one, ``last_values``, has no order to
        keep)."""
        if ((A.flags & (self.order | cnp.NPY_ARRAY_ALIGNED)) == self.order | cnp.NPY_ARRAY_ALIGNED
                or (self.order != cnp.NPY_ARRAY_C_CONTIGUOUS and A.nd != 1)
                or not A.flags & cnp.NPY_ARRAY_NOTSWAPPED):
            return x
        a = self._ndarray(x)
        if a is None:
            return None
        self._add(A)
        return self._take(_c_copy(<cnp.ndarray>a), A)

    cdef object _ndarray(self, object x):
        """``x`` as an ndarray: itself, or a tensor's view (kept for the call);
        None if the view is refused after all."""
        if type(x) is cnp.ndarray:
            return x
        v = _ndarray_of(x)
        return None if v is None else self._keep(v)

    cdef object _take(self, object a, Arr* A):
        """Use ndarray ``a`` (a copy or a conversion) for the call: ``A`` describes it."""
        self._keep(a)
        _arr_of_ndarray(<cnp.ndarray>a, A)
        return a

    cdef bint _float_as_r(self, Arr* A, int flags) noexcept:
        """``A`` has the rewards' dtype and shape and ``flags``, native byte order."""
        return (A.type == self.rtype and _arr_has(A, flags)
                and _arr_shape_is(A, self.nd, &self.dims[0]))

    cdef bint _flags_as_r(self, Arr* A) noexcept:
        """``A`` is a bool/uint8 array of the rewards' shape in the sweep's order."""
        return ((A.type == cnp.NPY_BOOL or A.type == cnp.NPY_UINT8)
                and (A.flags & self.order) != 0 and _arr_shape_is(A, self.nd, &self.dims[0]))

    cdef int _flag_input(self, object x, Arr* A) except -1:
        """Read flags ``x`` into ``A`` (:meth:`_ordered`); float32/float64 flags
        of the rewards' shape in the sweep's order become the uint8 array of
        their 0/1 values (the general path's conversion; the float array's
        bounds recorded). 1 when ``A`` then holds bool/uint8 flags of the
        rewards' shape in the sweep's order, 0 otherwise (a float flag that is
        not 0/1 included: the general path names it)."""
        x = self._ordered(x, A)
        if x is None:
            return 0
        if (_float_flags_as_laid(A.type, A.flags, self.order)
                and _arr_shape_is(A, self.nd, &self.dims[0])):
            a = self._ndarray(x)
            if a is None:
                return 0
            u = _flag_array_bytes(<cnp.ndarray>a, self.order == cnp.NPY_ARRAY_F_CONTIGUOUS)
            if u is None:
                return 0
            self._add(A)
            self._take(u, A)
        return self._flags_as_r(A)

    cdef bint take(self, int kind, object rewards, object last_values, object terminated,
                   object truncated, object final_values, object valid) except -1:
        """Recognise the inputs every sweep has; False: use the general path."""
        cdef Arr A
        if not self._read(rewards, &A):
            return False
        cdef int t = A.type
        cdef int nd = A.nd
        if t == cnp.NPY_FLOAT32:
            self.d = 0
        elif t == cnp.NPY_FLOAT64:
            self.d = 1
        else:
            return False
        if nd == 1:
            self.T = A.dims[0]
            self.N = 1
        elif nd == 2:
            self.T = A.dims[0]
            self.N = A.dims[1]
        else:
            return False
        if self.T == 0 or self.N == 0:
            return False
        self.kind = kind
        self.large = self.T * self.N >= _limits[kind]
        if not A.flags & cnp.NPY_ARRAY_NOTSWAPPED:
            return False
        # time-major C order, or (the general path's rule) every 2-D array
        # Fortran-ordered: batch-major [N, T] rows passed as their transposes
        self.options = 0
        self.order = cnp.NPY_ARRAY_C_CONTIGUOUS
        self.n_spans = 0
        if (nd == 2 and self.T > 1 and self.N > 1
                and not A.flags & cnp.NPY_ARRAY_C_CONTIGUOUS
                and (A.flags & (cnp.NPY_ARRAY_F_CONTIGUOUS | cnp.NPY_ARRAY_ALIGNED))
                == cnp.NPY_ARRAY_F_CONTIGUOUS | cnp.NPY_ARRAY_ALIGNED):
            self.order = cnp.NPY_ARRAY_F_CONTIGUOUS
            self.options = BATCH_MAJOR
        if self._order(rewards, &A) is None:
            return False
        self.rtype = t
        self.nd = nd
        self.dims[0] = A.dims[0]
        self.dims[1] = A.dims[1] if nd == 2 else 1
        self.r = A.data
        self._add(&A)
        # last_values: [N]; for 1-D rewards also a Python float, [] or [1]
        if type(last_values) is float and nd == 1:
            self.lv64 = <double>last_values
            self.lv32 = <float>self.lv64  # rounds to nearest, as np.full(1, x, float32)
            self.lv = <void*>&self.lv32 if self.d == 0 else <void*>&self.lv64
        else:
            if self._ordered(last_values, &A) is None:
                return False
            if not (
                A.type == t
                and _arr_has(&A, _FLOAT_FLAGS)
                and (A.dims[0] if A.nd == 1 else 1) == self.N
                and (A.nd == 1 or (nd == 1 and A.nd == 0))
            ):
                return False
            self.lv = A.data
            self._add(&A)
        if not self._flag_input(terminated, &A):
            return False
        self.te = <unsigned char*>A.data
        self._add(&A)
        self.tr = self.te
        self.ok = self.te
        self.fv = self.r
        if truncated is not None:
            if not self._flag_input(truncated, &A):
                return False
            self.tr = <unsigned char*>A.data
            self._add(&A)
            self.options |= HAS_TRUNC
        if final_values is not None:
            if (self._ordered(final_values, &A) is None
                    or not self._float_as_r(&A, self.order | cnp.NPY_ARRAY_ALIGNED)):
                return False
            self.fv = A.data
            self._add(&A)
            self.options |= HAS_FINAL
        if valid is not None:
            if not self._flag_input(valid, &A):
                return False
            self.ok = <unsigned char*>A.data
            self._add(&A)
            self.options |= HAS_VALID
        # A truncation with neither final values nor a valid mask may be
        # ambiguous (API.md): the general path scans for it and explains.
        if truncated is not None and final_values is None and valid is None:
            return False
        return True

    cdef object _keep(self, object copy):
        if self.copies is None:
            self.copies = []
        self.copies.append(copy)
        return copy

    cdef void* take_float(self, object x) except? NULL:
        """Another float input of the rewards' dtype and shape (or its copy,
        see :meth:`_ordered`): its data; NULL: use the general path."""
        cdef Arr A
        if (self._ordered(x, &A) is None
                or not self._float_as_r(&A, self.order | cnp.NPY_ARRAY_ALIGNED)):
            return NULL
        self._add(&A)
        return A.data

    cdef object outputs(self, object out, int n):
        """``n`` output arrays: fresh, or the caller's if usable; None otherwise."""
        cdef cnp.ndarray o
        cdef int i, j, flags
        cdef Span s[2]
        cdef int fortran = self.order == cnp.NPY_ARRAY_F_CONTIGUOUS
        if out is None:
            if n == 1:
                return (cnp.PyArray_EMPTY(self.nd, &self.dims[0], self.rtype, fortran),)
            return (
                cnp.PyArray_EMPTY(self.nd, &self.dims[0], self.rtype, fortran),
                cnp.PyArray_EMPTY(self.nd, &self.dims[0], self.rtype, fortran),
            )
        if n == 1:
            outs = (out,)
        elif (type(out) is tuple or type(out) is list) and len(out) == 2:
            outs = (out[0], out[1])
        else:
            return None
        for i in range(n):
            flags = self.order | cnp.NPY_ARRAY_ALIGNED | cnp.NPY_ARRAY_WRITEABLE
            if not _typed(outs[i], self.rtype, flags, self.nd, &self.dims[0]):
                return None
            o = <cnp.ndarray>outs[i]
            s[i] = _span(o)
            for j in range(self.n_spans):
                if _overlap(s[i], self.spans[j]):
                    return None
        if n == 2 and _overlap(s[0], s[1]):
            return None
        return outs


cdef inline bint _vector_out(object x, int typenum, cnp.npy_intp n) noexcept:
    """``x`` is a writeable, aligned, C-contiguous [n] ndarray of ``typenum``."""
    return _typed(x, typenum, _OUT_FLAGS, 1, &n)


cdef inline void* _data(object a) noexcept:
    return cnp.PyArray_DATA(<cnp.ndarray>a)


cdef struct Sweep:
    # one sweep call's C entry and arguments (the floats as void*)
    int kind
    void* fn
    void* blp
    void* tlp
    void* r
    void* v
    void* lv
    unsigned char* te
    unsigned char* tr
    void* fv
    unsigned char* ok
    int64_t options
    double h[5]                     # the hyperparameters in the entry's order
    int64_t T, N
    void* o0
    void* o1


cdef int64_t _call(Sweep* s, int64_t step, int64_t lo, int64_t hi) noexcept nogil:
    """The sweep's C entry, whole (``step`` 0) or one step of a threaded run."""
    cdef int64_t opt = s.options | step
    if s.kind == 0:
        return (<gae_fn>s.fn)(s.r, s.v, s.lv, s.te, s.tr, s.fv, s.ok, opt, s.h[0], s.h[1],
                              s.T, s.N, lo, hi, s.o0, s.o1)
    if s.kind == 1:
        return (<vtrace_fn>s.fn)(s.blp, s.tlp, s.r, s.v, s.lv, s.te, s.tr, s.fv, s.ok, opt,
                                 s.h[0], s.h[1], s.h[2], s.h[3], s.h[4], s.T, s.N, lo, hi,
                                 s.o0, s.o1)
    return (<returns_fn>s.fn)(s.r, s.lv, s.te, s.tr, s.fv, s.ok, opt, s.h[0], s.T, s.N, lo,
                              hi, s.o0)


cdef int64_t _threaded(Sweep* s, int64_t block, int64_t parts) noexcept nogil:
    """The serial kernel's steps on OpenMP threads: the validation pass's
    ``parts`` row ranges, then, once every input passed, each block of
    ``block`` envs. Each element sees the serial sweep's operations in the
    same order, so the results are its bits. (Numba's ``parallel=True``
    builds did this with a ``prange``; each cost 3-4x its serial twin to
    compile. OpenMP's threads wait spinning between regions, so a handoff
    costs about a microsecond where a Python thread pool's took 55-80 us.)"""
    cdef int64_t n = s.N
    cdef int64_t rows = s.N if s.options & BATCH_MAJOR else s.T
    cdef int64_t nblocks = (n + block - 1) // block
    cdef int64_t p, b, code, mask = 0
    for p in prange(parts, num_threads=nblocks, schedule="static"):
        mask |= _call(s, CHECK_ROWS, p * rows // parts, (p + 1) * rows // parts)
    code = _call(s, STATUS, mask, 0)
    if code != 0:
        return code
    for b in prange(nblocks, num_threads=nblocks, schedule="static"):
        _call(s, BLOCK, b * block, min(n, (b + 1) * block))
    return 0


cdef object _run(_Batch b, Sweep* s, object outs):
    """Run the sweep: in one call, or for a large one as ``set_blocks``'s rule
    says; ``outs``, or None when the kernel refused an input (nothing written)."""
    cdef int64_t block = b.N, parts = 1, code
    if b.large and _blocks is not None:
        block, parts = _blocks(b.kind, b.T, b.N, (b.options & BATCH_MAJOR) != 0)
    with nogil:
        if block >= b.N:
            code = _call(s, 0, 0, 0)
        else:
            code = _threaded(s, block, parts)
    return outs if code == 0 else None


cdef inline void _fill(Sweep* s, _Batch b, int kind) noexcept:
    s.kind = kind
    s.r = b.r
    s.lv = b.lv
    s.te = b.te
    s.tr = b.tr
    s.fv = b.fv
    s.ok = b.ok
    s.options = b.options
    s.T = b.T
    s.N = b.N


def gae(rewards, values, last_values, terminated, truncated, final_values, valid,
        gamma, gae_lambda, out):
    """``fastppo.gae`` for the common case; None: run the general path."""
    if not (_unit(gamma) and _unit(gae_lambda)):
        return None
    cdef _Batch b = _Batch.__new__(_Batch)
    if not b.take(0, rewards, last_values, terminated, truncated, final_values, valid):
        return None
    cdef void* v = b.take_float(values)
    if v == NULL:
        return None
    outs = b.outputs(out, 2)
    if outs is None:
        return None
    cdef Sweep s
    _fill(&s, b, 0)
    s.fn = _entry(0, b.d)
    s.v = v
    s.h[0] = <double>gamma
    s.h[1] = s.h[0] * <double>gae_lambda
    s.o0 = _data(outs[0])
    s.o1 = _data(outs[1])
    return _run(b, &s, outs)


def vtrace(behavior_logp, target_logp, rewards, values, last_values, terminated, truncated,
           final_values, valid, gamma, lam, rho_bar, c_bar, pg_rho_bar, out):
    """``fastppo.vtrace`` for the common case (log-probs of the values' dtype)."""
    if not (_unit(gamma) and _unit(lam) and _positive(rho_bar) and _positive(c_bar)
            and _positive(pg_rho_bar)):
        return None
    cdef _Batch b = _Batch.__new__(_Batch)
    if not b.take(1, rewards, last_values, terminated, truncated, final_values, valid):
        return None
    cdef void* v = b.take_float(values)
    if v == NULL:
        return None
    cdef void* blp = b.take_float(behavior_logp)
    if blp == NULL:
        return None
    cdef void* tlp = b.take_float(target_logp)
    if tlp == NULL:
        return None
    outs = b.outputs(out, 2)
    if outs is None:
        return None
    cdef Sweep s
    _fill(&s, b, 1)
    s.fn = _entry(1, b.d)
    s.blp = blp
    s.tlp = tlp
    s.v = v
    s.h[0] = <double>gamma
    s.h[1] = <double>lam
    s.h[2] = <double>rho_bar
    s.h[3] = <double>c_bar
    s.h[4] = <double>pg_rho_bar
    s.o0 = _data(outs[0])
    s.o1 = _data(outs[1])
    return _run(b, &s, outs)


def discounted_returns(rewards, last_values, terminated, truncated, final_values, valid,
                       gamma, out):
    """``fastppo.discounted_returns`` for the common case."""
    if not _unit(gamma):
        return None
    # Without values a truncation always needs final_values (the general path
    # explains); with them the kernel reads final values where truncated.
    if truncated is not None and final_values is None:
        return None
    cdef _Batch b = _Batch.__new__(_Batch)
    if not b.take(2, rewards, last_values, terminated, truncated, final_values, valid):
        return None
    outs = b.outputs(out, 1)
    if outs is None:
        return None
    cdef Sweep s
    _fill(&s, b, 2)
    s.fn = _entry(2, b.d)
    s.h[0] = <double>gamma
    s.o0 = _data(outs[0])
    res = _run(b, &s, outs)
    return None if res is None else res[0]


cdef bint _apart(object a, object b, Span* inputs, int n_inputs) noexcept:
    """The two output ndarrays ``a`` and ``b`` share memory with neither each
    other nor any of the ``inputs`` spans (a sampler's ``out=``)."""
    cdef Span so[2]
    so[0] = _span(<cnp.ndarray>a)
    so[1] = _span(<cnp.ndarray>b)
    if _overlap(so[0], so[1]):
        return False
    cdef int i, j
    for i in range(2):
        for j in range(n_inputs):
            if _overlap(so[i], inputs[j]):
                return False
    return True


cdef inline int _float_rows(cnp.ndarray x) noexcept:
    """0 (float32) or 1 (float64) for a native-order, aligned, C-contiguous
    2-D float array (a sampler's logits or means), -1 for anything else."""
    if not (cnp.PyArray_NDIM(x) == 2 and cnp.PyArray_ISNOTSWAPPED(x)
            and cnp.PyArray_CHKFLAGS(x, _FLOAT_FLAGS)):
        return -1
    cdef int t = cnp.PyArray_TYPE(x)
    if t == cnp.NPY_FLOAT32:
        return 0
    if t == cnp.NPY_FLOAT64:
        return 1
    return -1


cdef bint _stream_of(object seed, object counter, object env_offset, int64_t n, int64_t* st):
    """The samplers' stream record (``fastppo.kernels.rng.STREAM``: seed and
    counter split into 32-bit halves, then ``env_offset``) of plain ints in
    range, into ``st[:5]``; False declines (the general path explains)."""
    if type(seed) is not int or type(counter) is not int or type(env_offset) is not int:
        return False
    cdef unsigned long long sd, ct
    cdef long long eo
    try:
        sd = seed
        ct = counter
        eo = env_offset
    except OverflowError:  # negative or >= 2**64
        return False
    if eo < 0 or eo + n > (<long long>1 << 32):
        return False
    st[0] = <int64_t>(sd & 0xFFFFFFFFULL)
    st[1] = <int64_t>(sd >> 32)
    st[2] = <int64_t>(ct & 0xFFFFFFFFULL)
    st[3] = <int64_t>(ct >> 32)
    st[4] = eo
    return True


def sample_categorical(logits, mask, seed, counter, env_offset, deterministic, out):
    """``fastppo.sample_categorical`` for the common case; None: the general path.

    Takes numpy arrays and plain torch CPU tensors (their zero-copy views): an
    N = 1 actor with a torch policy steps through here too.
    """
    logits = _ndarray_of(logits)
    if logits is None:
        return None
    if mask is not None:
        mask = _ndarray_of(mask)
        if mask is None:
            return None
    cdef cnp.ndarray x = <cnp.ndarray>logits
    cdef int d = _float_rows(x)
    if d < 0:
        return None
    cdef int64_t n = cnp.PyArray_DIM(x, 0), a = cnp.PyArray_DIM(x, 1)
    if a == 0 or n * a >= _limits[3]:
        return None
    if type(deterministic) is not bool:
        return None
    cdef int64_t st[5]
    if not _stream_of(seed, counter, env_offset, n, st):
        return None
    cdef unsigned char* pm = &_no_mask
    cdef int64_t m_rows = 1, m_cols = 1, has_mask = 0
    cdef cnp.ndarray m
    cdef int mt
    cdef Span spans[2]
    cdef int n_spans = 1
    spans[0] = _span(x)
    if mask is not None:
        m = <cnp.ndarray>mask
        mt = cnp.PyArray_TYPE(m)
        if not ((mt == cnp.NPY_BOOL or mt == cnp.NPY_UINT8)
                and cnp.PyArray_CHKFLAGS(m, cnp.NPY_ARRAY_C_CONTIGUOUS)
                and _same_shape(m, x)):
            return None
        pm = <unsigned char*>cnp.PyArray_DATA(m)
        m_rows = n
        m_cols = a
        has_mask = 1
        spans[1] = _span(m)
        n_spans = 2
    cdef cnp.npy_intp dim = n
    if out is None:
        act = cnp.PyArray_EMPTY(1, &dim, cnp.NPY_INT64, 0)
        logp = cnp.PyArray_EMPTY(1, &dim, cnp.NPY_FLOAT32, 0)
    elif (type(out) is tuple or type(out) is list) and len(out) == 2:
        act = out[0]
        logp = out[1]
        if not (_vector_out(act, cnp.NPY_INT64, n) and _vector_out(logp, cnp.NPY_FLOAT32, n)):
            return None
        if not _apart(act, logp, spans, n_spans):
            return None
    else:
        return None
    cdef categorical_fn fn = <categorical_fn>_entry(3, d)
    cdef int64_t offs[2]
    offs[0] = 0
    offs[1] = a
    cdef void* px = cnp.PyArray_DATA(x)
    cdef int64_t* pa = <int64_t*>_data(act)
    cdef float* pl = <float*>_data(logp)
    cdef int64_t det = 1 if deterministic else 0
    # out= given: validate every row before writing (nothing written on error)
    cdef int64_t pre = 0 if out is None else 1
    cdef int64_t status
    with nogil:
        status = fn(px, d, pm, m_rows, m_cols, has_mask, offs, st[0], st[1], st[2], st[3], st[4],
                    det, pre, n, a, pa, pl)
    return (act, logp) if status < 0 else None


cdef bint _rows_equal(const real* a, Py_ssize_t n, Py_ssize_t w) noexcept nogil:
    """Every row of the C-ordered ``[n, w]`` ``a`` (``n >= 2``) equals the one
    before it, so the first (``==``: a NaN never does, -0 equals +0). Rows 0
    and 1 first (per-env values differ there), then one branch-free pass
    that vectorises: 1.5 us at [4096, 6], where numpy's compare took 6."""
    cdef Py_ssize_t k
    cdef unsigned int bad = 0
    for k in range(w):
        bad |= a[w + k] != a[k]
    if bad:
        return False
    for k in range(w, n * w):
        bad |= a[k] != a[k - w]
    return bad == 0


cdef int _same_rows(cnp.ndarray a) noexcept:
    """1 if the aligned, C-contiguous, native float32/float64 ``[n >= 2, w]``
    ``a``'s rows are all equal, 0 if not, -1 for any other array."""
    cdef int d = _float_rows(a)
    if d < 0 or cnp.PyArray_DIM(a, 0) < 2:
        return -1
    cdef Py_ssize_t n = cnp.PyArray_DIM(a, 0), w = cnp.PyArray_DIM(a, 1)
    cdef void* p = cnp.PyArray_DATA(a)
    cdef bint same
    with nogil:
        if d == 0:
            same = _rows_equal(<const float*>p, n, w)
        else:
            same = _rows_equal(<const double*>p, n, w)
    return 1 if same else 0


def same_rows(cnp.ndarray a):
    """Whether every row of a C-contiguous 2-D float32/float64 array equals the
    first (``==``): a per-env log-std that is one row copied per env (what SB3
    and torch policies hand over) takes the state-independent path. The one
    rule: the general path (``fastppo.sampling._common``) and
    :func:`sample_gaussian` both call it. False for fewer than two rows, and
    for any other array."""
    return _same_rows(a) == 1


def sample_gaussian(mean, log_std, seed, counter, env_offset, squash, deterministic, out):
    """``fastppo.sample_gaussian`` for the common case; None: the general path.

    The mean a C-contiguous float32/float64 ``[N, A]`` (numpy, or a torch CPU
    tensor's view), the log-std of its dtype ``[A]``, ``[N, A]`` or a view of
    one row broadcast over envs; a per-env log-std whose rows are all equal
    runs as one row, as in the general path (:func:`same_rows`).
    """
    mean = _ndarray_of(mean)
    if mean is None:
        return None
    log_std = _ndarray_of(log_std)
    if log_std is None:
        return None
    cdef cnp.ndarray x = <cnp.ndarray>mean
    cdef cnp.ndarray l = <cnp.ndarray>log_std
    cdef int d = _float_rows(x)
    if d < 0:
        return None
    cdef int64_t n = cnp.PyArray_DIM(x, 0), a = cnp.PyArray_DIM(x, 1)
    if n == 0 or a == 0 or n * a >= _limits[4]:
        return None
    if not (cnp.PyArray_TYPE(l) == cnp.PyArray_TYPE(x) and cnp.PyArray_ISNOTSWAPPED(l)
            and cnp.PyArray_CHKFLAGS(l, cnp.NPY_ARRAY_ALIGNED)):
        return None
    cdef int64_t ls_rows
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(x)
    if _shape_is(l, 1, &dims[1]) and cnp.PyArray_CHKFLAGS(l, cnp.NPY_ARRAY_C_CONTIGUOUS):
        ls_rows = 1
    elif _same_shape(l, x) and cnp.PyArray_STRIDE(l, 1) == cnp.PyArray_ITEMSIZE(l) and (
            cnp.PyArray_STRIDE(l, 0) == 0):
        ls_rows = 1  # one row broadcast over envs (np.broadcast_to, torch's expand)
    elif _same_shape(l, x) and cnp.PyArray_CHKFLAGS(l, cnp.NPY_ARRAY_C_CONTIGUOUS):
        ls_rows = 1 if _same_rows(l) == 1 else n
    else:
        return None
    if type(squash) is not bool or type(deterministic) is not bool:
        return None
    cdef int64_t st[5]
    if not _stream_of(seed, counter, env_offset, n, st):
        return None
    cdef Span si[2]
    si[0] = _span(x)
    si[1] = _span(l)
    if out is None:
        act = cnp.PyArray_EMPTY(2, dims, cnp.NPY_FLOAT32, 0)
        logp = cnp.PyArray_EMPTY(1, dims, cnp.NPY_FLOAT32, 0)
    elif (type(out) is tuple or type(out) is list) and len(out) == 2:
        act = out[0]
        logp = out[1]
        if not (_typed(act, cnp.NPY_FLOAT32, _OUT_FLAGS, 2, dims)
                and _vector_out(logp, cnp.NPY_FLOAT32, n)):
            return None
        if not _apart(act, logp, si, 2):
            return None
    else:
        return None
    cdef gaussian_fn fn = <gaussian_fn>_entry(4, d)
    cdef void* pm = cnp.PyArray_DATA(x)
    cdef void* pls = cnp.PyArray_DATA(l)
    cdef float* pa = <float*>_data(act)
    cdef float* pl = <float*>_data(logp)
    cdef int64_t sq = 1 if squash else 0
    cdef int64_t det = 1 if deterministic else 0
    cdef int64_t status
    with nogil:
        status = fn(pm, d, pls, ls_rows, st[0], st[1], st[2], st[3], st[4], sq, det, n, a, pa,
                    pl)
    return (act, logp) if status < 0 else None


def env_step(uintptr_t entry, cnp.ndarray state, cnp.ndarray book, actions, bint discrete,
             int64_t max_steps, bint same_step, int obs_dim):
    """One step of a compiled vector env (``CompiledVectorEnv.step``) through its
    C entry (:func:`fastppo.envs._loop.step_entry`), for actions in the env's
    own form: a C-contiguous, aligned, native int64 [N] (discrete) or float32
    [N, 1] ndarray. Returns ``(obs, reward, terminated, truncated, final_obs,
    bad)`` (``final_obs`` None unless ``same_step``; ``bad`` -1 or the first
    refused action, and then no env moved), or None for any other actions: the
    caller validates and casts them, then calls again.

    ``state`` [N, S] float64 and ``book`` [5, N] int64 are the env's own
    C-contiguous arrays (never a caller's), so they are not checked here.
    """
    if type(actions) is not cnp.ndarray:
        return None
    cdef cnp.ndarray a = <cnp.ndarray>actions
    cdef cnp.npy_intp n = cnp.PyArray_DIM(state, 0)
    if discrete:
        if not (cnp.PyArray_TYPE(a) == cnp.NPY_INT64 and cnp.PyArray_NDIM(a) == 1
                and cnp.PyArray_DIM(a, 0) == n):
            return None
    elif not (cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32 and cnp.PyArray_NDIM(a) == 2
              and cnp.PyArray_DIM(a, 0) == n and cnp.PyArray_DIM(a, 1) == 1):
        return None
    if not (cnp.PyArray_ISNOTSWAPPED(a) and cnp.PyArray_CHKFLAGS(a, _FLOAT_FLAGS)):
        return None
    cdef cnp.npy_intp dims[2]
    dims[0] = n
    dims[1] = obs_dim
    cdef cnp.ndarray obs = cnp.PyArray_EMPTY(2, dims, cnp.NPY_FLOAT32, 0)
    cdef cnp.ndarray reward = cnp.PyArray_EMPTY(1, dims, cnp.NPY_FLOAT64, 0)
    cdef cnp.ndarray term = cnp.PyArray_EMPTY(1, dims, cnp.NPY_BOOL, 0)
    cdef cnp.ndarray trunc = cnp.PyArray_EMPTY(1, dims, cnp.NPY_BOOL, 0)
    final = None
    cdef float* pf = <float*>cnp.PyArray_DATA(obs)  # not read when n_final is 0
    cdef int64_t n_final = 0
    if same_step:
        final = cnp.PyArray_EMPTY(2, dims, cnp.NPY_FLOAT32, 0)
        pf = <float*>cnp.PyArray_DATA(<cnp.ndarray>final)
        n_final = n
    cdef env_step_fn fn = <env_step_fn>entry
    cdef double* ps = <double*>cnp.PyArray_DATA(state)
    cdef int64_t* pb = <int64_t*>cnp.PyArray_DATA(book)
    cdef void* pa = cnp.PyArray_DATA(a)
    cdef float* po = <float*>cnp.PyArray_DATA(obs)
    cdef double* pr = <double*>cnp.PyArray_DATA(reward)
    cdef unsigned char* pte = <unsigned char*>cnp.PyArray_DATA(term)
    cdef unsigned char* ptr = <unsigned char*>cnp.PyArray_DATA(trunc)
    cdef int64_t bad
    with nogil:
        bad = fn(ps, pb, pa, n, max_steps, same_step, po, pr, pte, ptr, pf, n_final)
    return obs, reward, term, trunc, final, bad
