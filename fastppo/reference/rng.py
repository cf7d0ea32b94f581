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


LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
_L = [1.0 / k for k in range(23, 2, -2)]
_S = [
    -1.0 / 6,
    1.0 / 120,
    -1.0 / 5040,
    1.0 / 362880,
    -1.0 / 39916800,
    1.0 / 6227020800,
    -1.0 / 1307674368000,
]
_C = [
    -1.0 / 2,
    1.0 / 24,
    -1.0 / 720,
    1.0 / 40320,
    -1.0 / 3628800,
    1.0 / 479001600,
    -1.0 / 87178291200,
    1.0 / 20922789888000,
]


def log_unit(x: np.ndarray) -> np.ndarray:
    """The kernels' float64 log: ``log(m 2**e) = e ln2 + 2 atanh((m-1)/(m+1))``.

    ``m`` in ``[sqrt(1/2), sqrt(2))``; the atanh series to ``s**23``. Same
    operations, same order as :func:`fastppo.kernels.rng.log_unit`.
    """
    x = np.asarray(x, dtype=np.float64)
    b = x.view(np.int64)
    e = (b >> 52) - 1023
    m = ((b & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000).view(np.float64)
    big = m > 1.4142135623730951
    m = np.where(big, m * 0.5, m)
    e = np.where(big, e + 1, e)
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    p = np.full_like(s, _L[0])
    for c in _L[1:]:
        p = p * s2 + c
    lm = 2.0 * s + 2.0 * s * s2 * p
    fe = e.astype(np.float64)
    return fe * LN2_HI + (fe * LN2_LO + lm)


def sincos2pi(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(cos 2 pi u, sin 2 pi u)`` as the kernels compute them (quadrant + Taylor)."""
    v = 4.0 * np.asarray(u, dtype=np.float64)
    q = np.floor(v + 0.5)
    phi = (v - q) * 1.5707963267948966
    p2 = phi * phi
    sp = np.full_like(p2, _S[-1])
    for c in reversed(_S[:-1]):
        sp = sp * p2 + c
    sn = phi + phi * p2 * sp
    cp = np.full_like(p2, _C[-1])
    for c in reversed(_C[:-1]):
        cp = cp * p2 + c
    cs = 1.0 + p2 * cp
    qi = q.astype(np.int64) & 3
    cos = np.select([qi == 0, qi == 1, qi == 2], [cs, -sn, -cs], sn)
    sin = np.select([qi == 0, qi == 1, qi == 2], [sn, cs, -sn], -cs)
    return cos, sin


def env_normals(seed: int, counter: int, n_envs: int, k: int, env_offset: int = 0) -> np.ndarray:
    """Standard normals 0..k-1 of each env by Box-Muller: float64 [n_envs, k].

    Pair ``b`` uses uniforms ``(2b, 2b+1)`` (both from block ``b``):
    ``r = sqrt(-2 log(1 - u0))``, ``z_2b = r cos(2 pi u1)``,
    ``z_2b+1 = r sin(2 pi u1)``, with the log and sin/cos of
    :func:`log_unit` and :func:`sincos2pi`. ``1 - u0`` lies in
    ``[2**-53, 1]``, so the log is finite. Box & Muller, Ann. Math. Statist.
    29 (1958) 610-611.
    """
    npair = (k + 1) // 2
    u = env_uniforms(seed, counter, n_envs, 2 * npair, env_offset)
    out = np.empty((n_envs, 2 * npair), dtype=np.float64)
    for b in range(npair):
        r = np.sqrt(-2.0 * log_unit(1.0 - u[:, 2 * b]))
        c, s = sincos2pi(u[:, 2 * b + 1])
        out[:, 2 * b] = r * c
        out[:, 2 * b + 1] = r * s
    return out[:, :k]
