"""The tanh squash of a Gaussian action: one clip limit and one log-det for every kernel.

A squashed action is ``a = tanh(u)``, ``u ~ N(mean, std)``, stored as float32.
Its log-density is ``log N(u) - log(1 - tanh(u)^2)`` at ``u = atanh(a)``
(Haarnoja et al. 2018, "Soft Actor-Critic", arXiv 1801.01290, appendix C).

* ``atanh`` needs ``|a| < 1``: actions are clipped to ``+-A_LIMIT``, the
  largest float32 below 1 (``1 - 2**-24``), so every float32 action strictly
  inside ``(-1, 1)`` is used as it is and only ``+-1.0`` moves;
* both ``u = atanh(a) = (log(1 + a) - log(1 - a)) / 2`` and the log-det
  ``log(1 - tanh(u)^2) = log(1 - a^2) = log(1 + a) + log(1 - a)`` come from
  the same two logarithms, of ``1 + a`` and ``1 - a``: exact in float64 for
  a float32 ``a`` (``|a| >= 2**-29``; below, both are within 1e-16 of their
  true values), finite at the limit, and :func:`fastppo.kernels.fastmath.log64`
  is branch-free, so a loop over actions vectorises (``math.atanh`` and
  ``math.log1p`` are libm calls per element: they made a squashed sampler
  20x slower than the unsquashed one).

The sampler (``kernels.gaussian``), ``gaussian_logp_entropy`` and the MLP
head (``kernels.mlp``) all evaluate the density here, at the float32 action
they return or receive, so the three agree even on saturated actions (a PPO
ratio starts at 1).
"""

from __future__ import annotations

from fastppo._jit import inline
from fastppo.kernels.fastmath import log64

#: The largest float32 below 1: where actions are clipped before ``atanh``.
A_LIMIT = 1.0 - 2.0**-24


@inline
def unsquash(a):  # pragma: no cover - compiled
    """``(u, log(1 - tanh(u)^2))`` at ``u = atanh(a)``, ``a`` clipped to ``[-A_LIMIT, A_LIMIT]``.

    ``lp = log(1 + a)``, ``lm = log(1 - a)``: ``u = (lp - lm) / 2`` and the
    log-det is ``lp + lm``. Both are within a few ulp of the float64 value
    plus 1e-16 absolute (measured in ``tests/test_fastmath.py``).
    """
    ac = min(max(a, -A_LIMIT), A_LIMIT)
    lp = log64(1.0 + ac)
    lm = log64(1.0 - ac)
    return 0.5 * (lp - lm), lp + lm
