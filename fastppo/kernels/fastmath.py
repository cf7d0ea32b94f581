"""Vectorisable elementary functions shared by the kernels.

``expf32(x)`` is the package's one float32 ``exp`` (the samplers' softmax
weights, V-trace's importance ratios), branch-free so that LLVM vectorises a
loop that calls it (``math.exp`` is a libm call per element, which no loop
around it survives):

* ``xc = clamp(x, LO, HI)`` with ``LO = -87.3`` and ``HI = 88.376``: the
  result's power of two ``2**k`` then stays a normal float32, so no operation
  ever produces a subnormal (which costs a microcode assist of tens of cycles
  per element on x86: masked logits are ``-inf``, one in five of a typical
  batch);
* Cody-Waite reduction ``xc = k ln2 + r``, ``k = round(xc / ln2)``,
  ``ln2 = C1 + C2`` with ``C1`` exact in 9 bits (so ``k * C1`` is exact),
  ``|r| <= ln2 / 2``;
* ``exp(r) ~ 1 + r + r^2 P(r)``, ``P`` the degree-5 Cephes ``expf``
  polynomial; ``2**k`` built from exponent bits, one multiply;
* ``x <= LO`` gives 0 (true values below 1.3e-38, flushed to zero as FTZ
  hardware would), ``x >= HI`` gives ``+inf`` (true values above 2.4e38).

Measured accuracy, against float64 ``math.exp``: every float32 ``x`` in
``(LO, HI)`` within 1.2e-7 relative, i.e. at most 1 ulp of the result
(2**-23), as plain IEEE operations (also when FMA-contracted).
``tests/test_advantages_fastmath.py`` re-checks this on 2M random and 200k
evenly spaced inputs, and :mod:`fastppo.reference.fastmath` reproduces it bit
for bit.

``expf32_nonpos`` is the same function for ``x <= 0`` (the samplers'
``l - max``), compiled without the upper-range clamp and select.

Written as single float32 IEEE operations, the result is the same on every
CPU and on every code path. Callers do not compile it with ``contract``: LLVM
may fuse the vector body and the scalar remainder of a loop differently, which
would make an element's rounding depend on its position.
"""

from __future__ import annotations

import numpy as np

from fastppo._jit import inline

_f32 = np.float32
_LOG2E = _f32(1.44269504088896341)
_C1 = _f32(0.693359375)  # ln 2 split: C1 + C2 = ln 2, C1 has 9 significant bits
_C2 = _f32(-2.12194440e-4)
_SHIFT = _f32(12582912.0)  # 1.5 * 2**23: adding it rounds to an integer
_SHIFT_BITS = np.int32(0x4B400000)  # the bits of _SHIFT: bits(kd) - this = k
_P0 = _f32(1.9875691500e-4)
_P1 = _f32(1.3981999507e-3)
_P2 = _f32(8.3334519073e-3)
_P3 = _f32(4.1665795894e-2)
_P4 = _f32(1.6666665459e-1)
_P5 = _f32(5.0000001201e-1)
_ONE = _f32(1.0)
_LO = _f32(-87.3)  # exp(-87.3) = 1.3e-38: below, 2**k would be subnormal; result 0
_HI = _f32(88.3762626647949)  # 127.5 ln 2: from here k = 128 and 2**k overflows
_INF = _f32(np.inf)
_ZERO = _f32(0.0)
_I127 = np.int32(127)
_I23 = np.int32(23)


@inline
def _expf32(x, finite_above):  # pragma: no cover - compiled
    """The one implementation; ``finite_above`` is a compile-time constant at
    both call sites below, so LLVM drops the upper-range ops for ``x <= 0``."""
    xc = x if x > _LO else _LO
    if finite_above:
        xc = xc if xc < _HI else _HI
    kd = xc * _LOG2E + _SHIFT
    k = kd - _SHIFT
    # kd's mantissa holds 2**22 + k; subtracting the bits of _SHIFT leaves k.
    ki = np.float32(kd).view(np.int32) - _SHIFT_BITS
    r = xc - k * _C1
    r = r - k * _C2
    z = r * r
    y = _P0 * r + _P1
    y = y * r + _P2
    y = y * r + _P3
    y = y * r + _P4
    y = y * r + _P5
    y = y * z + r + _ONE
    v = y * np.int32((ki + _I127) << _I23).view(np.float32)
    if finite_above:
        v = v if x < _HI else _INF
    return v if x > _LO else _ZERO


@inline
def expf32(x):  # pragma: no cover - compiled
    """float32 ``exp(x)`` for any float32 ``x`` (see the module docstring)."""
    return _expf32(x, True)


@inline
def expf32_nonpos(x):  # pragma: no cover - compiled
    """:func:`expf32` for ``x <= 0`` (softmax weights ``l - max``): the same
    results, without the upper-range clamp and select (about 20% of the ops)."""
    return _expf32(x, False)
