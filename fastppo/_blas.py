"""The BLAS behind the MLP's GEMMs runs on one thread below a size.

The MLP kernels (:mod:`fastppo.kernels.mlp`) multiply through Numba's
``np.dot``, which calls the BLAS that SciPy ships: OpenBLAS in SciPy's wheels,
which starts its own threads for every GEMM from 2**18 multiply-adds (GEMV from
about 2**13) and lets them spin between calls. A PPO update is thousands of
GEMMs with elementwise work between them, so at the sizes people train most
those threads mostly cost. Measured on the 2-vCPU machine
(``bench/blas_threads.py``, docs/design.md "The BLAS runs on one thread below
a size"): on an idle machine two BLAS threads made the updates and ``act``
below 2**26 multiply-adds 5-23% faster for 1.6-2x the CPU; beside one or two
busy processes they made them up to 6x slower, and a whole ``fastppo train
CartPole-v1`` 2-4.5x slower.

So a call whose largest GEMM (rows x the widest layer's ``n_in * n_out``) lies
in ``[2**13, _dispatch.BLAS_PARALLEL_MIN)`` holds every BLAS library that
threadpoolctl finds at one thread for its duration, and then restores what
was set before; below 2**13 no BLAS we know of threads, so there is nothing to
hold. Concurrent calls (actor threads beside a learner) share one hold,
counted, so the first to enter saves the settings and the last to leave
restores them. While a hold is on, other threads' BLAS calls (numpy's
included) run on one thread too. ``FASTPPO_BLAS_PARALLEL_MIN=0`` turns the
holds off.
"""

from __future__ import annotations

import os
import threading
from contextlib import AbstractContextManager
from typing import Any

from fastppo import _dispatch

#: Below this many multiply-adds per product no BLAS starts threads (OpenBLAS:
#: GEMV from 2304 * 4 = 9216, GEMM from 65536 * 4), so no hold is needed.
THREADED_FROM = 1 << 13

_lock = threading.Lock()
_depth = 0
_libs: list[Any] | None = None
_saved: list[tuple[Any, int]] = []


def _after_fork() -> None:
    # A child forked while another thread held the lock would wait for it
    # forever; it starts with no hold (a parent's hold leaves it at one thread).
    global _lock, _depth
    _lock = threading.Lock()
    _depth = 0
    _saved.clear()


os.register_at_fork(after_in_child=_after_fork)


def _controllers() -> list[Any]:
    global _libs
    if _libs is None:
        # Import the BLAS that Numba's np.dot calls before looking for it:
        # Numba binds it lazily, so it may not be loaded yet.
        import scipy.linalg.cython_blas  # noqa: F401
        from threadpoolctl import ThreadpoolController

        _libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _libs


def _set(lib: Any, n: int) -> None:
    # threadpoolctl (>= 3.7) lets only one "controlling" thread set a process-wide
    # pool such as OpenBLAS's and silently ignores the others; a hold may be taken
    # and released by any thread (an actor beside the learner), so take control
    # for the set and leave none behind.
    clear = getattr(lib, "clear_controlling_thread", None)
    if clear is not None:
        clear(force=True)
    lib.set_num_threads(n)
    if clear is not None:
        clear(force=True)


class _OneThread(AbstractContextManager[None]):
    def __enter__(self) -> None:
        global _depth
        with _lock:
            if _depth == 0:
                for lib in _controllers():
                    n = int(lib.get_num_threads() or 1)
                    if n != 1:
                        _saved.append((lib, n))
                        _set(lib, 1)
            _depth += 1

    def __exit__(self, *exc: object) -> None:
        global _depth
        with _lock:
            _depth -= 1
            if _depth == 0:
                while _saved:
                    _set(*_saved.pop())


_ONE = _OneThread()


def call(macs: int, kernel: Any, *args: Any) -> Any:
    """``kernel(*args)``, a call whose largest GEMM has ``macs`` multiply-adds: with
    the BLAS held at one thread if ``THREADED_FROM <= macs < _dispatch.BLAS_PARALLEL_MIN``."""
    if THREADED_FROM <= macs < _dispatch.BLAS_PARALLEL_MIN:
        with _ONE:
            return kernel(*args)
    return kernel(*args)
