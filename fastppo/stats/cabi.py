"""The running-statistics core (``fastppo._cy._stats``) callable from Numba kernels.

``_stats.pyx`` exports its C cores (``cdef api``): the moment update and
the normalising map of :class:`fastppo.RunningMeanStd` and one step of
:class:`fastppo.ReturnNormalizer`'s reward scaling. Their addresses are
bound here by name (:func:`fastppo._jit.external`), so a kernel calls the
same machine code the Python methods run (one implementation, the same bits). Arrays are passed
as ``arr.ctypes.data``: a pointer is a 64-bit integer in the C ABI.
"""

from __future__ import annotations

import ctypes
from typing import Any

from numba import types

from fastppo._jit import external
from fastppo.stats._common import cy

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _bind(name: str, sig: Any) -> Any:
    capsule = cy.__pyx_capi__[name]  # type: ignore[attr-defined]
    return external(name, _get_pointer(capsule, _get_name(capsule)), sig)


_p, _n, _f, _i = types.intp, types.intp, types.float64, types.intc

#: ``(x, n_rows, n_feat, valid, rows_per_super, rows_per_block, count_a, mean, var)
#: -> rows folded in`` (< 0: nothing changed; see ``Updater.update_f64``).
rms_update: Any = _bind("fastppo_rms_update_f64", _n(_p, _n, _n, _p, _n, _n, _f, _p, _p))
#: ``(x, out, n_rows, n_feat, mean, var, epsilon, clip) -> 0`` (-1: out of memory).
rms_normalize: Any = _bind("fastppo_rms_normalize_f64", _i(_p, _p, _n, _n, _p, _p, _f, _f))
#: ``(r, term, trunc, valid, out, n_envs, gamma, clip, epsilon, count_a, ret, mean, var)
#: -> returns folded in`` (< 0: nothing written; see ``ReturnScaler.step1_f64``).
return_step: Any = _bind(
    "fastppo_return_step_f64", _n(_p, _p, _p, _p, _p, _n, _f, _f, _f, _f, _p, _p, _p)
)
