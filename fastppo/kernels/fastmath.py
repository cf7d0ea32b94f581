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

``fma32(a, b, c)`` is an explicit float32 fused multiply-add (see its
docstring), for results that no numpy twin reproduces: the squash's logs and
``expf32_fma``, V-trace's ratios. ``fma(a, b, c)`` is the same for a kernel's
float type, float32 or float64: the advantage sweeps' multiply-adds.

``expf32_nonpos`` is the same function for ``x <= 0`` (the samplers'
``l - max``), compiled without the upper-range clamp and select.

Written as single float32 IEEE operations, the result is the same on every
CPU and on every code path. Callers do not compile it with ``contract``: LLVM
may fuse the vector body and the scalar remainder of a loop differently, which
would make an element's rounding depend on its position.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

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


def fma_ir(builder: Any, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` as LLVM's ``llvm.fma`` on the IR values' type: a float, a
    double, or a vector of either (the register tiles'), one rounding per lane.
    The one place the sweeps' and the squash's fused multiply-adds are emitted."""
    t = a.type
    lanes = isinstance(t, ir.VectorType)
    bits = 32 if isinstance(t.element if lanes else t, ir.FloatType) else 64
    name = f"llvm.fma.v{t.count}f{bits}" if lanes else f"llvm.fma.f{bits}"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(t, [t] * 3), name)
    return builder.call(fn, [a, b, c])


def _fma_codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    return fma_ir(builder, *args)


def _fma32(typingctx, a, b, c):  # pragma: no cover - compiled
    """float32 ``a * b + c`` rounded once (LLVM's ``llvm.fma.f32``: one
    ``vfmadd`` per 16 lanes on AVX-512), for float32 arguments only.

    Fused explicitly, not through the ``contract`` flag, so that an element
    rounds the same way in a loop's vector body and in its scalar remainder,
    on every CPU (without FMA hardware LLVM calls libm's ``fmaf``, which
    rounds once too). numpy has no fused multiply-add, so results that a
    numpy twin reproduces bit for bit never use it.
    """
    f32 = types.float32
    if not (a == f32 and b == f32 and c == f32):
        return None  # a typing error at the call: no silent narrowing
    return f32(f32, f32, f32), _fma_codegen


def _fma(typingctx, a, b, c):  # pragma: no cover - compiled
    """:func:`fma32`'s twin for a kernel's float type: ``a * b + c`` rounded
    once, for three float32 or three float64 arguments (``llvm.fma.f64`` for
    the latter), so a sweep compiled once per dtype fuses in both. Mixed
    types are a typing error: nothing is narrowed or widened silently."""
    if not (a == b == c and a in (types.float32, types.float64)):
        return None
    return a(a, a, a), _fma_codegen


# typed for mypy as what kernels call: fma32(a, b, c), fma(a, b, c)
fma32: Callable[[Any, Any, Any], Any] = cast(Any, intrinsic(_fma32))
fma: Callable[[Any, Any, Any], Any] = cast(Any, intrinsic(_fma))


@inline
def _mad(a, b, c, fused):  # pragma: no cover - compiled
    """``a * b + c``: fused (:func:`fma32`, one rounding) or two IEEE operations."""
    return fma32(a, b, c) if fused else a * b + c


@inline
def _expf32(x, finite_above, fused):  # pragma: no cover - compiled
    """The one implementation; ``finite_above`` and ``fused`` are compile-time
    constants at the call sites below, so LLVM drops the upper-range ops for
    ``x <= 0`` and keeps one of :func:`_mad`'s two forms. Unfused, each
    :func:`_mad` is the plain expression it replaces (``xc - k C1`` is ``-k C1
    + xc`` exactly), so :mod:`fastppo.reference.fastmath` reproduces it."""
    xc = x if x > _LO else _LO
    if finite_above:
        xc = xc if xc < _HI else _HI
    kd = _mad(xc, _LOG2E, _SHIFT, fused)
    k = kd - _SHIFT
    # kd's mantissa holds 2**22 + k; subtracting the bits of _SHIFT leaves k.
    ki = np.float32(kd).view(np.int32) - _SHIFT_BITS
    r = _mad(-k, _C1, xc, fused)
    r = _mad(-k, _C2, r, fused)
    z = r * r
    y = _mad(_P0, r, _P1, fused)
    y = _mad(y, r, _P2, fused)
    y = _mad(y, r, _P3, fused)
    y = _mad(y, r, _P4, fused)
    y = _mad(y, r, _P5, fused)
    y = _mad(y, z, r, fused) + _ONE
    v = y * np.int32((ki + _I127) << _I23).view(np.float32)
    if finite_above:
        v = v if x < _HI else _INF
    return v if x > _LO else _ZERO


@inline
def expf32(x):  # pragma: no cover - compiled
    """float32 ``exp(x)`` for any float32 ``x`` (see the module docstring)."""
    return _expf32(x, True, False)


@inline
def expf32_nonpos(x):  # pragma: no cover - compiled
    """:func:`expf32` for ``x <= 0`` (softmax weights ``l - max``): the same
    results, without the upper-range clamp and select (about 20% of the ops)."""
    return _expf32(x, False, False)


@inline
def expf32_fma(x):  # pragma: no cover - compiled
    """:func:`expf32` with its nine multiply-adds fused (:func:`fma32`): the
    same reduction and polynomial, within 1.2e-7 relative of ``exp`` too, but
    no numpy twin reproduces its bits (V-trace's ratios, which tests hold to
    float64 ``exp`` by that bound). Each multiply-add waits on the one before
    it, so fusing shortens the chain: 227 -> 171 us for 524,288 L1-resident
    elements (znver4)."""
    return _expf32(x, True, True)


# ---------------------------------------------------------------- float64
# fdlibm's ``exp`` (Sun Microsystems, 1993: e_exp.c; the Gaussian sampler's
# std) and Cephes' ``tanh`` (S. Moshier; the float64 MLP's tanh layers),
# written branch-free, so the loops that call them vectorise. Each is a
# sequence of float64 IEEE operations (callers compile them without
# ``contract``), reproduced bit for bit by :mod:`fastppo.reference.fastmath`.
_LN2_HI = 6.93147180369123816490e-01  # ln 2 = HI + LO, HI exact in 32 bits
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_SHIFT64 = 6755399441055744.0  # 1.5 * 2**52: adding it rounds to an integer
_SHIFT64_BITS = np.int64(0x4338000000000000)
_E1 = 1.66666666666666019037e-01
_E2 = -2.77777777770155933842e-03
_E3 = 6.61375632143793436117e-05
_E4 = -1.65339022054652515390e-06
_E5 = 4.13813679705723846039e-08
_EXP64_LO = -708.0  # exp(-708) = 3.3e-308: the smallest power of two kept normal
_EXP64_HI = 709.0  # exp(709) = 8.2e307: below the float64 overflow (709.78)
_I1023 = np.int64(1023)
_I52 = np.int64(52)


@inline
def exp64(x):  # pragma: no cover - compiled
    """float64 ``exp(x)`` for ``-708 <= x <= 709`` (fdlibm ``e_exp.c``), branch-free.

    ``x = k ln2 + r`` (Cody-Waite, ``|r| <= ln2 / 2``), ``c = r - r^2 P(r^2)``,
    ``exp(r) = 1 - ((lo - r c / (2 - c)) - hi)``, times ``2**k`` from exponent
    bits. Within 1 ulp (fdlibm's bound; ``tests/test_fastmath.py`` measures
    it). ``x`` outside the range is clamped (the sampler's ``|log_std| < 700``).
    Safe inside kernels compiled with ``fastmath`` (``lse_term`` in the MLP's
    categorical head): reassociation may move the last bits, not ``k``.
    """
    xc = min(max(x, _EXP64_LO), _EXP64_HI)
    # k by rint, an intrinsic: fastmath reassociation (the MLP kernels) folds
    # the rounding trick ``(y + 1.5 2**52) - 1.5 2**52`` back to ``y``
    k = np.rint(xc * _INV_LN2)
    kd = k + _SHIFT64  # 1.5 2**52 + k: k in the low bits
    hi = xc - k * _LN2_HI
    lo = k * _LN2_LO
    r = hi - lo
    t = r * r
    c = r - t * (_E1 + t * (_E2 + t * (_E3 + t * (_E4 + t * _E5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    ki = np.float64(kd).view(np.int64) - _SHIFT64_BITS
    return y * np.int64((ki + _I1023) << _I52).view(np.float64)


_TP0 = -9.64399179425052238628e-01
_TP1 = -9.92877231001918586564e01
_TP2 = -1.61468768441708447952e03
_TQ0 = 1.12811678491632931402e02
_TQ1 = 2.23548839060100448583e03
_TQ2 = 4.84406305325125486048e03
_TANH_SMALL = 0.625
_TANH_BIG = 20.0  # tanh(20) = 1 - 8.5e-18 rounds to 1 in float64


@inline
def tanh64(u):  # pragma: no cover - compiled
    """float64 ``tanh(u)`` for finite or infinite ``u``, branch-free (Cephes ``tanh``).

    ``|u| < 0.625``: ``u + u^3 P(u^2) / Q(u^2)``; otherwise ``(1 - t) / (1 +
    t)`` with ``t = exp64(-2 min(|u|, 20))``, the sign copied from ``u``. Both
    are evaluated and one selected (a vector blend). Within 2 ulp.
    """
    au = abs(u)
    z = au * au
    p = (_TP0 * z + _TP1) * z + _TP2
    q = ((z + _TQ0) * z + _TQ1) * z + _TQ2
    small = au + au * z * (p / q)
    t = exp64(-2.0 * min(au, _TANH_BIG))
    big = (1.0 - t) / (1.0 + t)
    return math.copysign(small if au < _TANH_SMALL else big, u)


# Eigen's float tanh (generic_fast_tanh_float): an odd rational of degree
# 13 / 6 on |x| <= 7.9053, where it reaches 1 - 2^-24; float32 throughout.
_TA1, _TA3, _TA5, _TA7, _TA9, _TA11, _TA13 = map(
    np.float32,
    (
        4.89352455891786e-03,
        6.37261928875436e-04,
        1.48572235717979e-05,
        5.12229709037114e-08,
        -8.60467152213735e-11,
        2.00018790482477e-13,
        -2.76076847742355e-16,
    ),
)
_TB0, _TB2, _TB4, _TB6 = map(
    np.float32,
    (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06),
)
_TANH32_CLAMP = np.float32(7.90531110763549805)
_TANH32_TINY = np.float32(0.0004)


@inline
def tanh32(x):  # pragma: no cover - compiled
    """float32 ``tanh(x)``, branch-free: ``x P(x^2) / Q(x^2)`` on ``x`` clamped to
    ``+-7.9053`` (Eigen's ``generic_fast_tanh_float``); ``x`` itself below
    ``|x| < 4e-4``, and NaN in, NaN out. Within 8 float32 ulp (6.6 at worst,
    near ``|x| = 5.8``: 4e-7 absolute; ``tests/test_nn.py``). Eight lanes per
    AVX2 instruction, where the float64 ``tanh64`` needs int64 conversions
    that AVX2 lacks.
    """
    xc = min(max(x, -_TANH32_CLAMP), _TANH32_CLAMP)
    x2 = xc * xc
    p = x2 * _TA13 + _TA11
    p = x2 * p + _TA9
    p = x2 * p + _TA7
    p = x2 * p + _TA5
    p = x2 * p + _TA3
    p = x2 * p + _TA1
    q = x2 * _TB6 + _TB4
    q = x2 * q + _TB2
    q = x2 * q + _TB0
    r = (xc * p) / q
    r = x if abs(x) < _TANH32_TINY else r
    return r if x == x else x
