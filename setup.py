"""Cython extensions and the kernels' machine code (everything else lives in pyproject.toml).

``pip install .`` (or ``pip install -e .``) compiles the Cython extensions and
every Numba kernel (``fastppo._warmup.INSTALL``: all but the float64 fused
rollouts), on the machine it installs on, into Numba's on-disk cache
next to the installed sources (``python -m fastppo._warmup --build``, one
process per core, beside the Cython build): a fresh install's first call of
any kernel loads machine code instead of compiling it (docs/design.md,
"Compile cost"). ``FASTPPO_BUILD_KERNELS=0`` skips that step (kernels then
compile on first use and are cached); so does ``FASTPPO_PORTABLE_BUILD=1``,
a wheel meant for other machines, whose CPUs a cache would not match. Rerun
the install after editing a ``.pyx``; an edited kernel recompiles on its
first call. Nothing is compiled at import time.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))

# The running statistics (the one implementation) on GCC: OpenMP for the
# large-batch path (cython.parallel.prange; elsewhere prange compiles to a
# serial loop), and the installing machine's vector width, as Numba's kernels
# get: on an AVX-512 EPYC the SSE2 default ran large batches 1.5-2x slower.
# -ffp-contract=off keeps every product and sum separately rounded (no FMA),
# as in the kernels. FASTPPO_PORTABLE_BUILD=1 drops -march=native (a wheel
# meant for other machines).
NATIVE = os.environ.get("FASTPPO_PORTABLE_BUILD", "0") != "1"
STATS_FLAGS: list[str] = []
FAST_FLAGS: list[str] = []
if sys.platform.startswith("linux"):
    STATS_FLAGS = ["-fopenmp", "-ffp-contract=off", "-funroll-loops"]
    # the fast path runs large sweeps on OpenMP threads too
    FAST_FLAGS = ["-fopenmp"]
    if NATIVE:
        STATS_FLAGS.append("-march=native")
        # the fast path's float-flag conversion narrows floats to bytes: with
        # SSE2 alone it ran 4x (float32) and 6x (float64) slower on znver4.
        # No FMA contraction: gamma * lambda is rounded as the general path's.
        FAST_FLAGS += ["-march=native", "-ffp-contract=off"]

extensions = [
    Extension(
        "fastppo._cy._stats",
        ["fastppo/_cy/_stats.pyx"],
        extra_compile_args=STATS_FLAGS,
        extra_link_args=STATS_FLAGS,
    ),
    # numpy's C API: reading array headers in C is what makes the fast path fast.
    Extension(
        "fastppo._cy._fast",
        ["fastppo/_cy/_fast.pyx"],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=FAST_FLAGS,
        extra_link_args=FAST_FLAGS,
    ),
]


def _build_kernels() -> bool:
    """FASTPPO_BUILD_KERNELS, on by default except in a portable build."""
    default = "0" if os.environ.get("FASTPPO_PORTABLE_BUILD", "0") == "1" else "1"
    return os.environ.get("FASTPPO_BUILD_KERNELS", default) == "1"


def _build_jobs() -> int:
    """Kernel-compiling processes: one per core this process may use, at most 4
    (each holds about 400 MB while compiling; past 4 the chain of tasks that
    wait on one another, not the cores, sets the time)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cores or 1, 4))


class BuildExtAndKernels(build_ext):
    """build_ext, and beside it the Numba kernels' cache for the package being built."""

    def _cythonize_and_build(self) -> None:
        # Cythonized here, not when setup.py is imported: pip imports it for the
        # build's requirements and metadata too, before the kernels could start.
        # (The .c sources replace the .pyx ones in place: build_ext has already
        # given its Extension objects attributes that cythonize's copies lack.)
        for ext, c_ext in zip(self.extensions, cythonize(self.extensions, language_level=3)):
            ext.sources = c_ext.sources
        super().run()

    def run(self) -> None:
        if not _build_kernels():
            self._cythonize_and_build()  # kernels compile on first use
            return
        # In place (editable installs) the package imported is the source
        # tree; otherwise it is build_lib (build_py has filled it), which
        # becomes the wheel.
        pkg_root = ROOT if self.inplace else os.path.abspath(self.build_lib)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_root, env.get("PYTHONPATH")]))
        # The cache must land next to the sources being installed, where
        # Numba looks first when no NUMBA_CACHE_DIR is set.
        env.pop("NUMBA_CACHE_DIR", None)
        with tempfile.TemporaryDirectory() as tmp:
            built = os.path.join(tmp, "extensions-built")
            # The kernels compile while the Cython extensions build (one core
            # each); the fused rollout, which calls the running statistics'
            # extension, waits for the file written once it is built.
            cmd = [sys.executable, "-m", "fastppo._warmup", "--build", built]
            kernels = subprocess.Popen([*cmd, "--jobs", str(_build_jobs())], cwd=pkg_root, env=env)
            try:
                self._cythonize_and_build()
            except BaseException:
                kernels.kill()
                kernels.wait()
                raise
            open(built, "w").close()
            if kernels.wait() != 0:
                raise SystemExit(
                    f"fastppo: compiling the kernels failed (exit {kernels.returncode}); "
                    "FASTPPO_BUILD_KERNELS=0 pip install . skips this step (each kernel "
                    "then compiles at its first call)"
                )


setup(
    ext_modules=extensions,
    cmdclass={"build_ext": BuildExtAndKernels},
)
