"""pytest-benchmark view of the running-statistics suite.

One parameter per (group, impl) of ``fastppo_bench.suites.stats``: numpy
(np.mean/np.var + Chan merge) as the baseline, Numba serial and parallel, the
Cython ``Updater`` and the public ``RunningMeanStd.update``. Each group's impls
are checked equal before the first is timed (bench/conftest.py).

Run: ``pytest bench/test_bench_stats.py --benchmark-enable --benchmark-only``.
"""

from __future__ import annotations

import pytest

from fastppo_bench.pytest_glue import suite_params


@pytest.mark.parametrize("fn", suite_params("fastppo_bench.suites.stats", quick=False))
def test_bench(benchmark, fn) -> None:  # type: ignore[no-untyped-def]
    benchmark(fn)
