"""The categorical log-sum-exp: one float64 evaluation for every kernel that scores actions.

For logits ``z_j`` over the allowed actions ``j`` (a mask may exclude some),
with ``m = max_j z_j``, ``s = sum_j exp(z_j - m)`` and ``w = sum_j
exp(z_j - m) (z_j - m)``:

* ``log p_a = (z_a - m) - log s`` (the shifted form: no ``exp`` overflows,
  and ``z_a - m`` is exact when ``z_a`` is close to the maximum);
* ``H = -sum_j p_j log p_j = log s - w / s``.

A logit of ``-inf`` (or a masked one) adds nothing, never ``0 * -inf``.
``categorical_logp_entropy`` and the MLP's categorical head (``kernels.mlp``)
both call :func:`lse_entropy`, so a policy's own evaluation and the public
log-prob agree to the bit on float64 logits. (The samplers work in float32
with their own exp: ``kernels.categorical``.)
"""

from __future__ import annotations

import math

import numpy as np

from fastppo._jit import subroutine


@subroutine
def lse_entropy(z, mask, has_mask):  # pragma: no cover - compiled
    """``(m, log s, H)`` of the 1-D logits ``z`` over ``mask[j] != 0`` (all: not ``has_mask``)."""
    m = -np.inf
    for j in range(z.shape[0]):
        if (not has_mask or mask[j] != 0) and z[j] > m:
            m = np.float64(z[j])
    s = 0.0
    w = 0.0
    for j in range(z.shape[0]):
        if not has_mask or mask[j] != 0:
            d = z[j] - m
            p = math.exp(d)
            if p > 0.0:
                s += p
                w += p * d
    ls = math.log(s)
    return m, ls, ls - w / s
