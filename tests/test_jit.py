"""``fastppo._jit``: the compile policy, and a disk cache keyed by every kernel source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import fastppo
from fastppo import _jit

_PROBE = """
import sys
import numpy as np
from fastppo.kernels import checks
assert checks.__file__.startswith(sys.argv[1]), checks.__file__
f = checks._all_finite_serial
assert f(np.zeros(4))
print(sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values()))
"""


def _run(pkg_root: Path, cache: Path) -> tuple[int, int]:
    # -S: no site hooks, so an editable install's import finder cannot shadow
    # the copy; the dependencies come from this interpreter's sys.path, minus
    # any entry that holds another fastppo (the checkout under test).
    deps = [p for p in sys.path if p and not (Path(p) / "fastppo").is_dir()]
    path = os.pathsep.join([str(pkg_root), *deps])
    env = dict(os.environ, PYTHONPATH=path, NUMBA_CACHE_DIR=str(cache))
    out = subprocess.run(
        [sys.executable, "-S", "-c", _PROBE, str(pkg_root)],
        cwd=pkg_root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    hits, misses = out.stdout.split()
    return int(hits), int(misses)


def test_editing_any_kernel_module_invalidates_every_cached_kernel(tmp_path):
    # A copy of the package, so that a kernel module can be edited: the checks
    # kernel uses nothing from fastmath.py, yet an edit there must invalidate
    # it too (kernels inline helpers across modules; Numba alone would only
    # watch the function's own file and load stale machine code).
    root = tmp_path / "src"
    shutil.copytree(Path(fastppo.__file__).parent, root / "fastppo")
    cache = tmp_path / "cache"
    assert _run(root, cache) == (0, 1)  # compiled and written
    assert _run(root, cache) == (1, 0)  # loaded
    with open(root / "fastppo" / "kernels" / "fastmath.py", "a") as f:
        f.write("\n# an edit\n")
    assert _run(root, cache) == (0, 1)  # stale: compiled again
    assert _run(root, cache) == (1, 0)


def test_every_kind_of_compiled_function_carries_the_package_stamp():
    from fastppo.kernels import advantages, cabi, rng

    stamp = _jit._package_stamp()
    for compiled in (
        advantages.gae_kernel[0],  # kernel_pair, serial
        advantages.gae_kernel[1],  # kernel_pair, parallel
        advantages._gae_block,  # kernel
        rng.philox4x32_10,  # inline
        cabi.entry(0, 0),  # c_entry
    ):
        assert compiled._cache._cache_file._source_stamp[1] == stamp
