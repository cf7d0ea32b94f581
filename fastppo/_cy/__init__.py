"""Cython modules, compiled by ``pip install -e .`` (never at import time).

Each module follows the kernel contract of ``fastppo.kernels`` (trusted,
validated inputs; no allocation visible to the caller; GIL released for the
loops) and earns its place with a benchmark in ``bench/``.
"""
