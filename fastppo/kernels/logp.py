"""Log-probabilities and entropies of stored actions (categorical, Gaussian).

Float64 throughout; the public layer (:mod:`fastppo.sampling.logp`) validates
the inputs first.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from fastppo._jit import kernel_pair
from fastppo.kernels.chunks import (
    CHUNK,
    first_bad,
)
from fastppo.kernels.gaussian import HALF_LOG_2PI
from fastppo.kernels.softmax import lse_entropy
from fastppo.kernels.squash import unsquash


@kernel_pair("i8(F_2, u1_2, b1, i8_1, F_1w, F_1w)")
def categorical_logp_entropy(x, mask, has_mask, act, logp, ent):  # pragma: no cover
    """Log-prob of stored actions and entropy per env; returns -1 or the first bad env.

    A row is bad when it holds a NaN/+inf logit, allows no action, or its
    action is out of range or masked. Float64 throughout:
    :func:`fastppo.kernels.softmax.lse_entropy` over the allowed actions.
    """
    n = x.shape[0]
    width = x.shape[1]
    n_chunks = (n + CHUNK - 1) // CHUNK
    bad = np.full(n_chunks, -1, dtype=np.int64)
    for c in numba.prange(n_chunks):
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            a = act[i]
            ok = 0 <= a < width
            if ok:
                ok = x[i, a] != -np.inf and (not has_mask or mask[i, a] != 0)
            for j in range(width):
                v = x[i, j]
                if v != v or v == np.inf:
                    ok = False
            if not ok:
                bad[c] = i
                break
    first = first_bad(bad)
    if first >= 0:
        return first
    for c in numba.prange(n_chunks):
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            m, ls, h = lse_entropy(x[i], mask[i] if has_mask else mask[0], has_mask)
            logp[i] = (x[i, act[i]] - m) - ls
            ent[i] = h
    return -1


categorical_logp_entropy_serial, categorical_logp_entropy_parallel = categorical_logp_entropy


@kernel_pair("void(F_2, F_2, b1, F_2, b1, b1, F_1w, F_1w)")
def gaussian_logp_entropy(
    mean, log_std, shared_std, act, squash, squashed_entropy, logp, ent
):  # pragma: no cover - compiled
    """Diagonal-Gaussian log-prob of stored actions and entropy.

    ``logp = sum_j (-((a_j - mu_j) / sigma_j)^2 / 2 - log_std_j - log(2 pi)/2)``;
    with ``squash``, ``u = atanh(a)`` replaces ``a`` and ``log(1 - tanh(u)^2)``
    is subtracted per dimension (one clip limit and log-det: ``kernels.squash``).
    ``ent = sum_j (log_std_j + 1/2 + log(2 pi)/2)``, plus ``sum_j log(1 -
    tanh(u_j)^2)`` with ``squashed_entropy`` (and ``squash``): the one-sample
    estimate of the squashed policy's entropy. Inputs are validated by the caller.
    """
    n = mean.shape[0]
    a_dim = mean.shape[1]
    for i in numba.prange(n):
        # prange indices are unsigned: keep the row index int64 so the
        # branch below does not unify int64 with uint64 (-> float64).
        il = np.int64(0) if shared_std else np.int64(i)
        total = 0.0
        h = 0.0
        for j in range(a_dim):
            ls = np.float64(log_std[il, j])
            a = float(act[i, j])
            ld = 0.0
            if squash:
                ua, la = unsquash(a)
                a = np.float64(ua)
                ld = np.float64(la)
            z = (a - mean[i, j]) * math.exp(-ls)
            lp = -0.5 * z * z - ls - HALF_LOG_2PI - ld
            total += lp
            h += ls + 0.5 + HALF_LOG_2PI
            if squashed_entropy:
                h += ld
        logp[i] = total
        ent[i] = h


gaussian_logp_entropy_serial, gaussian_logp_entropy_parallel = gaussian_logp_entropy
