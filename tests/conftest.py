"""Shared test fixtures."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest


@pytest.fixture(autouse=True, scope="session")
def _sb3_logs_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Stable-Baselines3's ``learn()`` makes a log folder per call, by default
    ``$TMPDIR/SB3-<date>``, which nothing removes; ``SB3_LOGDIR`` points them
    into pytest's own temporary tree (set in the environment, so the
    subprocesses the tests start inherit it)."""
    old = os.environ.get("SB3_LOGDIR")
    os.environ["SB3_LOGDIR"] = str(tmp_path_factory.mktemp("sb3-logs"))
    yield
    if old is None:
        os.environ.pop("SB3_LOGDIR", None)
    else:
        os.environ["SB3_LOGDIR"] = old


class _NoFastPath:
    """Stands in for ``fastppo._cy._fast``: every call goes to the general path."""

    @staticmethod
    def gae(*args: object) -> None:
        return None

    vtrace = discounted_returns = sample_categorical = sample_gaussian = gae


@pytest.fixture
def force_parallel_sweeps(
    monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Callable[[int], None]:
    """Make every advantage sweep of two envs or more run on threads
    (``fastppo._cy._fast``): three blocks of envs, rounded up to ``align``,
    whatever the machine's thread count, and whatever the call's size.

    The serial rule for memory-bound sweeps on small machines is switched off too.
    """
    from fastppo import _dispatch
    from fastppo import advantages as adv_mod
    from fastppo._fastpath import GAE, RETURNS, VTRACE, fast

    def restore() -> None:
        for kind in (GAE, VTRACE, RETURNS):
            fast.set_limit(kind, _dispatch.PARALLEL_MIN_ELEMENTS)

    def force(align: int = 1) -> None:
        request.addfinalizer(restore)
        for kind in (GAE, VTRACE, RETURNS):
            fast.set_limit(kind, 0)
        monkeypatch.setattr(adv_mod, "_BLOCK_ALIGN", align)
        monkeypatch.setattr(_dispatch, "SERIAL_MAX_THREADS", 0)
        monkeypatch.setattr(adv_mod, "num_threads", lambda: 3)

    return force


@pytest.fixture
def no_fast_path(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Switch off the Cython fast path in the public modules (general path only)."""
    from fastppo import advantages
    from fastppo.sampling import categorical, gaussian

    def off() -> None:
        monkeypatch.setattr(advantages, "_fast", _NoFastPath)
        monkeypatch.setattr(categorical, "_fast", _NoFastPath)
        monkeypatch.setattr(gaussian, "_fast", _NoFastPath)

    return off
