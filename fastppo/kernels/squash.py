"""The tanh squash of a Gaussian action: one clip limit and one log-det for every kernel.

A squashed action is ``a = tanh(u)``, ``u ~ N(mean, std)``, stored as float32.
Its log-density is ``log N(u) - log(1 - tanh(u)^2)`` at ``u = atanh(a)``
(Haarnoja et al. 2018, "Soft Actor-Critic", arXiv 1801.01290, appendix C).

* ``atanh`` needs ``|a| < 1``: actions are clipped to ``+-A_LIMIT``, the
  largest float32 below 1 (``1 - 2**-24``), so every float32 action strictly
  inside ``(-1, 1)`` is used as it is and only ``+-1.0`` moves;
* ``log(1 - tanh(u)^2) = log1p(-a^2)`` at the clipped action: exact for a
  float32 ``a`` (``a^2`` and ``1 - a^2`` are exact in float64), finite at the
  limit, and one libm call where the ``u`` form needs two.

The sampler (``kernels.gaussian``), ``gaussian_logp_entropy`` and the MLP
head (``kernels.mlp``) all evaluate the density here, at the float32 action
they return or receive, so the three agree even on saturated actions (a PPO
ratio starts at 1).
"""

from __future__ import annotations

import math

from fastppo._jit import inline

#: The largest float32 below 1: where actions are clipped before ``atanh``.
A_LIMIT = 1.0 - 2.0**-24


@inline
def unsquash(a):  # pragma: no cover - compiled
    """``(u, log(1 - tanh(u)^2))`` at ``u = atanh(a)``, ``a`` clipped to ``[-A_LIMIT, A_LIMIT]``.

    The log-det is ``log1p(-a * a)`` of the clipped action itself: for a
    float32 ``a``, ``a * a`` is exact in float64 and so is ``1 - a * a`` near
    1 (Sterbenz), so it needs neither ``u`` nor an ``exp``.
    """
    ac = min(max(a, -A_LIMIT), A_LIMIT)
    return math.atanh(ac), math.log1p(-ac * ac)
