"""The tanh squash of a Gaussian action: one clip limit and one log-det for every kernel.

A squashed action is ``a = tanh(u)``, ``u ~ N(mean, std)``, stored as float32.
Its log-density is ``log N(u) - log(1 - tanh(u)^2)`` at ``u = atanh(a)``
(Haarnoja et al. 2018, "Soft Actor-Critic", arXiv 1801.01290, appendix C).

:func:`unsquash` evaluates ``u`` and the log-det in float32, at
``float32(a)`` (the samplers' action dtype), sixteen lanes per AVX-512
instruction and without a division; the float64 version it replaces (two
fdlibm logs, a division each) made a squashed sampler 4.3x the cost of an
unsquashed one. Its two logs and the polynomial are fused multiply-adds
(:func:`fastppo.kernels.rng.log32_fma`): 33 -> 26 us for 24,576 actions
(znver4), and a squashed ``sample_gaussian`` [4096x6] 99 -> 91 us.

* ``atanh`` needs ``|a| < 1``: actions are clipped to ``+-A_LIMIT``, the
  largest float32 below 1 (``1 - 2**-24``), so every float32 action strictly
  inside ``(-1, 1)`` is used as it is and only ``+-1.0`` moves;
* with ``x = |a|``, ``lp = log32(1 + x)`` and ``lm = log32(1 - x)``
  (:func:`fastppo.kernels.rng.log32_fma`, Cephes ``logf``, within 1 ulp; ``1 - x``
  is exact for ``x >= 1/2``): the log-det ``log(1 - a^2) = lp + lm``, finite
  at the limit (``-15.9``), and ``|u| = (lp - lm) / 2`` for ``x >= 1/2``;
  below, where that difference cancels, ``|u|`` is Cephes ``atanhf``'s odd
  polynomial ``x + x^3 P(x^2)`` (fused). Both are computed and one selected, so a
  loop over actions vectorises.

Accuracy (``tests/test_fastmath.py`` measures it against float64 ``arctanh``
and ``log1p(-a^2)`` at float32 actions): ``u`` within 2 float32 ulp (1.6
measured), the log-det within 1 ulp of its value plus 1.5e-7.

The sampler (``kernels.gaussian``), ``gaussian_logp_entropy`` and the MLP
head (``kernels.mlp``) all evaluate the density here, at the float32 action
they return or receive, so the three agree even on saturated actions (a PPO
ratio starts at 1).
"""

from __future__ import annotations

import numpy as np

from fastppo._jit import inline
from fastppo.kernels.fastmath import fma32
from fastppo.kernels.rng import log32_fma

_F = np.float32
#: The largest float32 below 1: where actions are clipped before ``atanh``.
A_LIMIT = 1.0 - 2.0**-24
#: The squashed action range as a strict bound: ``|a| < SQUASH_BOUND`` is
#: ``|a| <= 1`` for a float32 or float64 action (the check every kernel runs).
SQUASH_BOUND = float(np.nextafter(1.0, 2.0))
_A_LIMIT_F = _F(A_LIMIT)
_ONE_F = _F(1.0)
_HALF_F = _F(0.5)
# Cephes atanhf: atanh(x) = x + x^3 P(x^2) for |x| < 1/2
_AT0, _AT1, _AT2, _AT3, _AT4 = (
    _F(c)
    for c in (
        1.81740078349e-1,
        8.24370301058e-2,
        1.46691431730e-1,
        1.99782164500e-1,
        3.33337300303e-1,
    )
)


@inline
def unsquash(a):  # pragma: no cover - compiled
    """``(u, log(1 - tanh(u)^2))`` in float32 at ``u = atanh(a)``, ``a`` rounded
    to float32 and clipped to ``[-A_LIMIT, A_LIMIT]`` (see the module docstring)."""
    ac = min(max(np.float32(a), -_A_LIMIT_F), _A_LIMIT_F)
    x = abs(ac)
    lp = log32_fma(_ONE_F + x)
    lm = log32_fma(_ONE_F - x)
    z = x * x
    p = fma32(_AT0, z, _AT1)
    p = fma32(p, z, _AT2)
    p = fma32(p, z, _AT3)
    p = fma32(p, z, _AT4)
    small = fma32(p * z, x, x)
    au = small if x < _HALF_F else _HALF_F * (lp - lm)
    return (au if ac >= 0 else -au), lp + lm
