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


def env_normals(seed: int, counter: int, n_envs: int, k: int, env_offset: int = 0) -> np.ndarray:
    """Standard normals 0..k-1 of each env by Box-Muller: float64 [n_envs, k].

    Pair ``b`` uses uniforms ``(2b, 2b+1)`` (both from block ``b``):
    ``r = sqrt(-2 log(1 - u0))``, ``z_2b = r cos(2 pi u1)``,
    ``z_2b+1 = r sin(2 pi u1)``. ``1 - u0`` lies in ``[2**-53, 1]``, so the
    log is finite. Box & Muller, Ann. Math. Statist. 29 (1958) 610-611.
    """
    import math

    u = env_uniforms(seed, counter, n_envs, 2 * ((k + 1) // 2), env_offset)
    out = np.empty((n_envs, k), dtype=np.float64)
    for i in range(n_envs):
        for j in range(k):
            u0 = float(u[i, 2 * (j // 2)])
            u1 = float(u[i, 2 * (j // 2) + 1])
            r = math.sqrt(-2.0 * math.log(1.0 - u0))
            # math.* is the C library, like the compiled kernel's calls.
            out[i, j] = r * (
                math.cos(2.0 * math.pi * u1) if j % 2 == 0 else math.sin(2.0 * math.pi * u1)
            )
    return out
