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

import math

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


# --------------------------------------------------------------------------
# Standard normals by Box-Muller, with log and sin/cos written out in plain
# float64 arithmetic: C-library calls do not vectorise, these loops do (about
# 4x faster per normal), and numpy reproduces every operation bit for bit.

_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that e * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_SQRT2 = 1.4142135623730951
_EXP_MASK = np.int64(0x000FFFFFFFFFFFFF)
_ONE_BITS = np.int64(0x3FF0000000000000)
_PI_2 = 1.5707963267948966
# 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...): Taylor to s^23 (|s| <= 0.1716)
_L = tuple(1.0 / k for k in range(23, 2, -2))  # 1/23, 1/21, ..., 1/3
# sin / cos Taylor coefficients to phi^15 / phi^16 (|phi| <= pi/4)
_SIN = (
    -1.0 / 6,
    1.0 / 120,
    -1.0 / 5040,
    1.0 / 362880,
    -1.0 / 39916800,
    1.0 / 6227020800,
    -1.0 / 1307674368000,
)
_COS = (
    -1.0 / 2,
    1.0 / 24,
    -1.0 / 720,
    1.0 / 40320,
    -1.0 / 3628800,
    1.0 / 479001600,
    -1.0 / 87178291200,
    1.0 / 20922789888000,
)
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8, _L9, _L10 = _L
_SN0, _SN1, _SN2, _SN3, _SN4, _SN5, _SN6 = _SIN
_CS0, _CS1, _CS2, _CS3, _CS4, _CS5, _CS6, _CS7 = _COS


@inline
def log_unit(x):  # pragma: no cover - compiled
    """Natural log of a normal double ``x > 0``, within ~2 ulp, branch-free.

    ``x = m 2**e`` with ``m`` in ``[sqrt(1/2), sqrt(2))`` from the bits;
    ``log m = 2 atanh(s)``, ``s = (m - 1) / (m + 1)``, by its Taylor series;
    ``log x = e ln2_hi + (e ln2_lo + log m)``.
    """
    b = np.float64(x).view(np.int64)
    e = (b >> 52) - 1023
    m = np.int64((b & _EXP_MASK) | _ONE_BITS).view(np.float64)
    big = m > _SQRT2
    m = m * 0.5 if big else m
    e = e + 1 if big else e
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    p = _L0
    p = p * s2 + _L1
    p = p * s2 + _L2
    p = p * s2 + _L3
    p = p * s2 + _L4
    p = p * s2 + _L5
    p = p * s2 + _L6
    p = p * s2 + _L7
    p = p * s2 + _L8
    p = p * s2 + _L9
    p = p * s2 + _L10
    lm = 2.0 * s + 2.0 * s * s2 * p
    fe = np.float64(e)
    return fe * _LN2_HI + (fe * _LN2_LO + lm)


@inline
def sincos2pi(u):  # pragma: no cover - compiled
    """``(cos 2 pi u, sin 2 pi u)`` for ``u`` in [0, 1), within ~2 ulp, branch-free.

    ``4u = q + f`` with ``q`` the nearest integer (exact), ``phi = f pi/2`` in
    ``[-pi/4, pi/4]``, Taylor polynomials for ``sin phi`` and ``cos phi``,
    then the quadrant ``q mod 4`` rotates them.
    """
    v = 4.0 * u
    q = math.floor(v + 0.5)
    f = v - q
    phi = f * _PI_2
    p2 = phi * phi
    sp = _SN6
    sp = sp * p2 + _SN5
    sp = sp * p2 + _SN4
    sp = sp * p2 + _SN3
    sp = sp * p2 + _SN2
    sp = sp * p2 + _SN1
    sp = sp * p2 + _SN0
    sn = phi + phi * p2 * sp
    cp = _CS7
    cp = cp * p2 + _CS6
    cp = cp * p2 + _CS5
    cp = cp * p2 + _CS4
    cp = cp * p2 + _CS3
    cp = cp * p2 + _CS2
    cp = cp * p2 + _CS1
    cp = cp * p2 + _CS0
    cs = 1.0 + p2 * cp
    qi = np.int64(q) & 3
    c = cs if qi == 0 else (-sn if qi == 1 else (-cs if qi == 2 else sn))
    s = sn if qi == 0 else (cs if qi == 1 else (-sn if qi == 2 else -cs))
    return c, s


@inline
def box_muller(u0, u1):  # pragma: no cover - compiled
    """Two independent standard normals from two uniforms in [0, 1).

    ``r = sqrt(-2 log(1 - u0))`` (``1 - u0 >= 2**-53``, so finite and at most
    8.6), ``(r cos 2 pi u1, r sin 2 pi u1)``. Box & Muller, Ann. Math.
    Statist. 29 (1958) 610-611.
    """
    r = math.sqrt(-2.0 * log_unit(1.0 - u0))
    c, s = sincos2pi(u1)
    return r * c, r * s


@kernel
def env_normals(seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset, out):  # pragma: no cover
    """``out[i, k]`` = normal ``k`` of env ``env_offset + i`` (float64 [N, K]).

    Normal ``2b`` / ``2b + 1`` is the cosine / sine of Box-Muller on block
    ``b``'s two uniforms.
    """
    for i in range(out.shape[0]):
        for b in range((out.shape[1] + 1) // 2):
            w0, w1, w2, w3 = env_block(seed_lo, seed_hi, ctr_lo, ctr_hi, env_offset + i, b)
            z0, z1 = box_muller(uniform53(w0, w1), uniform53(w2, w3))
            out[i, 2 * b] = z0
            if 2 * b + 1 < out.shape[1]:
                out[i, 2 * b + 1] = z1
