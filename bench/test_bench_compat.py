"""pytest-benchmark view of the comparison suite (GAE / V-trace against peers).

Run: ``pytest bench/test_bench_compat.py --benchmark-enable``. Each group's
impls are checked equal before the first of them is timed (bench/conftest.py).
"""

from __future__ import annotations

import pytest

from fastppo_bench.pytest_glue import suite_params

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("fn", suite_params("fastppo_bench.suites.compat"))
def test_bench(benchmark, fn) -> None:  # type: ignore[no-untyped-def]
    benchmark(fn)
