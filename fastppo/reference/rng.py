"""Philox4x32-10 in plain numpy: the executable spec of ``fastppo.kernels.rng``.

Vectorised over envs with uint64 arithmetic on 32-bit values, exactly as the
kernel computes it; see that module for the stream layout. Reference only:
clear before fast.

References
----------
Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC11 (2011).
"""

from __future__ import annotations

import numpy as np

M0 = np.uint64(0xD2511F53)
M1 = np.uint64(0xCD9E8D57)
W0 = np.uint64(0x9E3779B9)
W1 = np.uint64(0xBB67AE85)
MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Philox4x32-10 of ``counter`` [..., 4] under ``key`` [..., 2] (uint32) -> uint32 [..., 4]."""
    c = [np.asarray(counter[..., i], dtype=np.uint64) for i in range(4)]
    k0 = np.asarray(key[..., 0], dtype=np.uint64)
    k1 = np.asarray(key[..., 1], dtype=np.uint64)
    for _ in range(10):
        p0 = M0 * c[0]
        p1 = M1 * c[2]
        c = [
            (p1 >> np.uint64(32)) ^ c[1] ^ k0,
            p1 & MASK32,
            (p0 >> np.uint64(32)) ^ c[3] ^ k1,
            p0 & MASK32,
        ]
        k0 = (k0 + W0) & MASK32
        k1 = (k1 + W1) & MASK32
    return np.stack(c, axis=-1).astype(np.uint32)


def env_words(seed: int, counter: int, envs: np.ndarray, block: int) -> np.ndarray:
    """Block ``block`` of each env's stream: uint32 [len(envs), 4].

    Counter words ``(block, env, counter & 0xFFFFFFFF, counter >> 32)``, key
    ``(seed & 0xFFFFFFFF, seed >> 32)``.
    """
    envs = np.asarray(envs, dtype=np.uint64)
    n = envs.shape[0]
    ctr = np.empty((n, 4), dtype=np.uint64)
    ctr[:, 0] = block
    ctr[:, 1] = envs
    ctr[:, 2] = counter & 0xFFFFFFFF
    ctr[:, 3] = counter >> 32
    key = np.empty((n, 2), dtype=np.uint64)
    key[:, 0] = seed & 0xFFFFFFFF
    key[:, 1] = seed >> 32
    return philox4x32_10(ctr, key)


def uniform53(w_hi: np.ndarray, w_lo: np.ndarray) -> np.ndarray:
    """``((w_hi >> 5) * 2**26 + (w_lo >> 6)) * 2**-53``: doubles in [0, 1)."""
    a = w_hi.astype(np.uint64) >> np.uint64(5)
    b = w_lo.astype(np.uint64) >> np.uint64(6)
    return ((a << np.uint64(26)) | b).astype(np.float64) * 2.0**-53


def env_uniforms(seed: int, counter: int, n_envs: int, k: int, env_offset: int = 0) -> np.ndarray:
    """Uniforms 0..k-1 of envs ``env_offset .. env_offset+n_envs-1``: float64 [n_envs, k].

    Uniform ``j`` comes from block ``j // 2``: words (0, 1) for even ``j``,
    (2, 3) for odd ``j``.
    """
    envs = np.arange(env_offset, env_offset + n_envs, dtype=np.uint64)
    out = np.empty((n_envs, k), dtype=np.float64)
    for j in range(k):
        w = env_words(seed, counter, envs, j // 2)
        h = 2 * (j % 2)
        out[:, j] = uniform53(w[:, h], w[:, h + 1])
    return out


F32 = np.float32
_LP = [
    F32(c)
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
]
_SF = [F32(-1 / 6), F32(1 / 120), F32(-1 / 5040), F32(1 / 362880)]
_CF = [F32(-1 / 2), F32(1 / 24), F32(-1 / 720), F32(1 / 40320), F32(-1 / 3628800)]


def log32(x: np.ndarray) -> np.ndarray:
    """The kernels' float32 log (Cephes ``logf``) for normal ``x > 0``.

    ``x = m 2**e``, ``m`` in ``[sqrt(1/2), sqrt(2))``, ``f = m - 1``,
    ``log x = (f - f^2/2 + f^3 P(f) + e lo) + e hi`` (``ln 2 = hi + lo``).
    Same float32 operations, same order as :func:`fastppo.kernels.rng.log32`.
    """
    x = np.asarray(x, dtype=F32)
    b = x.view(np.int32)
    fe = (b >> 23).astype(F32) - F32(127.0)
    m = ((b & 0x007FFFFF) | 0x3F800000).astype(np.int32).view(F32)
    big = m > F32(1.41421356)
    m = np.where(big, m * F32(0.5), m)
    fe = np.where(big, fe + F32(1.0), fe)
    f = m - F32(1.0)
    z = f * f
    y = _LP[0] * f + _LP[1]
    for c in _LP[2:]:
        y = y * f + c
    y = y * f * z
    y = y + fe * F32(-2.12194440e-4)
    y = y - F32(0.5) * z
    return (f + y) + fe * F32(0.693359375)


def sincos24(k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cos, sin)`` of ``2 pi k 2**-24`` as the kernels compute them (float32).

    ``v = k 2**-22``, ``q = floor(v + 1/2)``, ``phi = (v - q) pi/2``, Taylor
    polynomials (sin to ``phi^9``, cos to ``phi^10``), quadrant ``q mod 4``.
    """
    v = np.asarray(k, dtype=np.int32).astype(F32) * F32(2.0**-22)
    q = np.floor(v + F32(0.5))
    phi = (v - q) * F32(1.5707963267948966)
    p2 = phi * phi
    sp = _SF[3] * p2 + _SF[2]
    sp = sp * p2 + _SF[1]
    sp = sp * p2 + _SF[0]
    sn = phi + phi * p2 * sp
    cp = _CF[4] * p2 + _CF[3]
    for c in reversed(_CF[:3]):
        cp = cp * p2 + c
    cs = F32(1.0) + p2 * cp
    qs = [q == F32(1.0), q == F32(2.0), q == F32(3.0)]
    cos = np.select(qs, [-sn, -cs, sn], cs).astype(F32)
    sin = np.select(qs, [cs, -sn, -cs], sn).astype(F32)
    return cos, sin


def box_muller32(wr: np.ndarray, wa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two float32 standard normals from a radius word ``wr`` and an angle word ``wa``.

    ``x = (float32(wr >> 1) + 1/2) 2**-31`` in ``[2**-32, 1]``, ``r =
    sqrt(-2 log32(x))``, angle ``2 pi (wa >> 8) 2**-24``; returns ``(r cos,
    r sin)``. Box & Muller, Ann. Math. Statist. 29 (1958) 610-611.
    """
    ia = (np.asarray(wr, dtype=np.uint32) >> np.uint32(1)).astype(np.int32)
    ib = (np.asarray(wa, dtype=np.uint32) >> np.uint32(8)).astype(np.int32)
    x = (ia.astype(F32) + F32(0.5)) * F32(2.0**-31)
    r = np.sqrt(F32(-2.0) * log32(x))
    c, s = sincos24(ib)
    return r * c, r * s


def env_normals(seed: int, counter: int, n_envs: int, k: int, env_offset: int = 0) -> np.ndarray:
    """Standard normals 0..k-1 of each env by Box-Muller: float32 [n_envs, k].

    Pair ``p`` (normals ``2p``, ``2p + 1``: cosine, sine) comes from words
    ``(w0, w1)`` of block ``p // 2`` for even ``p``, ``(w2, w3)`` for odd
    ``p``, through :func:`box_muller32`: one block feeds four normals.
    """
    npair = (k + 1) // 2
    envs = np.arange(env_offset, env_offset + n_envs, dtype=np.uint64)
    out = np.empty((n_envs, 2 * npair), dtype=F32)
    for p in range(npair):
        w = env_words(seed, counter, envs, p // 2)
        h = 2 * (p % 2)
        out[:, 2 * p], out[:, 2 * p + 1] = box_muller32(w[:, h], w[:, h + 1])
    return out[:, :k]
