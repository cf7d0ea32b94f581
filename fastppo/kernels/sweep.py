"""What the three sweeps (GAE, V-trace, discounted returns) share: the layout,
option bits, status codes and the validation pass.

Layout: arrays are ``[T, N]`` C-contiguous views (1-D inputs arrive as
``[T, 1]``); each estimator also sweeps batch-major ``[N, T]`` arrays (the
``BATCH_MAJOR`` option bit; ``gae_rows``, ``vtrace_rows``, ``returns_rows``)
through this validation pass (it checks every element, whatever the
layout). The backward sweep over ``t`` is sequential; envs are independent,
so a sweep runs over blocks of envs (a large call runs one block per
thread, from ``fastppo._cy._fast``) and the inner loop runs over the envs of
one block -- contiguous in memory, so LLVM vectorises it and the sweep
streams at memory bandwidth.

Time chunks: GAE and V-trace read each chunk of rows forwards (the carry-free
part of the recurrence) and then sweep it backwards while it is in L2 (see
``CHUNK``). A time-major rollout of few envs is swept as one flat run of
elements instead of row by row (:func:`few_envs`).

Validation comes first and is complete before the first write (a bad input
leaves the outputs untouched): every input is checked row by row, forwards,
in contiguous row ranges (``parts``: at least 2, one per block), so the rows
checked last are the first the backward sweep reads, still in cache.

Inputs: every sweep reads one record, :func:`rollout` (its Numba type
``ROLLOUT``), whose arrays all have the full ``[T, N]`` shape. The public layer
puts a stand-in in place of an absent input (``terminated`` for ``truncated``
and ``valid``, ``rewards`` for ``final_values`` and for what an estimator does
not read: ``values`` of the returns, the log-probs of GAE and the returns) and
clears its bit in ``options``; the kernels load every array unconditionally
and use the bits only in selects, so the inner loops stay branch-free and
vectorise.

Each block of envs is swept by a helper on column slices indexed from 0: with
an index running from an arbitrary ``n0`` Numba cannot prove it non-negative,
keeps its negative-index wraparound, and the loop does not vectorise (4-5x
slower here).

Every kernel trusts its inputs; ``fastppo.advantages`` validates them.
"""

from __future__ import annotations

import numpy as np

from fastppo._jit import inline, kernel
from fastppo.kernels.tiles import flat

# Status codes the sweeps return; nonzero means nothing was written.
OK = 0
BAD_REWARDS = 1
BAD_VALUES = 2
BAD_LAST_VALUES = 3
BAD_FINAL_VALUES = 4
BAD_BEHAVIOR_LOGP = 5
BAD_TARGET_LOGP = 6

# Bits of the ``options`` argument: which optional inputs are real (the others
# are stand-ins). One int instead of three bools keeps the dispatch short.
HAS_TRUNC = 1
HAS_FINAL = 2
HAS_VALID = 4
# The arrays are batch-major ``[N, T]`` rows: the whole-call kernels then sweep
# each block with their ``*_rows`` function (and a C entry, ``kernels.cabi``,
# views its arrays that way).
BATCH_MAJOR = 8
# Not read by the kernels either: the steps of a sweep that the fast path
# (``fastppo._cy._fast``) runs on threads, one C entry call each.
# CHECK_ROWS: the bad-input mask (:func:`check_rows`) of rows ``lo:hi``;
# STATUS: the status code (:func:`status`) of the OR of those masks, passed
# as ``lo``; BLOCK: sweep envs ``lo:hi`` of validated inputs.
CHECK_ROWS = 16
STATUS = 32
BLOCK = 64

# Rows per time chunk. A sweep runs backwards in time; GAE reads each chunk
# of rows forwards (the carry-free part of the recurrence), then sweeps it
# backwards while it is still in L2: 32 rows x 7 arrays x a 256-env float32
# row ~ 230 KiB. (One backward pass over the rows measured 10% faster over
# random placements of the arrays on znver4, but 5-12% slower at [2000-4096,
# 128-256] under numpy's own, where every array starts 16 bytes past a page.)
CHUNK = 32
# Time-major rows narrower than FEW_ENVS_BYTES (N < 32 float32 envs, N < 16
# float64: under two 512-bit vectors) are swept as one flat run of elements,
# ``k = t * N + n`` with its successor at ``k + N`` (:func:`few_envs`), in
# chunks of FLAT_CHUNK elements: a loop per row of so few envs costs more
# (slices, loop set-up: ~25 ns a row) than the row's work. GAE [65536, 1]
# float32 went from 20 to 2 ns an element, [8192, 8] from 3.4 to 1.5; from
# 32 float32 envs the row loops are faster (1.1 against 1.2 ns, znver4).
# Discounted returns' row loop is the lightest (one pass, no scratch): its
# flat run pays below 32 bytes (N = 4: 3.0 -> 1.9 ns; N = 8: 1.5 against 1.9).
FEW_ENVS_BYTES = 128
FEW_RETURNS_BYTES = 32
FLAT_CHUNK = 2048
# V-trace's chunk is shorter: its two weight rows per step live in scratch
# (2 x 16 rows = 32 KiB at 256 float32 envs, L1-sized), which keeps the
# working memory of an out= call small next to the batch; 16, 32, 64 and 96
# rows measured the same.
VT_CHUNK = 16

# Minimum number of row ranges the validation pass is split into.
VALIDATE_PARTS = 2

# The arrays a sweep reads travel as one record, a tuple in this order, built
# by keyword with :func:`rollout` and unpacked once per kernel: a dozen
# same-typed arrays in a positional list could be swapped silently, and every
# driver repeated the list. (Numba dispatches plain tuples of arrays, with the
# read-only conversion of each; named tuples it does not convert.)
ROLLOUT = "Tup(F_2, F_2, F_1, F_2, u1_2, u1_2, u1_2, F_2, F_2)"


def rollout(
    rewards,
    values,
    last_values,
    final_values,
    terminated,
    truncated,
    valid,
    behavior_logp,
    target_logp,
):
    """The sweeps' input record: ``[T, N]`` arrays (``[N, T]`` for the batch-major
    sweeps) and ``last_values`` ``[N]``; an absent input is a stand-in of its
    dtype and shape (see the module's notes). Call it with keywords; compiled
    code calls it through ``inline(rollout)`` (``kernels.cabi``)."""
    return (
        rewards, values, last_values, final_values, terminated, truncated, valid, behavior_logp,
        target_logp,
    )  # fmt: skip


@inline
def _row_bad(x):  # pragma: no cover - compiled
    """1 if the contiguous 1-D ``x`` holds a NaN or +-inf, else 0.

    ``x * 0`` is 0 for finite ``x`` and NaN otherwise, so the sum of those is
    0 or NaN. The callers compile with fastmath ``reassoc`` (which keeps NaN
    and inf semantics), so the sum is a vectorised reduction: it streams at
    the speed of a copy, where OR-ing comparisons into an int32 ran at 0.45x
    (znver3: rewards + values of [2048x256] float32, 72 vs 160 us).
    """
    z = x.dtype.type(0)
    acc = z
    for n in range(x.shape[0]):
        acc += x[n] * z
    return np.int32(acc != z)


@inline
def _rows_bad(a, t0, t1):  # pragma: no cover - compiled
    """:func:`_row_bad` of rows ``t0:t1`` of the C-contiguous 2-D ``a``, as one flat run."""
    w = a.shape[1]
    return _row_bad(flat(a)[t0 * w : t1 * w])


@inline
def _row_bad_final(te, tr, fv):  # pragma: no cover - compiled
    """1 if a truncated (not terminated) entry's final value is not finite, else 0."""
    bad = np.int32(0)
    for n in range(fv.shape[0]):
        boot = (tr[n] != 0) & (te[n] == 0)
        bad |= np.int32(boot & ((fv[n] - fv[n]) != 0))
    return bad


# Bytes a flat run's stores are aligned to: a cache line, one 512-bit vector.
# numpy places an array's data 16 bytes into a line (48 for small arrays), so
# without a split every vector load and store of a run spans two lines: GAE
# [2048x256] float32 with all arrays 16 bytes in, 322 against 287 us with all
# aligned (znver4); GAE's flat runs split there (``kernels.gae._gae_runs``).
# fastppo's scratch is aligned (``fastppo._cy._fast``), as are torch's tensors.
# (Discounted returns, 116 against 95 us the same way, run one backward pass
# over rows: as runs shifted onto lines they took 136 us, and 95 with
# software prefetches, no gain. V-trace's runs split on ``vs``'s lines, its
# scratch placed alike, measured within the noise.)
LINE = 64


@inline
def head(x):  # pragma: no cover - compiled
    """Elements of the 1-D contiguous ``x`` before its first one on a :data:`LINE`
    boundary (all of them if none is): a run split there has its vector loop's
    accesses to ``x`` one line each."""
    return min(x.shape[0], ((-x.ctypes.data) % LINE) // x.itemsize)


@inline
def few_envs(x, n0, n1, width):  # pragma: no cover - compiled
    """Whether a time-major block ``n0:n1`` of ``x`` (``[T, N]``) is swept flat:
    whole rows, narrower than ``width`` bytes (:data:`FEW_ENVS_BYTES`)."""
    return n0 == 0 and n1 == x.shape[1] and x.shape[1] * x.itemsize < width


@kernel(f"i8({ROLLOUT}, b1, b1, i8, i8, i8)", fastmath=frozenset({"reassoc"}))
def check_rows(ro, has_values, has_logp, options, t0, t1):  # pragma: no cover - compiled
    """Bit mask (bit ``code``) of the inputs with a non-finite entry in rows ``t0:t1``.

    All arrays are checked together, forwards, ``CHUNK`` rows at a time, or
    ``FLAT_CHUNK`` elements' worth of rows of few envs (each array's rows of
    a chunk are one contiguous run): the last rows checked
    are the first the backward sweep reads, and they are still in cache when
    it starts. ``reassoc``: see :func:`_row_bad`.
    """
    rewards, values, _, final_values, terminated, truncated, _, behavior_logp, target_logp = ro
    bad_r = np.int32(0)
    bad_v = np.int32(0)
    bad_b = np.int32(0)
    bad_t = np.int32(0)
    bad_f = np.int32(0)
    check_final = ((options & HAS_TRUNC) != 0) and ((options & HAS_FINAL) != 0)
    # rows of a few envs in longer chunks, so a chunk's loops are not all set-up
    step = max(CHUNK, FLAT_CHUNK // max(1, rewards.shape[1]))
    for c0 in range(t0, t1, step):
        c1 = min(t1, c0 + step)
        bad_r |= _rows_bad(rewards, c0, c1)
        if has_values:
            bad_v |= _rows_bad(values, c0, c1)
        if has_logp:
            bad_b |= _rows_bad(behavior_logp, c0, c1)
            bad_t |= _rows_bad(target_logp, c0, c1)
        if check_final:
            k0, k1 = c0 * rewards.shape[1], c1 * rewards.shape[1]
            bad_f |= _row_bad_final(
                flat(terminated)[k0:k1], flat(truncated)[k0:k1], flat(final_values)[k0:k1]
            )
    mask = 0
    if bad_r:
        mask |= 1 << BAD_REWARDS
    if bad_v:
        mask |= 1 << BAD_VALUES
    if bad_f:
        mask |= 1 << BAD_FINAL_VALUES
    if bad_b:
        mask |= 1 << BAD_BEHAVIOR_LOGP
    if bad_t:
        mask |= 1 << BAD_TARGET_LOGP
    return mask


@kernel("i8(i8, i8)")
def parts(T, nblocks):  # pragma: no cover - compiled
    """Row ranges the validation pass is split into: at least 2, else one per block.

    Contiguous row ranges stream forwards through whole rows; the serial
    build runs them one after another, with the same outcome.
    """
    return max(1, min(T, max(VALIDATE_PARTS, nblocks)))


@kernel("i8(i8_1, F_1)", fastmath=frozenset({"reassoc"}))
def status(masks, last_values):  # pragma: no cover - compiled
    """The lowest code of a non-finite input (OK if none) from the parts' masks.

    Combining the masks makes the reported input independent of the split.
    """
    mask = 0
    for p in range(masks.shape[0]):
        mask |= masks[p]
    if _row_bad(last_values):
        mask |= 1 << BAD_LAST_VALUES
    for code in range(1, BAD_TARGET_LOGP + 1):
        if mask & (1 << code):
            return code
    return OK


@inline
def validate(ro, has_values, has_logp, options, nblocks):  # pragma: no cover - compiled
    """The validation pass every sweep runs first: :func:`check_rows` over
    :func:`parts` row ranges, then :func:`status`. Returns OK or the code of
    the first bad input. A threaded run checks the same ranges on threads
    (``CHECK_ROWS``, ``STATUS``).
    """
    T = ro[0].shape[0]
    nparts = parts(T, nblocks)
    masks = np.zeros(nparts, np.int64)
    for p in range(nparts):
        t0 = p * T // nparts
        masks[p] = check_rows(ro, has_values, has_logp, options, t0, (p + 1) * T // nparts)
    return status(masks, ro[2])
