"""Benchmark runner behind `fastppo bench` and the suites bench/ reuses."""
