"""Batched action sampling for PPO actors, and the matching training-side log-probs.

Randomness is counter-based (Philox4x32-10, :mod:`fastppo.kernels.rng`): env
``n`` of a call draws from the stream keyed by ``(seed, counter, n)``, so the
same ``(seed, counter)`` gives the same actions whatever the thread count and
however the batch is split (``env_offset=k`` makes row ``i`` of a slice use
stream ``k + i``). Callers bump ``counter`` every step.

All samplers validate in Python what is cheap (types, shapes, ranges) and let
the kernel find bad values (NaN or +inf logits, rows with no allowed action,
non-finite Gaussian parameters): the kernel returns the first bad env and this
layer raises ``ValueError`` naming it. When ``out=`` is given the kernel
validates every row before it writes anything, so a failed call leaves the
caller's buffers untouched; without ``out=`` the check rides along the
sampling pass and the partial fresh outputs are dropped.

References
----------
Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC11 (2011).
Schulman et al., "Proximal Policy Optimization Algorithms", arXiv:1707.06347.
Haarnoja et al., "Soft Actor-Critic", arXiv:1801.01290 (tanh squashing, App. C).
Huang & Ontanon, "A Closer Look at Invalid Action Masking in Policy Gradient
Algorithms", arXiv:2006.14171 (masked logits).
"""

from __future__ import annotations

import numpy as np

from fastppo import _dispatch
from fastppo import codec as _codec
from fastppo.sampling.bytes import sample_categorical_bytes, sample_gaussian_bytes
from fastppo.sampling.categorical import sample_categorical, sample_multi_categorical
from fastppo.sampling.gaussian import sample_gaussian
from fastppo.sampling.logp import categorical_logp_entropy, gaussian_logp_entropy

__all__ = [
    "categorical_logp_entropy",
    "gaussian_logp_entropy",
    "sample_categorical",
    "sample_categorical_bytes",
    "sample_gaussian",
    "sample_gaussian_bytes",
    "sample_multi_categorical",
]


def _warmup() -> None:
    """Compile every sampler variant: float32/float64 arrays, the four byte dtypes,
    serial and parallel builds (sizes straddling the parallel threshold)."""
    for n in (1, _dispatch.PARALLEL_MIN_LOGITS):
        for dt in (np.float32, np.float64):
            lg = np.zeros((n, 2), dtype=dt)
            mk = np.ones((n, 2), dtype=bool)
            sample_categorical(lg, seed=0, counter=0)
            sample_categorical(lg, mk, seed=0, counter=0)
            sample_multi_categorical(lg, [1, 1], mk, seed=0, counter=0)
            sample_gaussian(lg, lg[0], seed=0, counter=0)
            sample_gaussian(lg, lg, seed=0, counter=0)
            categorical_logp_entropy(lg, np.zeros(n, dtype=np.int64), mk)
            gaussian_logp_entropy(lg, lg[0], lg.astype(dt), squash=True)
        for bdt in _codec.FLOAT_DTYPES:
            buf = _codec.encode(np.zeros(2 * n, dtype=np.float32), bdt)
            sample_categorical_bytes(buf, n_envs=n, n_actions=2, dtype=bdt, seed=0, counter=0)
            sample_categorical_bytes(
                buf, n_envs=n, n_actions=2, dtype=bdt, mask_buf=b"\x01" * (2 * n), seed=0, counter=0
            )
            sample_gaussian_bytes(buf, n_envs=n, action_dim=1, dtype=bdt, seed=0, counter=0)
