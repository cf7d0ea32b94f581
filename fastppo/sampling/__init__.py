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
