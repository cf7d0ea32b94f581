"""Dispatch thresholds: where each public call picks its build. All of them, in one place.

Opening a Numba parallel region costs microseconds on an idle machine and was
measured at 10-65 ms on an oversubscribed 2-core one, so every kernel runs its
serial build below a size, and small calls take the Cython fast path
(:mod:`fastppo._fastpath`). The sizes are read once, at import, from the
environment (``FASTPPO_<NAME>=<int>``), so a machine with many idle cores can
lower them without editing code; callers read them from this module at call
time (tests lower them to force the parallel builds).
"""

from __future__ import annotations

import os


def env_int(name: str, default: int) -> int:
    """``int(os.environ["FASTPPO_" + name])`` if set (an int >= 0), else ``default``."""
    raw = os.environ.get(f"FASTPPO_{name}")
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(
            f"fastppo: environment variable FASTPPO_{name} must be an int >= 0, got {raw!r}"
        )
    return value


#: Advantage sweeps, half-float codecs and finiteness scans (elements): below it
#: the serial build runs; from it a sweep may run on threads
#: (``fastppo.advantages._blocks``).
PARALLEL_MIN_ELEMENTS = env_int("PARALLEL_MIN_ELEMENTS", 1 << 16)
#: Categorical samplers and log-prob/entropy (logits, ``N * A``); also the
#: fast path's limit for ``sample_categorical``. Measured on the 2-core
#: CI-class machine under load: for [4096 x 18] the serial build took 0.8 ms,
#: the parallel one 0.4 ms at best but 7-15 ms at the median (a parallel region
#: that waits for a descheduled worker stalls the whole call). Results are
#: bit-identical either way.
PARALLEL_MIN_LOGITS = env_int("PARALLEL_MIN_LOGITS", 1 << 18)
#: The Gaussian sampler (``N * action_dim``): a normal costs about four logits.
PARALLEL_MIN_GAUSSIAN = env_int("PARALLEL_MIN_GAUSSIAN", 1 << 16)
#: Running statistics (elements): about a nanosecond per element serially, so
#: under 2**20 a call is done in about a millisecond.
PARALLEL_MIN_STATS = env_int("PARALLEL_MIN_STATS", 1 << 20)
#: Memory-bound sweeps (GAE, discounted returns) stay serial up to this many
#: Numba threads: on a 2-vCPU VM a second thread adds no bandwidth
#: (serial 1.1-1.3 ms vs 1.0-1.3 ms at [2048, 256]).
SERIAL_MAX_THREADS = env_int("SERIAL_MAX_THREADS", 2)
#: The MLP's GEMMs (multiply-adds of the largest product in a call: rows x the
#: widest layer's ``n_in * n_out``): below it the BLAS runs on one thread
#: (:mod:`fastppo._blas`, with the measurements); 0 leaves the BLAS its threads.
BLAS_PARALLEL_MIN = env_int("BLAS_PARALLEL_MIN", 1 << 26)
