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
from fastppo.kernels.fastmath import fma32

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


# The stream a batch draws from, one record so that its five same-typed words
# cannot be swapped: ``(seed_lo, seed_hi, counter_lo, counter_hi, env_offset)``,
# the 32-bit halves of Philox's key and counter and the global index of row 0.
# Built by ``fastppo.sampling._common.stream`` (and the C entries).
STREAM = "Tup(i8, i8, i8, i8, i8)"


@inline
def env_block(stream, i, block):  # pragma: no cover
    """Block ``block`` of the stream of row ``i`` (env ``env_offset + i``)."""
    seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset = stream
    return philox4x32_10(
        np.uint64(block),
        np.uint64(env_offset + i),
        np.uint64(ctr_lo),
        np.uint64(ctr_hi),
        np.uint64(seed_lo),
        np.uint64(seed_hi),
    )


@kernel("void(u4_2, u4_2, u4_2w)")
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


@kernel(f"void({STREAM}, f8_2w)")
def env_uniforms(stream, out):  # pragma: no cover
    """``out[i, k]`` = uniform ``k`` of env ``env_offset + i``'s stream (float64 [N, K])."""
    for i in range(out.shape[0]):
        for k in range(out.shape[1]):
            w0, w1, w2, w3 = env_block(stream, i, k // 2)
            if k % 2 == 0:
                out[i, k] = uniform53(w0, w1)
            else:
                out[i, k] = uniform53(w2, w3)


# --------------------------------------------------------------------------
# Standard normals by Box-Muller in float32, with log and sin/cos written out
# as branch-free float32 polynomials: C-library calls do not vectorise, these
# loops run eight normals per AVX2 instruction, and numpy reproduces every
# operation bit for bit (float32 IEEE operations, no FMA contraction). The
# samplers return float32, so float32 normals lose nothing the caller keeps.
#
# Pair ``p`` of an env (normals ``2p``, ``2p + 1``) takes the 32-bit words
# ``(wr, wa)`` = ``(w0, w1)`` of block ``p // 2`` for even ``p``, ``(w2, w3)``
# for odd ``p``, so one Philox block feeds four normals:
#   x = (float32(wr >> 1) + 1/2) 2**-31   in [2**-32, 1]   (radius uniform)
#   k = wa >> 8                            in [0, 2**24)    (angle 2 pi k 2**-24)
#   r = sqrt(-2 log32(x)), z_2p = r cos, z_2p+1 = r sin.
# ``float32(wr >> 1)`` rounds 31 bits to nearest, so ``x`` is the uniform on
# the float32 grid (finer near 0, where the normal's tail lives); ``x >=
# 2**-32`` bounds |z| by sqrt(64 ln 2) = 6.66 (a standard normal exceeds that
# with probability 2.7e-11). ``x`` rounds to 1 (r = 0) with probability 2**-26.
#
# Accuracy, measured against float64 libm (tests/test_rng.py re-measures it
# on 1e6 random inputs plus the extremes): log32 within 0.80 ulp of float32
# over every radius input the sampler can produce (2**24 evenly spread and
# 2**20 random (float32(k) + 1/2) 2**-31, k < 2**31); cos/sin within 9.8e-8
# absolute over all 2**24 angles; the normals within 2.6e-7 relative (5.6e-7
# absolute) of the float64 formula on the same words, over 4e6 word pairs.

_F = np.float32
_SQRT2_F = _F(1.41421356)
_HALF_F = _F(0.5)
_ONE_F = _F(1.0)
_ZERO_F = _F(0.0)
_M2_F = _F(-2.0)
_TWO_M31_F = _F(2.0**-31)
_TWO_M22_F = _F(2.0**-22)
_LN2_HI_F = _F(0.693359375)  # ln 2 = hi + lo, hi with 9 significant bits (e * hi exact)
_LN2_LO_F = _F(-2.12194440e-4)
_I23 = np.int32(23)
_F127 = _F(127.0)
_MANT_F = np.int32(0x007FFFFF)
_ONE_BITS_F = np.int32(0x3F800000)
_S1 = np.uint64(1)
_S8 = np.uint64(8)
# Cephes logf: log(1 + f) = f - f^2/2 + f^3 P(f), |f| <= sqrt(2) - 1
_LP = tuple(
    _F(c)
    for c in (
        7.0376836292e-2,
        -1.1514610310e-1,
        1.1676998740e-1,
        -1.2420140846e-1,
        1.4249322787e-1,
        -1.6668057665e-1,
        2.0000714765e-1,
        -2.4999993993e-1,
        3.3333331174e-1,
    )
)
_LP0, _LP1, _LP2, _LP3, _LP4, _LP5, _LP6, _LP7, _LP8 = _LP
_PI_2_F = _F(1.5707963267948966)
# Taylor coefficients of sin to phi^9 and cos to phi^10, |phi| <= pi/4: the
# truncation errors (1.7e-9, 1.1e-10) are far below float32 rounding.
_SF1, _SF2, _SF3, _SF4 = (_F(-1 / 6), _F(1 / 120), _F(-1 / 5040), _F(1 / 362880))
_CF1, _CF2, _CF3, _CF4, _CF5 = (
    _F(-1 / 2),
    _F(1 / 24),
    _F(-1 / 720),
    _F(1 / 40320),
    _F(-1 / 3628800),
)
_Q1, _Q2, _Q3 = _F(1.0), _F(2.0), _F(3.0)


@inline
def normal_words(wr, wa):  # pragma: no cover - compiled
    """Box-Muller inputs from a radius and an angle word, as int32: ``(wr >> 1, wa >> 8)``."""
    return np.int32(wr >> _S1), np.int32(wa >> _S8)


@inline
def _log32_reduce(x):  # pragma: no cover - compiled
    """``(f, e)`` with ``x = (1 + f) 2**e``, ``1 + f`` in ``[sqrt(1/2), sqrt(2))``
    from the bits (``f`` exact), ``e`` a float32: :func:`log32`'s range reduction."""
    b = np.float32(x).view(np.int32)
    # the biased exponent as a float32 (small integers: exact), so the int
    # to float conversion is the 32-bit one AVX2 has
    fe = np.float32(np.int32(b >> _I23)) - _F127
    m = np.int32((b & _MANT_F) | _ONE_BITS_F).view(np.float32)
    big = m > _SQRT2_F
    m = m * _HALF_F if big else m
    fe = fe + _ONE_F if big else fe
    return m - _ONE_F, fe


@inline
def log32(x):  # pragma: no cover - compiled
    """float32 natural log of a normal float32 ``x > 0``, branch-free (Cephes ``logf``).

    ``x = m 2**e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` from the bits,
    ``f = m - 1`` (exact), ``log x = (f - f^2/2 + f^3 P(f) + e lo) + e hi``
    with ``ln 2 = hi + lo``. Within 1 ulp on ``[2**-32, 1]``. Plain IEEE
    operations, so :mod:`fastppo.reference.rng` reproduces it (and the
    normals) bit for bit.
    """
    f, fe = _log32_reduce(x)
    z = f * f
    y = _LP0 * f + _LP1
    y = y * f + _LP2
    y = y * f + _LP3
    y = y * f + _LP4
    y = y * f + _LP5
    y = y * f + _LP6
    y = y * f + _LP7
    y = y * f + _LP8
    y = y * f * z
    y = y + fe * _LN2_LO_F
    y = y - _HALF_F * z
    return (f + y) + fe * _LN2_HI_F


@inline
def log32_fma(x):  # pragma: no cover - compiled
    """:func:`log32` with its multiply-adds fused (:func:`fastppo.kernels.fastmath.fma32`).

    Eleven fused operations replace 22 (0.35 against 0.46 ns an element, 16
    lanes, znver4) and each rounds once, so it is at least as accurate; but
    numpy has no fused multiply-add to reproduce it, so only results that
    are checked against a bound, not a twin, use it (the squash's log-det).
    """
    f, fe = _log32_reduce(x)
    z = f * f
    y = fma32(_LP0, f, _LP1)
    y = fma32(y, f, _LP2)
    y = fma32(y, f, _LP3)
    y = fma32(y, f, _LP4)
    y = fma32(y, f, _LP5)
    y = fma32(y, f, _LP6)
    y = fma32(y, f, _LP7)
    y = fma32(y, f, _LP8)
    y = y * f * z
    y = fma32(fe, _LN2_LO_F, y)
    y = fma32(-_HALF_F, z, y)
    return fma32(fe, _LN2_HI_F, f + y)


@inline
def sincos24(k):  # pragma: no cover - compiled
    """``(cos, sin)`` of ``2 pi k 2**-24`` in float32 for int32 ``0 <= k < 2**24``, branch-free.

    ``v = k 2**-22`` (four quarter turns, exact), ``q = floor(v + 1/2)`` the
    nearest quarter (exact: ``v + 1/2`` rounds only at or above 4),
    ``phi = (v - q) pi/2`` in ``[-pi/4, pi/4]``, Taylor polynomials for
    ``sin phi`` / ``cos phi``, then quadrant ``q mod 4`` rotates them.
    """
    v = np.float32(k) * _TWO_M22_F
    q = np.floor(v + _HALF_F)
    phi = (v - q) * _PI_2_F
    p2 = phi * phi
    sp = _SF4 * p2 + _SF3
    sp = sp * p2 + _SF2
    sp = sp * p2 + _SF1
    sn = phi + phi * p2 * sp
    cp = _CF5 * p2 + _CF4
    cp = cp * p2 + _CF3
    cp = cp * p2 + _CF2
    cp = cp * p2 + _CF1
    cs = _ONE_F + p2 * cp
    # q is 0..4 (4 is a full turn, like 0); selects on float compares vectorise
    c = -sn if q == _Q1 else (-cs if q == _Q2 else (sn if q == _Q3 else cs))
    s = cs if q == _Q1 else (-sn if q == _Q2 else (-cs if q == _Q3 else sn))
    return c, s


@inline
def box_muller32(ia, ib):  # pragma: no cover - compiled
    """Two independent float32 standard normals from :func:`normal_words`.

    ``x = (float32(ia) + 1/2) 2**-31`` in ``[2**-32, 1]``, ``r = sqrt(-2
    log32(x))``, ``(r cos, r sin)`` of angle ``2 pi ib 2**-24`` (Box & Muller,
    Ann. Math. Statist. 29 (1958) 610-611).
    """
    x = (np.float32(ia) + _HALF_F) * _TWO_M31_F
    r = np.sqrt(_M2_F * log32(x))
    c, s = sincos24(ib)
    return r * c, r * s


@kernel(f"void({STREAM}, f4_2w)")
def env_normals(stream, out):  # pragma: no cover
    """``out[i, k]`` = normal ``k`` of env ``env_offset + i`` (float32 [N, K]).

    Normal ``2p`` / ``2p + 1`` is the cosine / sine of Box-Muller pair ``p``:
    words ``(w0, w1)`` of block ``p // 2`` for even ``p``, ``(w2, w3)`` for
    odd ``p`` (:func:`box_muller32`).
    """
    for i in range(out.shape[0]):
        for p in range((out.shape[1] + 1) // 2):
            w0, w1, w2, w3 = env_block(stream, i, p // 2)
            if p % 2 == 0:
                ia, ib = normal_words(w0, w1)
            else:
                ia, ib = normal_words(w2, w3)
            z0, z1 = box_muller32(ia, ib)
            out[i, 2 * p] = z0
            if 2 * p + 1 < out.shape[1]:
                out[i, 2 * p + 1] = z1
