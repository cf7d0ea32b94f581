"""The tanh squash of a Gaussian action: one clip limit and one log-det for every kernel.

A squashed action is ``a = tanh(u)``, ``u ~ N(mean, std)``, stored as float32.
Its log-density is ``log N(u) - log(1 - tanh(u)^2)`` at ``u = atanh(a)``
(Haarnoja et al. 2018, "Soft Actor-Critic", arXiv 1801.01290, appendix C).

* ``atanh`` needs ``|a| < 1``: actions are clipped to ``+-A_LIMIT``, the
  largest float32 below 1 (``1 - 2**-24``), so every float32 action strictly
  inside ``(-1, 1)`` is used as it is and only ``+-1.0`` moves;
* ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` has no cancellation
  and no overflow for any ``u``.

The sampler (``kernels.sampling``), ``gaussian_logp_entropy`` and the MLP
head (``kernels.mlp``) all evaluate the density here, at the float32 action
they return or receive, so the three agree even on saturated actions (a PPO
ratio starts at 1).
"""

from __future__ import annotations

import math

from fastppo._jit import inline

#: The largest float32 below 1: where actions are clipped before ``atanh``.
A_LIMIT = 1.0 - 2.0**-24
_LOG2 = math.log(2.0)


@inline
def unsquash(a):  # pragma: no cover - compiled
    """``u = atanh(a)`` with ``a`` clipped to ``[-A_LIMIT, A_LIMIT]``."""
    return math.atanh(min(max(a, -A_LIMIT), A_LIMIT))


@inline
def log_det(u):  # pragma: no cover - compiled
    """``log(1 - tanh(u)^2)``, computed as ``2 (log 2 - u - softplus(-2u))``."""
    t = -2.0 * u
    return 2.0 * (_LOG2 - u - (max(t, 0.0) + math.log1p(math.exp(-abs(t)))))
