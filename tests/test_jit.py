"""``fastppo._jit``: the compile policy, and a disk cache keyed by every kernel source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fastppo
from fastppo import _jit

_PROBE = """
import sys
import numpy as np
from fastppo.kernels import checks, squash
assert checks.__file__.startswith(sys.argv[1]), checks.__file__
f = checks.all_finite_serial
g = squash.unsquash
assert f(np.zeros(4)) and g(0.0) == (0.0, 0.0)
for d in (f, g):
    print(sum(d.stats.cache_hits.values()), sum(d.stats.cache_misses.values()))
"""

LOADED, COMPILED = (1, 0), (0, 1)


def _run(pkg_root: Path, cache: Path | None) -> list[tuple[int, int]]:
    """(cache hits, cache misses) of two kernels of the package under ``pkg_root``,
    with ``cache`` as ``NUMBA_CACHE_DIR`` (None: Numba's ``__pycache__`` next to
    the sources, where ``pip install``'s kernel step keeps them).
    """
    # -S: no site hooks, so an editable install's import finder cannot shadow
    # the copy; the dependencies come from this interpreter's sys.path, minus
    # any entry that holds another fastppo (the checkout under test).
    deps = [p for p in sys.path if p and not (Path(p) / "fastppo").is_dir()]
    path = os.pathsep.join([str(pkg_root), *deps])
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("NUMBA_CACHE_DIR", None)
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    out = subprocess.run(
        [sys.executable, "-S", "-c", _PROBE, str(pkg_root)],
        cwd=pkg_root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split() for line in out.stdout.splitlines()]
    return [(int(h), int(m)) for h, m in rows]


def _edit(root: Path, rel: str) -> None:
    with open(root / "fastppo" / rel, "a") as f:
        f.write("\n# an edit\n")


@pytest.mark.slow
def test_editing_a_kernel_module_invalidates_exactly_the_kernels_that_import_it(tmp_path):
    # A copy of the package, so that modules can be edited. checks.py imports
    # only _jit, squash.py _jit and rng (its log32); Numba alone would watch only
    # the function's own file and load stale machine code after an edit to an import.
    root = tmp_path / "src"
    shutil.copytree(Path(fastppo.__file__).parent, root / "fastppo")
    cache = tmp_path / "cache"
    assert _run(root, cache) == [COMPILED, COMPILED]  # compiled and written
    assert _run(root, cache) == [LOADED, LOADED]
    _edit(root, "kernels/codec.py")  # imported by neither
    assert _run(root, cache) == [LOADED, LOADED]
    _edit(root, "kernels/rng.py")  # imported by squash.py only
    assert _run(root, cache) == [LOADED, COMPILED]
    _edit(root, "kernels/squash.py")  # the function's own file
    assert _run(root, cache) == [LOADED, COMPILED]
    _edit(root, "_jit.py")  # imported by both
    assert _run(root, cache) == [COMPILED, COMPILED]
    assert _run(root, cache) == [LOADED, LOADED]


def test_the_cache_next_to_the_sources_survives_a_move(tmp_path):
    # What pip install's kernel step relies on: the build
    # compiles in build/lib, the wheel installs the cache into site-packages.
    # The stamp is the sources' content, not their path or modification time.
    built = tmp_path / "build" / "lib"
    shutil.copytree(
        Path(fastppo.__file__).parent,
        built / "fastppo",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    assert _run(built, None) == [COMPILED, COMPILED]
    installed = tmp_path / "site-packages"
    shutil.copytree(built, installed, copy_function=shutil.copy)  # new mtimes, as pip writes
    shutil.rmtree(built)
    assert _run(installed, None) == [LOADED, LOADED]


def test_every_kind_of_compiled_function_carries_its_import_closure_stamp():
    from fastppo.kernels import cabi, checks, gae, rng

    for compiled in (
        checks.all_finite_serial,  # kernel_pair, serial
        checks.all_finite_parallel,  # kernel_pair, parallel
        gae.gae_kernel,  # kernel
        rng.philox4x32_10,  # inline
        cabi.entry(0, 0),  # c_entry
    ):
        py_func = getattr(compiled, "py_func", None) or compiled._pyfunc
        src = Path(py_func.__code__.co_filename)
        stamp = compiled._cache._cache_file._source_stamp[1]
        assert stamp == _jit.source_stamp(src)


# A kernel calls a subroutine, a C entry calls the kernel, two subroutines
# share one module and qualified name, and a kernel pair calls a linked helper.
_CALLS_MODULE = """
import numba
import numpy as np
from numba import carray, types
from fastppo import _jit


@_jit.subroutine
def twice(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += 2.0 * x[i]
    return s


@_jit.kernel("f8(F_1)")
def total(x):
    return twice(x) + 1.0


def _same_name():
    def helper(x):
        return x + 1.0
    return _jit.subroutine(helper)


first, second = _same_name(), _same_name()


@_jit.kernel("f8(f8)", variants=({},))
def bump(x):
    return first(x)


@_jit.linked
def row_sum(x, i):
    s = 0.0
    for j in range(x.shape[1]):
        s += x[i, j]
    return s


@_jit.kernel_pair("void(F_2, F_1w)")
def sums(x, out):
    for i in numba.prange(x.shape[0]):
        out[i] = row_sum(x, i)


def entry():
    def run(p, n):
        return total(carray(p, n))
    return _jit.c_entry(types.float64(types.CPointer(types.float64), types.int64))(run)
"""

_CALLS_PROBE = """
import ctypes, sys
import numpy as np
import calls_probe as m
x = np.arange(5.0)
y = np.arange(6.0).reshape(3, 2)
out = np.zeros(3)
if sys.argv[1] == "entry-first":
    e = m.entry()  # loads the C entry before anything it calls
    f = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)(e.address)
    m.sums[1](y, out)  # the parallel build first
    print(f(x.ctypes.data, 5), m.total(x), m.bump(1.0), out.sum())
else:
    print(m.total(x), m.bump(1.0))
    m.entry()
    def has(d, word, name):
        ir = d.inspect_llvm(d.signatures[0]).splitlines()
        return int(any(ln.startswith(word) and name in ln for ln in ir))
    # total calls twice by symbol; bump links its callee, whose name is ambiguous
    print(has(m.total, "define", "twice"), has(m.total, "declare", "@fastppo_call_"),
          has(m.bump, "declare", "@fastppo_call_"))
    # a linked helper is linked into both builds (a parfor's gufunc too)
    m.sums[0](y, out)
    m.sums[1](y, out)
    print(has(m.sums[0], "declare", "@fastppo_call_"), has(m.sums[1], "declare", "@fastppo_call_"))
for d in (m.total, m.twice, m.bump, m.sums[1]):
    print(sum(d.stats.cache_misses.values()))
"""


def test_kernels_call_each_other_by_symbol_and_load_in_any_order(tmp_path):
    # A caller's machine code does not embed its callees (each function is
    # compiled once) and names them by a symbol that its cache entry's reload
    # hook binds: a later process may load the caller first, even from a C entry.
    (tmp_path / "calls_probe.py").write_text(_CALLS_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])

    def run(mode: str) -> list[str]:
        return subprocess.run(
            [sys.executable, "-c", _CALLS_PROBE, mode],
            cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip

    assert run("compile") == ["21.0", "2.0", "0", "1", "0", "0", "0", "1", "1", "1", "1"]
    assert run("entry-first") == ["21.0", "21.0", "2.0", "15.0", "0", "0", "0", "0"]
