"""Input validation and the one error-message format.

Every public function validates through these helpers, so every error reads
``"<function>: <argument> must be <expected>, got <actual>"`` (plus the fix when
it is obvious), and every rule raises before any output is written.

Array-likes are taken without copying when dtype and layout allow: numpy
arrays as they are, torch CPU tensors through a view of their memory (torch's
DLPack exchange API, ``_fast.ndarray_of``; ``Tensor.numpy()`` where that
declines),
objects with ``__dlpack__`` on the CPU through ``np.from_dlpack`` (a view),
anything else with ``__array__`` or the buffer protocol through ``np.asarray``.
A tensor on an accelerator is refused: a silent device-to-host copy would hide
a large cost.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, NoReturn

import numpy as np

from fastppo import _dispatch
from fastppo._cy import missing
from fastppo._jit import by_size
from fastppo.kernels import checks as _kc

try:  # the extension alone: _fastpath also configures the sweeps (30 ms more)
    from fastppo._cy._fast import as_array as _as_array
    from fastppo._cy._fast import c_contiguous, float_flags, may_share_memory, set_as_array_rest
    from fastppo._cy._fast import flag_bytes as flag_bytes  # for the statistics
    from fastppo._cy._fast import ndarray_of as ndarray_of  # for the statistics
    from fastppo._cy._fast import row_readable as row_readable  # for the statistics
except ImportError as e:  # pragma: no cover - exercised only on a broken install
    raise missing("_fast") from e

FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_FLAG_KINDS = "bu"  # bool, unsigned ints (uint8); floats are checked separately
_DLPACK_CPU = 1  # DLDeviceType kDLCPU
_DLPACK_DEVICES = {
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    10: "rocm",
    11: "rocm_host",
    13: "cuda_managed",
    14: "oneapi",
}


# Set by an adapter (fastppo.compat) around the call it delegates: errors then
# name the adapter and its own argument names, not the function it called.
_REPORTED_AS: contextvars.ContextVar[tuple[str, dict[str, str]] | None] = contextvars.ContextVar(
    "fastppo_reported_as", default=None
)


@contextlib.contextmanager
def reported_as(fn: str, names: dict[str, str]) -> Iterator[None]:
    """Inside the block, errors read ``"<fn>: <names.get(arg, arg)> must be ..."``.

    Nested blocks compose: the outermost function is the one reported, each
    argument renamed through every level.
    """
    outer = _REPORTED_AS.get()
    if outer is not None:
        fn = outer[0]
        names = {**outer[1], **{k: outer[1].get(v, v) for k, v in names.items()}}
    token = _REPORTED_AS.set((fn, names))
    try:
        yield
    finally:
        _REPORTED_AS.reset(token)


def fail(
    fn: str, arg: str, expected: str, got: Any, fix: str | None = None, exc: type = ValueError
) -> NoReturn:
    """Raise ``exc`` with the house error format."""
    caller = _REPORTED_AS.get()
    if caller is not None:
        fn, arg = caller[0], caller[1].get(arg, arg)
    msg = f"{fn}: {arg} must be {expected}, got {got}"
    if fix:
        msg += f"; {fix}"
    raise exc(msg)


def describe(x: Any) -> str:
    """Short description of a value for an error message."""
    if isinstance(x, np.ndarray):
        return f"array(shape={x.shape}, dtype={x.dtype})"
    return repr(x) if not hasattr(x, "shape") else f"{type(x).__name__}(shape={tuple(x.shape)})"


def _as_array_rest(fn: str, name: str, x: Any) -> np.ndarray:
    """:func:`as_array` of what it does not view in C: a tensor numpy cannot
    view (explained), DLPack objects, ``__array__`` and buffers."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        # The view first: Tensor.numpy() refuses every tensor it cannot view in
        # place (TypeError off the CPU, RuntimeError with requires_grad), so
        # the checks below run only then (they cost ~0.3 us of a 1 us call).
        try:
            return x.numpy()  # type: ignore[no-any-return,unused-ignore]
        except Exception:  # diagnosed below, in the house format
            pass
        # is_cpu is a plain flag; device.type builds a device object (0.2 vs 0.9 us)
        on_cpu = getattr(x, "is_cpu", None)
        if on_cpu is None:
            on_cpu = getattr(getattr(x, "device", None), "type", "cpu") == "cpu"
        if not on_cpu:
            dev = getattr(x, "device", None)
            fail(
                fn,
                name,
                "a CPU tensor or array",
                f"a tensor on device '{dev}'",
                "move it with .cpu() first (fastppo never copies across devices silently)",
                TypeError,
            )
        if getattr(x, "is_neg", lambda: False)():
            # a lazily negated view (a complex conjugate's .imag): its memory
            # holds the values' negatives, so no view of it reads the values
            fail(
                fn,
                name,
                "a tensor numpy can view",
                "a tensor with the negative bit set",
                "resolve it with .resolve_neg() first",
                TypeError,
            )
        try:
            return x.detach().numpy()  # type: ignore[no-any-return,unused-ignore]
        except (TypeError, RuntimeError):
            # e.g. bfloat16, which numpy cannot view; say so in the house format
            fail(
                fn,
                name,
                "a tensor numpy can view",
                f"dtype {x.dtype}",
                "convert it with .float() first",
                TypeError,
            )
    if hasattr(x, "__cuda_array_interface__"):
        fail(fn, name, "a CPU array", "a GPU array", "copy it to the host first", TypeError)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        # np.asarray ignores __dlpack__ (and jax/cupy-style __array__ would copy
        # across devices); DLPack gives a zero-copy view of host memory.
        dev = x.__dlpack_device__()
        if int(dev[0]) != _DLPACK_CPU:
            fail(
                fn,
                name,
                "a CPU array",
                f"a DLPack array on device {_DLPACK_DEVICES.get(int(dev[0]), dev[0])}:{dev[1]}",
                "copy it to the host first",
                TypeError,
            )
        try:
            return np.from_dlpack(x)
        except (TypeError, ValueError, RuntimeError, BufferError):
            pass  # e.g. a dtype numpy lacks: np.asarray below decides
    try:
        return np.asarray(x)
    except Exception as e:
        fail(fn, name, "an array-like", type(x).__name__, exc=TypeError)
        raise AssertionError from e  # pragma: no cover


set_as_array_rest(_as_array_rest)
#: View ``x`` as an ndarray without copying when possible: ndarrays as they
#: are and plain CPU tensors' views in C (``_fast.as_array``), the rest in
#: :func:`_as_array_rest`.
as_array = _as_array


def float_array(
    fn: str, name: str, x: Any, ndims: tuple[int, ...] = (1, 2), dtype: np.dtype | None = None
) -> np.ndarray:
    """A float32/float64 array of one of ``ndims`` dimensions (no silent casts).

    With ``dtype`` given, the array must have exactly that dtype.
    """
    a = as_array(fn, name, x)
    if a.dtype not in FLOATS:
        fail(fn, name, "float32 or float64", f"dtype {a.dtype}", _cast_fix(a), TypeError)
    if dtype is not None and a.dtype != dtype:
        fail(
            fn,
            name,
            f"{dtype} like the other float inputs",
            f"dtype {a.dtype}",
            f"use .astype(np.{dtype})",
            TypeError,
        )
    if a.ndim not in ndims:
        fail(fn, name, f"{_dims(ndims)}", f"shape {a.shape}")
    return a


def same_float_dtype(fn: str, named: dict[str, Any]) -> None:
    """Float inputs that must share one dtype: name the odd one out.

    The dtype most of them have is the expected one (the first input's on a
    tie), so a float64 ``rewards`` among float32 arrays is the one reported.
    Only numpy float arrays take part (a Python scalar takes the others' dtype;
    other kinds get their own error from :func:`float_array`).
    """
    first = None
    for x in named.values():  # the common case, all one dtype, in a few type tests
        if type(x) is np.ndarray:
            if first is None:
                first = x.dtype
            elif x.dtype is not first and x.dtype != first:
                break
    else:
        return
    dts = {k: x.dtype for k, x in named.items() if isinstance(x, np.ndarray) and x.dtype in FLOATS}
    kinds = list(dict.fromkeys(dts.values()))
    if len(kinds) < 2:
        return
    want = max(kinds, key=lambda d: sum(v == d for v in dts.values()))
    odd = next(k for k, d in dts.items() if d != want)
    like = ", ".join(k for k, d in dts.items() if d == want)
    fail(
        fn,
        odd,
        f"{want} like {like}",
        f"dtype {dts[odd]}",
        f"use .astype(np.{want})",
        TypeError,
    )


def flag_array(fn: str, name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A bool/uint8/float-0-1 flag array of ``shape``, as a uint8 array.

    bool and uint8 are returned as zero-copy uint8 views (nonzero = True);
    float flags must hold only 0 and 1 and are converted.
    """
    a = as_array(fn, name, x)
    if a.shape != shape:
        fail(fn, name, f"shape {shape}", f"shape {a.shape}")
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    if a.dtype == np.uint8:
        return a
    if a.dtype.kind == "f":
        return _float_flags(fn, name, a)
    fail(fn, name, "bool, uint8 or float 0/1", f"dtype {a.dtype}", exc=TypeError)


def _float_flags(fn: str, name: str, a: np.ndarray) -> np.ndarray:
    """Float 0/1 flags as uint8 (same layout for C or Fortran order), in one C
    pass that also checks the values (``_fast.float_flags``, the fast paths'
    conversion)."""
    if a.dtype not in (np.float32, np.float64):
        # float16 widens exactly; a wider float narrows exactly only where it
        # holds float64 values (0 and 1 do; any other value fails either way)
        w = a.astype(np.float32 if a.itemsize < 4 else np.float64)
        if not np.array_equal(w, a, equal_nan=True):
            fail(fn, name, "0/1 flags", f"value {a[w != a].flat[0]!r}")
        a = w
    if not (a.flags.c_contiguous or a.flags.f_contiguous):
        a = c_contiguous(a)
    elif not a.flags.aligned:
        a = a.copy(order="K")
    out, bad = float_flags(a)
    if out is None:
        fail(fn, name, "0/1 flags", f"value {a.ravel(order='K')[bad]!r}")
    return out


def any_set_where_clear(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether some element of flag array ``a`` is nonzero where ``b`` (same
    shape) is zero, without temporaries when both share a memory order."""
    same = (a.flags.c_contiguous and b.flags.c_contiguous) or (
        a.flags.f_contiguous and b.flags.f_contiguous
    )
    if not same:
        return bool(((a != 0) & (b == 0)).any())
    return bool(_kc.any_set_where_clear(a.ravel(order="K"), b.ravel(order="K")))


def int_vector(fn: str, name: str, x: Any, lo: int, hi: int, min_size: int = 1) -> np.ndarray:
    """A 1-D int64 vector of at least ``min_size`` ints, each in ``[lo, hi]``.

    The range is checked on the values as given (any int dtype, Python ints of
    any size), before the cast: a uint64 ``2**64 - 1`` or a sum that would wrap
    in int64 never reaches a kernel as a small or negative number.
    """
    expected = f"a 1-D sequence of at least {min_size} ints in [{lo}, {hi}]"
    try:
        v = np.asarray(x)
    except (TypeError, ValueError, OverflowError):
        fail(fn, name, expected, repr(x), exc=TypeError)
    if v.ndim != 1 or v.size < min_size or (v.size and v.dtype.kind not in "iu"):
        if v.ndim == 1 and v.dtype.kind == "O" and all(_is_int(e) for e in v.tolist()):
            fail(fn, name, expected, f"{x!r} (beyond 64 bits)")
        fail(fn, name, expected, repr(x), exc=TypeError)
    if v.size and ((v < lo) | (v > hi)).any():
        fail(fn, name, expected, repr(v.tolist()))
    return v.astype(np.int64)


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def check_shape(fn: str, name: str, a: np.ndarray, shape: tuple[int, ...]) -> None:
    if a.shape != shape:
        fail(fn, name, f"shape {shape}", f"shape {a.shape}")


def check_range(
    fn: str,
    name: str,
    value: Any,
    lo: float,
    hi: float,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    """A real scalar in the interval from ``lo`` to ``hi``; returns it as float."""
    if type(value) is float and lo < value < hi:  # fast path for the common case
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        fail(fn, name, "a real number", repr(value), exc=TypeError)
    v = float(value)
    ok = (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
    if not ok or v != v:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        hi_s = "inf" if hi == float("inf") else f"{hi:g}"
        fail(fn, name, f"in {left}{lo:g}, {hi_s}{right}", f"{value!r}")
    return v


def check_positive(fn: str, name: str, value: Any) -> float:
    return check_range(fn, name, value, 0.0, float("inf"), lo_open=True)


def all_finite_1d(x: np.ndarray) -> bool:
    """True when every element of the 1-D float array ``x`` is finite (one compiled pass)."""
    return bool(by_size(_kc.all_finite, x.shape[0], _dispatch.PARALLEL_MIN_ELEMENTS)(x))


def check_finite(fn: str, name: str, a: np.ndarray) -> None:
    """Raise ``ValueError`` if ``a`` holds a NaN or +-inf (one fused pass, no temporaries)."""
    if a.size == 0:
        return
    flat = a.reshape(-1) if a.flags.c_contiguous else np.ravel(a)
    if not all_finite_1d(flat):
        bad = np.argwhere(~np.isfinite(a))[0]
        idx = tuple(int(i) for i in bad)
        where = idx[0] if len(idx) == 1 else idx
        fail(fn, name, "finite", f"{a[tuple(bad)].item()!r} at index {where}")


def check_out(
    fn: str,
    name: str,
    out: Any,
    shape: tuple[int, ...],
    dtype: np.dtype,
    contiguous: bool = False,
) -> np.ndarray:
    """A writeable output buffer of exactly ``shape`` and ``dtype`` (C-contiguous if asked).

    It is written in place, so it must be an array or a buffer numpy can view
    (a list would be copied and the result lost), and no two of its elements
    may share memory (a zero-stride or other self-overlapping view).
    """
    o = as_array(fn, name, out)
    if o is not out and o.flags.owndata:
        fail(
            fn,
            name,
            "an array or a writeable buffer (it is written in place)",
            describe(out)[:80],
            exc=TypeError,
        )
    # (native dtypes are singletons: the identity test spares a comparison)
    if o.dtype is not dtype and o.dtype != dtype:
        fail(fn, name, f"dtype {dtype}", f"dtype {o.dtype}", exc=TypeError)
    if o.shape != shape:
        fail(fn, name, f"shape {shape}", f"shape {o.shape}")
    flags = o.flags  # each .flags builds an object
    if not flags.writeable:
        fail(fn, name, "writeable", "a read-only array")
    if not flags.c_contiguous:
        if contiguous:
            fail(fn, name, "C-contiguous", "a strided array")
        if not _elements_distinct(o):
            fail(fn, name, "an array whose elements do not overlap", f"strides {o.strides}")
    return o


def _elements_distinct(a: np.ndarray) -> bool:
    """True when no two elements of ``a`` can share memory (a sufficient test).

    Axes sorted by stride: each stride must clear the extent of the smaller
    axes. A zero-stride axis (a broadcast view) of length > 1 fails it.
    """
    extent = a.itemsize
    for stride, n in sorted((abs(st), n) for st, n in zip(a.strides, a.shape) if n > 1):
        if stride < extent:
            return False
        extent += stride * (n - 1)
    return True


def check_out_pair(
    fn: str,
    out: Any,
    shapes: tuple[tuple[int, ...], tuple[int, ...]],
    dtypes: tuple[np.dtype, np.dtype],
    names: tuple[str, str],
    contiguous: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``out=(first, second)`` (see :func:`check_out`); the two must not overlap."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        fail(
            fn,
            "out",
            f"a tuple ({names[0]}, {names[1]}) of two arrays",
            describe(out),
            exc=TypeError,
        )
    a = check_out(fn, f"out[0] ({names[0]})", out[0], shapes[0], dtypes[0], contiguous)
    b = check_out(fn, f"out[1] ({names[1]})", out[1], shapes[1], dtypes[1], contiguous)
    if may_share_memory(a, b):
        fail(fn, "out", "two non-overlapping arrays", "arrays that share memory")
    return a, b


def check_no_overlap(fn: str, outs: tuple[np.ndarray, ...], inputs: dict[str, Any]) -> None:
    """Outputs must not alias inputs: the kernels never modify their inputs.

    ``inputs`` may hold the caller's arguments as given: only arrays can share
    memory, so ``None``, scalars and lists are skipped. The test is
    ``np.may_share_memory``'s bounds test, made in C by the rule the fast
    path applies (``_fast.may_share_memory``; numpy's call costs 7x more, and
    ``out=`` made a small call slower than allocating).
    """
    for o in outs:
        for name, a in inputs.items():
            if isinstance(a, np.ndarray) and may_share_memory(o, a):
                fail(fn, "out", f"not to overlap the input {name!r}", "a buffer that shares memory")


def _dims(ndims: tuple[int, ...]) -> str:
    return " or ".join(f"{d}-D" for d in ndims)


def _cast_fix(a: np.ndarray) -> str | None:
    if a.dtype.kind in "iub":
        return "use .astype(np.float32)"
    if a.dtype == np.float16:
        return "use .astype(np.float32)"
    return None
