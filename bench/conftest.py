"""pytest configuration for the benchmark suites in ``bench/``.

Suite authors write ``bench/test_bench_<topic>.py``::

    import pytest

    from fastppo_bench.pytest_glue import suite_params

    @pytest.mark.parametrize("fn", suite_params("fastppo_bench.suites.<topic>"))
    def test_bench(benchmark, fn):
        benchmark(fn)

``suite_params`` is re-exported here too (``from conftest import
suite_params`` works under pytest's default import mode), but importing it from
the package works whatever the import mode. The fixture below runs each
group's correctness check once, before its first impl is timed.
"""

from __future__ import annotations

import pytest

from fastppo_bench.pytest_glue import ensure_checked, suite_params

__all__ = ["suite_params"]


@pytest.fixture(autouse=True)
def _bench_group_check(request: pytest.FixtureRequest) -> None:
    """Check a group's impls agree before timing any of them (once per group)."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None:
        for value in callspec.params.values():
            ensure_checked(value)
