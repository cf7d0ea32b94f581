"""Benchmark suites: each module defines groups(quick, full) -> list[Group]."""
