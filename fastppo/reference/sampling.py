"""Pure-numpy twins of the sampling kernels (``fastppo.kernels.categorical``,
``gaussian``, ``logp``): the executable spec.

Plain loops over envs, written to be read. The arithmetic mirrors the kernels
operation for operation (same float32 ``expf32`` and ``log32``, same float32
Box-Muller normals, same float64 accumulation order, the same C-library
``math`` calls elsewhere), so for a fixed ``(seed, counter)`` the sampled
actions and log-probabilities agree exactly; see the kernel module for the
formulas.
Reference only: tests and benchmarks import it, the package never does.
"""

from __future__ import annotations

import math

import numpy as np

from fastppo.reference.fastmath import exp64, expf32, tanh32
from fastppo.reference.rng import env_normals, env_uniforms, log32

_f32 = np.float32
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _segment(r: np.ndarray, u: float, deterministic: bool) -> tuple[int, float]:
    """Inverse-CDF draw from ``softmax(r)``; ``r`` float32/float64 with -inf = masked."""
    m = r.max()
    e = expf32((r - m).astype(np.float32))
    s = 0.0
    for v in e:
        s += float(v)
    if deterministic:
        a = int(np.argmax(r))
    else:
        t = u * s
        c = 0.0
        a = -1
        for j, v in enumerate(e):
            c += float(v)
            if t < c:
                a = j
                break
        if a < 0:
            a = int(np.nonzero(e > 0)[0][-1])
    return a, float(r[a] - m) - float(log32(np.array(s, dtype=np.float32)))


def _working(logits: np.ndarray) -> np.ndarray:
    return logits.astype(np.float64 if logits.dtype == np.float64 else np.float32)


def sample_multi_categorical(
    logits: np.ndarray,
    nvec: list[int],
    mask: np.ndarray | None,
    seed: int,
    counter: int,
    env_offset: int = 0,
    deterministic: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Dimension ``d`` of env ``i`` draws with uniform ``d`` of stream ``env_offset + i``."""
    x = _working(logits)
    n = x.shape[0]
    offs = np.concatenate([[0], np.cumsum(nvec)]).astype(int)
    u = env_uniforms(seed, counter, n, len(nvec), env_offset)
    act = np.zeros((n, len(nvec)), dtype=np.int64)
    logp = np.zeros(n, dtype=np.float32)
    for i in range(n):
        row = x[i].copy()
        if mask is not None:
            row[np.asarray(mask[i]) == 0] = -np.inf
        total = 0.0
        for d in range(len(nvec)):
            a, lp = _segment(row[offs[d] : offs[d + 1]], float(u[i, d]), deterministic)
            act[i, d] = a
            total += lp
        logp[i] = total
    return act, logp


def sample_categorical(
    logits: np.ndarray,
    mask: np.ndarray | None,
    seed: int,
    counter: int,
    env_offset: int = 0,
    deterministic: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``sample_multi_categorical`` with one dimension of all the actions."""
    act, logp = sample_multi_categorical(
        logits, [logits.shape[1]], mask, seed, counter, env_offset, deterministic
    )
    return act[:, 0], logp


def sample_gaussian(
    mean: np.ndarray,
    log_std: np.ndarray,
    seed: int,
    counter: int,
    env_offset: int = 0,
    squash: bool = False,
    deterministic: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``a = mean + exp(log_std) z`` (``tanh32(float32(a))`` when squashed), float32
    Box-Muller ``z``.

    ``exp`` and ``tanh32`` are the kernels' twins (1 ulp of libm, Eigen's float32
    rational). The squashed log-density is the exact float64 one at the float32 action.
    """
    n, a_dim = mean.shape
    ls2 = np.broadcast_to(log_std, mean.shape)
    z = np.zeros((n, a_dim)) if deterministic else env_normals(seed, counter, n, a_dim, env_offset)
    act = np.zeros((n, a_dim), dtype=np.float32)
    logp = np.zeros(n, dtype=np.float32)
    for i in range(n):
        total = 0.0
        for j in range(a_dim):
            mu = float(mean[i, j])
            ls = float(ls2[i, j])
            zz = float(z[i, j])
            u = mu + float(exp64(ls)) * zz
            lp = -0.5 * zz * zz - ls - HALF_LOG_2PI
            act[i, j] = tanh32(np.float32(u)) if squash else u
            total += lp
        logp[i] = total
    if squash:
        # the log-density of the float32 actions returned (API.md: the sampler
        # and gaussian_logp_entropy agree, saturated actions included)
        logp = gaussian_logp_entropy(mean, log_std, act, squash=True)[0].astype(np.float32)
    return act, logp


def categorical_logp_entropy(
    logits: np.ndarray, actions: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """float64 log-softmax of the stored action and the entropy of the masked softmax."""
    x = logits.astype(np.float64)
    if mask is not None:
        x = np.where(np.asarray(mask) != 0, x, -np.inf)
    n = x.shape[0]
    logp = np.zeros(n)
    ent = np.zeros(n)
    for i in range(n):
        row = x[i]
        m = row.max()
        p = np.exp(row - m)
        s = p.sum()
        lse = m + math.log(s)
        logp[i] = row[actions[i]] - lse
        q = p / s
        nz = q > 0
        ent[i] = -float(np.sum(q[nz] * (row[nz] - lse)))
    return logp, ent


def gaussian_logp_entropy(
    mean: np.ndarray,
    log_std: np.ndarray,
    actions: np.ndarray,
    squash: bool = False,
    squashed_entropy: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal-Gaussian log-density (of ``atanh(a)`` plus the tanh log-det when squashed);
    the entropy before squashing, or with ``squashed_entropy`` plus the log-det at ``a``."""
    mean = mean.astype(np.float64)
    ls = np.broadcast_to(np.asarray(log_std, dtype=np.float64), mean.shape)
    a = actions.astype(np.float64)
    log_det = np.zeros_like(a)
    if squash:
        lim = 1.0 - 2.0**-24
        a = np.clip(a, -lim, lim)
        log_det = np.log(1.0 - a * a)  # log(1 - tanh(u)^2) at u = atanh(a)
        a = np.arctanh(a)
    z = (a - mean) / np.exp(ls)
    lp = -0.5 * z * z - ls - HALF_LOG_2PI - log_det
    ent = ls + 0.5 + HALF_LOG_2PI + (log_det if squashed_entropy else 0.0)
    return lp.sum(axis=1), ent.sum(axis=1)
