"""libm's ``pow``/``powf`` and ``sincos`` as opaque calls.

``pow``/``powf`` square exactly as numpy scalars do:

A numpy scalar raised to a power (``np.float64(x) ** 2``, ``np.float32(u) ** 2``)
and ``math.pow`` call the C library's ``pow``/``powf``, whose result can differ
from ``x * x`` in the last bit (glibc's ``pow`` is accurate to 0.52 ulp, not
correctly rounded: about 1 in 1,000 random doubles differ). Gymnasium's
Acrobot, Pendulum and MountainCarContinuous square that way, so a compiled
replay must too. Numba's ``x ** 2.0`` cannot: LLVM rewrites ``pow(x, 2.0)``
to ``x * x`` whenever it sees the libm name or intrinsic. Here the same libm
functions are registered with LLVM under names it does not know, so the call
stays a call. The symbols are bound before any kernel is compiled or loaded
from the cache (cached code refers to them by name).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from fastppo._jit import external


def _libm() -> ctypes.CDLL:
    name = ctypes.util.find_library("m")
    # None (no separate libm, e.g. musl) finds the symbols in the process itself.
    return ctypes.CDLL(name)


def _address(f: Any) -> int:
    return int(ctypes.cast(f, ctypes.c_void_p).value or 0)


_LIB = _libm()
_f8, _f4 = types.float64, types.float32
#: ``pow(x, y)`` of the C library, in double precision (numpy's ``float64 ** y``).
pow64: Any = external("fastppo_libm_pow", _address(_LIB.pow), _f8(_f8, _f8))
#: ``powf(x, y)`` of the C library (numpy's ``float32 ** y``).
pow32: Any = external("fastppo_libm_powf", _address(_LIB.powf), _f4(_f4, _f4))

# ``sincos(x)`` gives libm's ``sin(x)`` and ``cos(x)`` in one call, sharing the
# argument reduction: 8 ns per pair where the two calls take 13 here (znver5,
# CartPole's step at N = 4096: 74 -> 52 us). glibc's and musl's ``sincos`` run
# the ``sin``/``cos`` kernels themselves, so the bits are theirs
# (``tests/test_envs.py`` holds it over reduced and huge arguments).
_SINCOS = "fastppo_libm_sincos"
external(_SINCOS, _address(_LIB.sincos), types.void(_f8, types.voidptr, types.voidptr))


@intrinsic
def _sincos(typingctx: Any, x: Any) -> Any:
    """``(sin(x), cos(x))`` of a float64 ``x`` from one call of libm's ``sincos``."""
    if x != _f8:
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        d = ir.DoubleType()
        fnty = ir.FunctionType(ir.VoidType(), [d, d.as_pointer(), d.as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _SINCOS)
        s = cgutils.alloca_once(builder, d)
        c = cgutils.alloca_once(builder, d)
        builder.call(fn, [args[0], s, c])
        return context.make_tuple(builder, sig.return_type, [builder.load(s), builder.load(c)])

    return types.UniTuple(_f8, 2)(_f8), codegen


#: ``sin, cos = sincos(x)`` in a kernel (typed ``Any``: mypy cannot see an intrinsic's call).
sincos: Any = _sincos
