"""pytest-benchmark view of the sampling suite.

One parameter per (group, impl) of ``fastppo_bench.suites.sampling``: masked
categorical [4096x18] and [1x4] (per-call overhead), multi-discrete [4096x(6,6,6)]
beside the categorical sampler on the same logits, Gaussian [4096x6] against
the vectorised numpy formulation and torch.distributions (skipped with
"not installed" when torch is absent), and the bfloat16 byte-buffer sampler
against the float32 array sampler. Each group's impls are checked before the
first is timed (bench/conftest.py).

Run: ``pytest bench/test_bench_sampling.py --benchmark-enable --benchmark-only``.
"""

from __future__ import annotations

import pytest

from fastppo_bench.pytest_glue import suite_params


@pytest.mark.parametrize("fn", suite_params("fastppo_bench.suites.sampling", quick=True))
def test_bench(benchmark, fn) -> None:  # type: ignore[no-untyped-def]
    benchmark(fn)
