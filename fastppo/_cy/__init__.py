"""Cython modules, compiled by ``pip install -e .`` (never at import time).

Each module follows the kernel contract of ``fastppo.kernels`` (trusted,
validated inputs; no allocation visible to the caller; GIL released for the
loops) and earns its place with a benchmark in ``bench/``.
"""


def missing(name: str) -> ImportError:
    """The error for an extension that failed to import: what to run."""
    return ImportError(
        f"fastppo needs the compiled extension fastppo._cy.{name}, which is missing or stale; "
        "build it with `pip install -e .` (rerun after editing a .pyx)"
    )
