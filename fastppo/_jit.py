"""The one place where Numba options are set.

Every kernel in ``fastppo.kernels`` is compiled through these helpers, so the
whole package shares one policy:

* ``nopython=True`` -- no object-mode fallback, ever;
* ``nogil=True`` -- kernels release the GIL, so Python threads overlap;
* ``cache=True`` -- compiled code is written next to the source (or to
  ``NUMBA_CACHE_DIR``) and a second process starts warm;
* ``fastmath`` off by default. A kernel that opts in passes ``FASTMATH_SAFE``,
  which keeps IEEE NaN/inf semantics (no ``nnan``/``ninf``): inputs are
  validated for finiteness, but masks use ``-inf`` on purpose;
* ``boundscheck`` is not set here, so ``NUMBA_BOUNDSCHECK=1`` in the
  environment turns it on for a CI pass;
* the disk cache is keyed by the kernel's file and every fastppo file it
  imports, not only the function's own file (see :func:`_stamp`).

A bare ``numba.njit`` anywhere else in the package is a defect.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., Any])

# Reassociation and contraction are allowed where a kernel says why; the flags
# that assume no NaN/inf are never used, since -inf logits mean "masked".
FASTMATH_SAFE = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})

_BASE: dict[str, Any] = {"nogil": True, "cache": True}  # njit implies nopython


_PKG = Path(__file__).resolve().parent


@functools.cache
def _local_imports(path: Path) -> tuple[Path, ...]:
    """The fastppo source files ``path`` imports (``from fastppo.x import ...`` and the like)."""
    tree = ast.parse(path.read_bytes())
    out: list[Path] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] != "fastppo":
                continue
            f = _PKG.joinpath(*parts[1:]).with_suffix(".py")
            if f.is_file() and f not in out:
                out.append(f)
    return tuple(out)


@functools.cache
def source_stamp(path: Path) -> str:
    """sha256 of ``path`` and every fastppo source it imports, transitively."""
    seen: list[Path] = []
    todo = [path.resolve()]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(_local_imports(p))
    h = hashlib.sha256()
    for p in sorted(seen):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _stamp(compiled: Any) -> Any:
    """Key ``compiled``'s disk cache by its file and every fastppo file that file imports.

    Numba invalidates a cached function only when its own source file changes,
    but kernels inline helpers from other modules (Philox from ``rng``, the
    decoders from ``codec``, ``expf32`` from ``fastmath``) and the C entries of
    ``cabi`` embed whole kernels: after an edit there, the old machine code
    would load silently. Adding the hash of the module's import closure to the
    index stamp invalidates exactly the kernels that can see the edit (an edit
    to ``sampling`` leaves the advantage sweeps' cache alone). Uses Numba's
    cache internals (``_cache._cache_file._source_stamp``); if a Numba version
    lacks them, caching falls back to Numba's own per-file rule.
    """
    cache_file = getattr(getattr(compiled, "_cache", None), "_cache_file", None)
    py_func = getattr(compiled, "py_func", None) or getattr(compiled, "_pyfunc", None)
    if cache_file is not None and hasattr(cache_file, "_source_stamp") and py_func is not None:
        src = Path(py_func.__code__.co_filename)
        cache_file._source_stamp = (cache_file._source_stamp, source_stamp(src))
    return compiled


def kernel(fn: F | None = None, *, fastmath: bool | frozenset[str] = False) -> Any:
    """Compile ``fn`` as a serial, GIL-free, cached kernel.

    Usable as ``@kernel`` or ``@kernel(fastmath=FASTMATH_SAFE)``.
    """

    def wrap(f: F) -> F:
        opts = dict(_BASE, fastmath=_fm(fastmath))
        return cast(F, _stamp(numba.njit(**opts)(f)))

    return wrap(fn) if fn is not None else wrap


def inline(fn: F) -> F:
    """Compile a small helper that kernels call; LLVM inlines it."""
    return cast(F, _stamp(numba.njit(nogil=True, cache=True, inline="always")(fn)))


def kernel_pair(fn: F | None = None, *, fastmath: bool | frozenset[str] = False) -> Any:
    """Compile ``fn`` twice: serial and ``parallel=True``.

    ``fn`` uses ``numba.prange`` over an independent axis; in the serial build
    ``prange`` is a plain ``range``. Both builds run the same per-element
    arithmetic in the same order along the dependent axis, so their results are
    bit-identical; the public layer picks one by input size, because starting a
    parallel region costs microseconds.

    Returns ``(serial, parallel)``.
    """

    def wrap(f: F) -> tuple[F, F]:
        opts = dict(_BASE, fastmath=_fm(fastmath))
        serial = _stamp(numba.njit(**opts)(f))
        parallel = _stamp(numba.njit(parallel=True, **opts)(_renamed(f, "__parallel")))
        return serial, parallel

    return wrap(fn) if fn is not None else wrap


def _renamed(f: Any, suffix: str) -> Any:
    """A copy of ``f`` with its own qualified name.

    Numba's on-disk cache is keyed by qualified name, line and signature, not by
    compile flags: without a distinct name the serial and parallel builds would
    overwrite each other's cache entries (and one could load the other's code).
    """
    g = types.FunctionType(
        f.__code__, f.__globals__, f.__name__ + suffix, f.__defaults__, f.__closure__
    )
    g.__qualname__ = f.__qualname__ + suffix
    g.__module__ = f.__module__
    g.__doc__ = f.__doc__
    return g


def _fm(fastmath: bool | frozenset[str]) -> bool | set[str]:
    if fastmath is True:
        # Plain True would include nnan/ninf; refuse to hand that out.
        return set(FASTMATH_SAFE)
    if fastmath is False:
        return False
    bad = set(fastmath) & {"nnan", "ninf", "fast"}
    if bad:
        raise ValueError(f"_jit: fastmath flags {sorted(bad)} break NaN/inf semantics")
    return set(fastmath)


def num_threads() -> int:
    """Number of threads Numba's parallel kernels use."""
    return int(numba.get_num_threads())


def c_entry(sig: Any) -> Callable[[F], Any]:
    """Compile ``fn`` as a C-callable function (``numba.cfunc``) of signature ``sig``.

    The Cython boundary (``fastppo._cy._fast``) calls these through their
    addresses, so a small call pays neither Numba's argument typing nor array
    unboxing. A C entry holds no GIL (its caller releases it) and is cached
    like the kernels. It is compiled when the decorator runs, so modules of C
    entries are imported lazily, never by ``import fastppo``.
    """

    def wrap(f: F) -> Any:
        from numba.core.ccallback import CFunc  # what numba.cfunc builds, always nopython

        entry = CFunc(f, numba.core.sigutils.normalize_signature(sig), locals={}, options={})
        entry.enable_caching()
        _stamp(entry)  # before compile() looks in the cache
        entry.compile()
        return entry

    return wrap
