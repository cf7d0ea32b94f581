"""Counter-based random numbers inside kernels: Philox4x32-10.

A counter-based generator is a keyed bijection ``block = philox(counter, key)``:
any block of the stream is computed directly from its position, with no state
to carry between calls or threads. That is what makes batched sampling
reproducible whatever the thread count or the way a batch is split.

Stream layout (shared with :mod:`fastppo.reference.rng`, which is the spec):

* key ``(k0, k1)`` = the 64-bit ``seed`` split into low and high 32-bit words;
* counter ``(c0, c1, c2, c3)`` = ``(block, env, counter_lo, counter_hi)``,
  where ``env`` is the global env index (``env_offset + row``), ``counter``
  the caller's 64-bit step counter and ``block`` the index of the 128-bit block
  inside that env's stream.

Each block gives four 32-bit words; uniform ``k`` of an env is built from the
words ``(2*(k%2), 2*(k%2)+1)`` of block ``k // 2`` (53 bits, see
:func:`uniform53`).

All arithmetic is on uint64 holding 32-bit values: a 32x32-bit product fits
in 64 bits, so ``hi = p >> 32`` and ``lo = p & 0xFFFFFFFF`` are exact.

References
----------
J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random numbers:
as easy as 1, 2, 3", SC11 (2011), doi:10.1145/2063384.2063405.
"""

from __future__ import annotations

import numpy as np

from fastppo._jit import inline, kernel

# Multipliers and Weyl key increments of Philox4x32 (Salmon et al. 2011, Table 2).
_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_MASK32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S5 = np.uint64(5)
_S6 = np.uint64(6)
_S26 = np.uint64(26)
# 2**-53: a 53-bit integer times this is an exact double in [0, 1).
_TWO_M53 = 1.0 / 9007199254740992.0


@inline
def philox4x32_10(c0, c1, c2, c3, k0, k1):  # pragma: no cover - compiled
    """Philox4x32 with 10 rounds on uint64 words holding 32-bit values.

    One round: ``(hi1^c1^k0, lo1, hi0^c3^k1, lo0)`` with ``hi0:lo0 = M0*c0``
    and ``hi1:lo1 = M1*c2``; the key is bumped by the Weyl constants between
    rounds. Returns the four output words.
    """
    # Masking tells LLVM the high halves are zero, so a loop of independent
    # calls vectorises with 32x32->64-bit vector multiplies (vpmuludq).
    c0 &= _MASK32
    c1 &= _MASK32
    c2 &= _MASK32
    c3 &= _MASK32
    k0 &= _MASK32
    k1 &= _MASK32
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        n0 = (p1 >> _S32) ^ c1 ^ k0
        n1 = p1 & _MASK32
        n2 = (p0 >> _S32) ^ c3 ^ k1
        n3 = p0 & _MASK32
        c0 = n0
        c1 = n1
        c2 = n2
        c3 = n3
        # The bump after the 10th round is unused; keeping the loop uniform
        # lets LLVM unroll it cleanly.
        k0 = (k0 + _W0) & _MASK32
        k1 = (k1 + _W1) & _MASK32
    return c0, c1, c2, c3


@inline
def uniform53(w_hi, w_lo):  # pragma: no cover - compiled
    """Uniform double in [0, 1) from two 32-bit words: 27 + 26 bits, scaled by 2**-53.

    Every value is a multiple of 2**-53, so the largest is ``1 - 2**-53`` and
    ``1 - u`` is never 0 (Box-Muller takes its log).
    """
    return np.float64(((w_hi >> _S5) << _S26) | (w_lo >> _S6)) * _TWO_M53


@inline
def env_block(seed_lo, seed_hi, ctr_lo, ctr_hi, env, block):  # pragma: no cover
    """Block ``block`` of env ``env``'s stream; all arguments are 32-bit ints."""
    return philox4x32_10(
        np.uint64(block),
        np.uint64(env),
        np.uint64(ctr_lo),
        np.uint64(ctr_hi),
        np.uint64(seed_lo),
        np.uint64(seed_hi),
    )


@kernel
def philox_blocks(counters, keys, out):  # pragma: no cover - compiled
    """Raw Philox4x32-10: ``out[i] = philox(counters[i], keys[i])``.

    ``counters`` [M, 4] and ``keys`` [M, 2] are uint32, ``out`` [M, 4] uint32.
    Used by the known-answer tests and the reference cross-check.
    """
    for i in range(counters.shape[0]):
        w0, w1, w2, w3 = philox4x32_10(
            np.uint64(counters[i, 0]),
            np.uint64(counters[i, 1]),
            np.uint64(counters[i, 2]),
            np.uint64(counters[i, 3]),
            np.uint64(keys[i, 0]),
            np.uint64(keys[i, 1]),
        )
        out[i, 0] = np.uint32(w0)
        out[i, 1] = np.uint32(w1)
        out[i, 2] = np.uint32(w2)
        out[i, 3] = np.uint32(w3)


@kernel
def env_uniforms(seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset, out):  # pragma: no cover
    """``out[i, k]`` = uniform ``k`` of env ``env_offset + i``'s stream (float64 [N, K])."""
    for i in range(out.shape[0]):
        env = env_offset + i
        for k in range(out.shape[1]):
            w0, w1, w2, w3 = env_block(seed_lo, seed_hi, ctr_lo, ctr_hi, env, k // 2)
            if k % 2 == 0:
                out[i, k] = uniform53(w0, w1)
            else:
                out[i, k] = uniform53(w2, w3)
