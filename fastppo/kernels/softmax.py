"""The categorical log-sum-exp: one float64 evaluation for every kernel that scores actions.

For logits ``z_j`` over the allowed actions ``j`` (a mask may exclude some),
with ``m = max_j z_j``, ``s = sum_j exp(z_j - m)`` and ``w = sum_j
exp(z_j - m) (z_j - m)``:

* ``log p_a = (z_a - m) - log s`` (the shifted form: no ``exp`` overflows,
  and ``z_a - m`` is exact when ``z_a`` is close to the maximum);
* ``H = -sum_j p_j log p_j = log s - w / s``.

Each term is :func:`lse_term`: ``exp`` is the branch-free fdlibm ``exp64``
(within 1 ulp), and a term with ``z_j - m <= -708`` (``exp`` below 3.3e-308,
nothing a sum that holds the maximum's 1 can see) or a masked / ``-inf``
logit adds exactly 0, never ``0 * -inf``. Branch-free, so a loop over envs
vectorises. ``categorical_logp_entropy`` (a chunk at a time, envs in the
vector lanes) and the MLP's categorical head (``kernels.mlp``, a row at a
time through :func:`lse_entropy`) accumulate the same terms in the same
``j`` order, so a policy's own evaluation and the public log-prob agree on
float64 logits. (The samplers work in float32 with their own exp:
``kernels.categorical``.)
"""

from __future__ import annotations

import math

import numpy as np

from fastppo._jit import inline, linked
from fastppo.kernels.fastmath import _EXP64_LO, exp64


@inline
def lse_term(d):  # pragma: no cover - compiled
    """``(p, p d)`` with ``p = exp(d)`` for the shifted logit ``d = z - m <= 0``;
    ``(0, 0)`` for ``d <= -708`` (and ``-inf``)."""
    live = d > _EXP64_LO
    p = exp64(d) if live else 0.0
    return p, (p * d if live else 0.0)


@linked
def lse_entropy(z, mask, has_mask):  # pragma: no cover - compiled
    """``(m, log s, H)`` of the 1-D logits ``z`` over ``mask[j] != 0`` (all: not ``has_mask``)."""
    m = -np.inf
    for j in range(z.shape[0]):
        if (not has_mask or mask[j] != 0) and z[j] > m:
            m = np.float64(z[j])
    s = 0.0
    w = 0.0
    for j in range(z.shape[0]):
        d = z[j] - m if not has_mask or mask[j] != 0 else -np.inf
        p, pd = lse_term(d)
        s += p
        w += pd
    ls = math.log(s)
    return m, ls, ls - w / s
