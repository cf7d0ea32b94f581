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
  imports, not only the function's own file (see :func:`_stamp`);
* a kernel calls another kernel or a subroutine through a symbol bound to
  the callee's machine code, not a copy of the callee linked into it
  (:func:`_link_by_symbol`): each function is optimised and compiled once;
* every kernel declares its signatures (:func:`kernel`), one variant per
  float dtype: read-only C-contiguous inputs, writable outputs, plain
  int64/float64/bool scalars. A call (from Python or from another kernel)
  with writable, read-only, literal or numpy-scalar arguments runs the
  declared variant its arguments convert to, compiled on first use; nothing
  else is ever compiled, so a process pays for the dtypes it uses and the
  compile budget is the declaration (``tests/test_variant_budget.py``).

A bare ``numba.njit`` anywhere else in the package is a defect.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import llvmlite.binding as llvm
import numba
from numba import types as nt
from numba.core import base as _nb_base
from numba.core import imputils as _nb_imputils
from numba.core.ccallback import CFunc as _CFunc
from numba.core.compiler_lock import global_compiler_lock

F = TypeVar("F", bound=Callable[..., Any])

# Reassociation and contraction are allowed where a kernel says why; the flags
# that assume no NaN/inf are never used, since -inf logits mean "masked".
FASTMATH_SAFE = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})

# njit implies nopython. error_model="numpy": a float division by zero gives
# inf/NaN as IEEE says instead of a Python ZeroDivisionError, whose check is a
# branch per division that keeps LLVM from vectorising any loop that divides
# (the samplers' exp/log/tanh and their densities). Inputs are validated
# before a kernel runs, so no kernel divides by zero on purpose.
_BASE: dict[str, Any] = {"nogil": True, "cache": True, "error_model": "numpy"}


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
        stamps = [source_stamp(src)]
        # a specialized() copy attributed to another module: that module's closure too
        home = getattr(sys.modules.get(py_func.__module__), "__file__", None)
        if home is not None and Path(home).resolve() != src.resolve():
            stamps.append(source_stamp(Path(home)))
        cache_file._source_stamp = (cache_file._source_stamp, *stamps)
    return compiled


# Signature vocabulary. A declaration is a string such as
# ``"i8(F_2, F_1, u1_2, i8, f8, F_2w)"`` evaluated once per variant:
#   results   void, a scalar, or Tup(i8, f8) for a tuple;
#   scalars   i8 int64, i4 int32, u8/u4/u2/u1 uint64..uint8, f8 float64,
#             f4 float32, b1 bool, and the variant's own names: F its float
#             dtype, S its storage dtype, L a log-prob dtype (see the users);
#   arrays    <code>_<ndim>: read-only C-contiguous, <code>_<ndim>w: writable,
#             for every scalar code (F_2 = F[:, ::1], read-only).
# Read-only is the input contract: a writable array converts to it for free,
# so one variant serves both (Numba would otherwise compile one per flag).
_SCALARS = {
    "i8": nt.int64,
    "u8": nt.uint64,
    "i4": nt.int32,
    "f8": nt.float64,
    "f4": nt.float32,
    "b1": nt.boolean,
    "u1": nt.uint8,
    "u2": nt.uint16,
    "u4": nt.uint32,
}

#: One variant per float dtype: what nearly every kernel declares.
FLOATS: tuple[dict[str, Any], ...] = ({"F": nt.float32}, {"F": nt.float64})
#: Samplers read their inputs in storage form: float32, float64, or the uint16
#: bits of float16/bfloat16; F is the working precision (float32 for half types).
STORAGE: tuple[dict[str, Any], ...] = (
    {"S": nt.float32, "F": nt.float32},
    {"S": nt.float64, "F": nt.float64},
    {"S": nt.uint16, "F": nt.float32},
)


def _namespace(variant: dict[str, Any]) -> dict[str, Any]:
    base = dict(_SCALARS, **variant)
    ns: dict[str, Any] = dict(base, void=nt.void, Tup=lambda *ts: nt.Tuple(ts))
    for code, dt in base.items():
        for nd in (1, 2):
            ns[f"{code}_{nd}"] = nt.Array(dt, nd, "C", readonly=True)
            ns[f"{code}_{nd}w"] = nt.Array(dt, nd, "C")
    return ns


def signatures(decl: str | tuple[str, ...], variants: tuple[dict[str, Any], ...]) -> list[Any]:
    """The Numba signatures a declaration stands for, one per distinct variant."""
    decls = (decl,) if isinstance(decl, str) else decl
    out: list[Any] = []
    for d in decls:
        for v in variants:
            sig = eval(d, {"__builtins__": {}}, _namespace(v))  # declarations are our own literals
            if sig not in out:
                out.append(sig)
    return out


#: Every declared dispatcher, for ``warmup`` and the variant-budget test.
REGISTRY: list[Any] = []
#: Every :func:`subroutine` and :func:`linked` helper: typed per the declared
#: kernels that call it, so its variants follow theirs (the variant-budget
#: test counts them too).
SUBROUTINES: list[Any] = []


def _declare(disp: Any, sigs: list[Any], linked: bool = False) -> Any:
    """Restrict ``disp`` to ``sigs``, each compiled (or loaded) on first use.

    Numba compiles a new variant for every distinct argument type tuple it
    meets (a read-only flag, a literal, a numpy scalar). Here compilation is
    disabled and the two hooks Numba calls when no compiled variant matches
    are pointed at the declaration: a call from Python
    (``_search_new_conversions``) and the typing of a call from another
    kernel (``get_call_template``) compile the first declared signature the
    arguments convert to, then let Numba's own overload resolution pick it.
    Arguments that convert to no declared signature raise Numba's
    ``TypeError`` ("No matching definition").
    """
    tctx = disp.typingctx
    original = disp.get_call_template

    def pick(args: Any) -> Any:
        for sig in sigs:
            if len(sig.args) == len(args) and all(
                tctx.can_convert(a, b) is not None for a, b in zip(args, sig.args)
            ):
                _compile(disp, sig)
                return sig
        return None

    def search_new_conversions(*values: Any, **kws: Any) -> bool:
        args = [disp.typeof_pyval(v) for v in values]
        sig = pick(args)
        return sig is not None and bool(tctx.install_possible_conversions(args, sig.args))

    def get_call_template(args: Any, kws: Any) -> Any:
        pick(args)
        return original(args, kws)

    def compile_for_args(*values: Any, **kws: Any) -> Any:
        # Reached only while another thread holds compilation open in
        # _compile: run the declared variant the arguments convert to.
        sig = pick([disp.typeof_pyval(v) for v in values])
        if sig is None:
            return disp._explain_matching_error(*values)
        return disp.overloads[tuple(sig.args)].entry_point

    disp._search_new_conversions = search_new_conversions
    disp.get_call_template = get_call_template
    disp._compile_for_args = compile_for_args
    disp._can_compile = False
    disp.declared = tuple(sigs)
    REGISTRY.append(disp)
    if not linked:
        _callee(disp)
    return disp


def _compile(disp: Any, sig: Any) -> None:
    """Compile (or load from the cache) the declared ``sig`` of ``disp``.

    Compilation is opened only inside Numba's global compiler lock, so no
    other thread can compile an undeclared variant meanwhile.
    """
    if tuple(sig.args) in disp.overloads:
        return
    with global_compiler_lock:
        disp._can_compile = True
        try:
            disp.compile(sig)
        finally:
            disp._can_compile = False


def kernel(
    sig: str | tuple[str, ...],
    *,
    variants: tuple[dict[str, Any], ...] = FLOATS,
    fastmath: bool | frozenset[str] = False,
    linked: bool = False,
) -> Callable[[F], F]:
    """Compile the decorated function as a serial, GIL-free, cached kernel of
    declared signature(s) ``sig`` (see the vocabulary above), one per variant.

    ``@kernel("i8(F_2, F_1w)")``. ``linked``: a kernel that other kernels call
    once per row, which LLVM should inline into them (see :func:`linked`).
    """
    sigs = signatures(sig, variants)

    def wrap(f: F) -> F:
        opts = dict(_BASE, fastmath=_fm(fastmath))
        return cast(F, _declare(_stamp(numba.njit(**opts)(f)), sigs, linked))

    return wrap


def inline(fn: F) -> F:
    """Compile a small scalar helper that kernels call in their hot loops.

    Numba inlines it into the caller's IR (``inline="always"``), so a loop
    that calls it still vectorises. The price is compile time: every call
    site copies and re-types the helper's body. So only helpers of a few
    lines (a decode, a Philox round, Box-Muller) or whose ``prange`` must
    join the caller's parallel loop are inlined; a helper that holds loops
    of its own is a :func:`subroutine`.
    """
    return cast(F, _stamp(numba.njit(inline="always", **_BASE)(fn)))


def subroutine(fn: F) -> F:
    """Compile a helper that holds loops of its own (one per chunk or row).

    It is typed and optimised once per argument types and called: its loops
    vectorise in its own body, and the call (a few ns, once per chunk) is
    nothing beside them. Inlining such helpers into each caller's IR doubled
    the compile time of the samplers (``docs/design.md``, compile budget).
    A ``prange`` inside a subroutine is a plain ``range``.
    """
    disp = linked(fn)
    _callee(disp)
    return disp


def linked(fn: F) -> F:
    """Compile a helper that kernels call once per row (or per element).

    Numba links a copy of its code into every caller, where LLVM inlines it
    (a :func:`subroutine` is called by symbol instead, and stays a call: tens
    of ns with a few arrays, nothing once per chunk, 2-7 % of a row-by-row
    sampler). For helpers whose copies would make Numba's :func:`inline`
    slow to type, and which are called too often to be worth a call.
    """
    disp = _stamp(numba.njit(**_BASE)(fn))
    SUBROUTINES.append(disp)
    return cast(F, disp)


def kernel_pair(
    sig: str | tuple[str, ...],
    *,
    variants: tuple[dict[str, Any], ...] = FLOATS,
    fastmath: bool | frozenset[str] = False,
) -> Callable[[F], tuple[F, F]]:
    """Compile the decorated function twice: serial and ``parallel=True``,
    both of declared signature(s) ``sig`` (as :func:`kernel`).

    The function uses ``numba.prange`` over an independent axis; in the serial
    build ``prange`` is a plain ``range``. Both builds run the same per-element
    arithmetic in the same order along the dependent axis, so their results are
    bit-identical; the public layer picks one by input size, because starting a
    parallel region costs microseconds.

    Returns ``(serial, parallel)``.
    """
    sigs = signatures(sig, variants)

    def wrap(f: F) -> tuple[F, F]:
        opts = dict(_BASE, fastmath=_fm(fastmath))
        serial = _declare(_stamp(numba.njit(**opts)(f)), sigs)
        parallel = _declare(
            _stamp(numba.njit(parallel=True, **opts)(_renamed(f, "__parallel"))), sigs
        )
        return serial, parallel

    return wrap


def specialized(f: F, suffix: str, module: str | None = None, **bindings: Any) -> F:
    """A copy of ``f`` named ``f.__name__ + suffix`` that sees ``bindings`` as globals.

    One generic kernel body, many kernels: the fused rollout is written once
    and compiled per env with that env's inlined row functions bound to the
    names it calls. Decorate the copy with :func:`kernel`; its distinct
    qualified name keeps the copies' cache entries apart (see :func:`_renamed`).
    ``module`` attributes the copy to the module that supplies the bindings
    (warmup finds it there, and its source stamp covers that module's import
    closure besides the template's); by default it stays the template's, whose
    imports must then cover the bindings. The copy's globals are a snapshot of
    the template module's at this call: everything the body uses must exist.
    """
    g = types.FunctionType(
        f.__code__,
        {**f.__globals__, **bindings},
        f.__name__ + suffix,
        f.__defaults__,
        f.__closure__,
    )
    g.__qualname__ = f.__qualname__ + suffix
    g.__module__ = module or f.__module__
    g.__doc__ = f.__doc__
    return cast(F, g)


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


# A forked child never starts OpenMP threads: GNU OpenMP's thread pool does
# not survive fork(), and a parallel region in a child whose parent had run
# one waits forever. So after a fork the sweeps and the running statistics
# (OpenMP in fastppo._cy) run serially, and the samplers take their serial
# builds (:func:`by_size`; Numba's omp layer would end the child).
_FORKED = False


def _after_fork_in_child() -> None:
    global _FORKED
    _FORKED = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def num_threads() -> int:
    """Threads for a large call: Numba's count (``NUMBA_NUM_THREADS``,
    ``numba.set_num_threads``), or 1 in a forked child."""
    return 1 if _FORKED else int(numba.get_num_threads())


def by_size(pair: tuple[F, F], size: int, limit: int) -> F:
    """The build of :func:`kernel_pair` ``pair`` for a call of ``size`` work:
    the parallel one from ``limit`` on when more than one thread may run
    (:func:`num_threads`: not with one thread, not in a forked child), else
    the serial one. Both give the same bits."""
    return pair[1] if size >= limit and num_threads() > 1 else pair[0]


def external(name: str, address: int, sig: Any) -> Any:
    """A C function at ``address`` that kernels call as ``name`` with Numba signature ``sig``.

    The address is bound to ``name`` as an LLVM symbol and the function declared
    by that name, so compiled code refers to it by name: cached kernels load in
    a later process once the module that calls this has bound it again, and a
    name LLVM does not know keeps the call a call (LLVM rewrites libm's
    ``pow(x, 2.0)`` to ``x * x``, for one). Every ``name`` starts ``fastppo_``.
    """
    if not name.startswith("fastppo_"):
        raise ValueError(f"_jit.external: name must start with 'fastppo_', got {name!r}")
    llvm.add_symbol(name, address)
    return nt.ExternalFunction(name, sig)


class _CEntry(_CFunc):
    """What ``numba.cfunc`` builds (always nopython), with its callees' reload
    hooks in its compile result: Numba lowers a C entry without finalizing it,
    and then leaves the library's hooks out (see :func:`_link_by_symbol`)."""

    def _compile_uncached(self) -> Any:
        cres = super()._compile_uncached()  # type: ignore[misc]
        cres.reload_init.extend(cres.library._reload_init)
        return cres


def c_entry(sig: Any) -> Callable[[F], Any]:
    """Compile ``fn`` as a C-callable function (``numba.cfunc``) of signature ``sig``.

    The Cython boundary (``fastppo._cy._fast``) calls these through their
    addresses, so a small call pays neither Numba's argument typing nor array
    unboxing. A C entry holds no GIL (its caller releases it) and is cached
    like the kernels. It is compiled when the decorator runs, so modules of C
    entries are imported lazily, never by ``import fastppo``.
    """

    def wrap(f: F) -> Any:
        entry = _CEntry(f, numba.core.sigutils.normalize_signature(sig), locals={}, options={})
        entry.enable_caching()
        _stamp(entry)  # before compile() looks in the cache
        entry.compile()
        return entry

    return wrap


# Calls between kernels by symbol.
#
# Numba links a copy of every callee's code into each caller and optimises and
# compiles the copy again there: a sampler's chunk task was optimised and
# turned into machine code five times (its own library, the serial kernel,
# and the parallel one's outer function, gufunc and gufunc wrapper), and 60-70
# % of the compile time was LLVM's. Here a call from compiled code to a
# kernel or subroutine of fastppo declares the callee under a name derived
# from its module, qualified name and types (:func:`_symbol`), bound to the
# callee's machine code when the callee is compiled or loaded. Each function
# is compiled once, with bit-identical results. The price is that LLVM no
# longer inlines the callee into its caller: helpers called once per row, or
# whose inlining LLVM exploits, are :func:`linked` (Numba's linking), and the
# helpers of hot loops :func:`inline` (inlined by Numba, which this does not
# touch). docs/design.md has the measurements.
#
# A caller's cached machine code refers to its callees by those names, so the
# caller's compile result carries one reload hook per callee (Numba runs a
# result's ``reload_init`` before loading its machine code from the cache):
# the hook compiles or loads the callee first, which binds the name.
#: (module, qualified name) -> the kernel or subroutine called by symbol.
_CALLEES: dict[tuple[str, str], Any] = {}
#: Keys that name two different functions (redefined in a test, say): those
#: are linked the way Numba links, since one name cannot mean both.
_AMBIGUOUS: set[tuple[str, str]] = set()


def _callee(disp: Any) -> None:
    key = (disp.py_func.__module__, disp.py_func.__qualname__)
    if _CALLEES.setdefault(key, disp) is not disp:
        _AMBIGUOUS.add(key)


def _symbol(modname: str, qualname: str, restype: Any, argtypes: Any) -> str:
    """The name a compiled call uses for the callee: stable across processes
    (Numba's own mangled names carry a per-process counter)."""
    text = f"{modname}.{qualname}({', '.join(map(str, argtypes))}) -> {restype}"
    return "fastppo_call_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def reload_callee(key: tuple[str, str], restype: Any, argtypes: tuple[Any, ...]) -> None:
    """Compile or load the callee ``key`` for ``argtypes`` (binding its symbol):
    the reload hook of every compiled caller, run before the caller's cached
    machine code is loaded."""
    importlib.import_module(key[0])
    disp = _CALLEES.get(key)
    if disp is None or key in _AMBIGUOUS:
        raise ImportError(f"_jit: cached code calls {'.'.join(key)}, which no longer exists")
    if hasattr(disp, "declared"):
        _compile(disp, numba.core.typing.signature(restype, *argtypes))
    else:
        disp.compile(tuple(argtypes))


class _ByName:
    """What Numba's ``declare_function`` reads of a function descriptor, under
    the callee's stable symbol instead of its mangled name."""

    inline = False

    def __init__(self, fndesc: Any, name: str) -> None:
        self.mangled_name = name
        self.restype, self.argtypes = fndesc.restype, fndesc.argtypes
        self.args, self.noalias = fndesc.args, fndesc.noalias


_numba_insert_user_function = _nb_base.BaseContext.insert_user_function


def _link_by_symbol(self: Any, func: Any, fndesc: Any, libs: Any = ()) -> None:
    """Numba's ``BaseContext.insert_user_function`` (how compiled code calls a
    compiled function), calling fastppo's kernels and subroutines by symbol.

    Numba calls it whenever a function is compiled or loaded from the cache,
    with the function's library. Any other function is left to Numba."""
    key = (fndesc.modname, fndesc.qualname)
    if len(libs) != 1 or _CALLEES.get(key) is None or key in _AMBIGUOUS:
        return _numba_insert_user_function(self, func, fndesc, libs)
    name = _symbol(*key, fndesc.restype, fndesc.argtypes)
    llvm.add_symbol(name, libs[0].get_pointer_to_function(fndesc.mangled_name))
    call = _nb_imputils.user_function(_ByName(fndesc, name), ())
    hook = functools.partial(reload_callee, key, fndesc.restype, tuple(fndesc.argtypes))

    def imp(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        context.active_code_library._reload_init.add(hook)
        return call(context, builder, sig, args)

    imp.signature = call.signature  # type: ignore[attr-defined]
    imp.libs = ()  # type: ignore[attr-defined]
    self._defns[func].append(imp, imp.signature)  # type: ignore[attr-defined]


_nb_base.BaseContext.insert_user_function = _link_by_symbol  # type: ignore[method-assign]
