"""Turn a suite's groups into pytest-benchmark parameters (used by ``bench/``).

The suites under :mod:`fastppo_bench.suites` declare groups once; ``fastppo
bench`` times them with its own runner, and ``pytest bench/`` times the same
callables with pytest-benchmark::

    from fastppo_bench.pytest_glue import suite_params

    @pytest.mark.parametrize("fn", suite_params("fastppo_bench.suites.advantages"))
    def test_bench(benchmark, fn):
        benchmark(fn)

Each runnable impl becomes one parameter with id ``"<group>::<impl>"`` and a
``benchmark(group=<group>)`` mark, so pytest-benchmark compares the impls of
a group in one table. An impl that is a string (why it cannot run) becomes a
parameter marked skip with that reason. The group's ``check`` runs once,
before the first of its impls is timed (the autouse fixture in
``bench/conftest.py`` calls :func:`ensure_checked`); a failed check fails
every test of the group, naming it.

pytest is imported inside the functions: this module is part of the package,
which does not depend on pytest.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastppo_bench.core import Group


@dataclass
class _GroupState:
    group: Group
    checked: bool = False
    error: str | None = None


# id(callable) -> (callable, states of the groups it belongs to). The callable
# is kept alive here, so its id cannot be reused by another object.
_REGISTRY: dict[int, tuple[Callable[[], Any], list[_GroupState]]] = {}


def suite_params(module_name: str, quick: bool = True, full: bool = False) -> list[Any]:
    """pytest parameters for every impl of every group of a suite module.

    Parameters
    ----------
    module_name : str
        Suite module, e.g. ``"fastppo_bench.suites.advantages"``; it defines
        ``groups(quick, full=False) -> list[Group]``.
    quick, full : bool
        Passed to ``groups``: quick means the small sizes.

    Returns
    -------
    list of pytest.param
        One per (group, impl), id ``"<group>::<impl>"``. A suite module that
        does not exist yet gives a single skipped parameter.
    """
    import pytest

    if not isinstance(module_name, str):
        raise TypeError(f"suite_params: module_name must be a str, got {module_name!r}")
    try:
        mod = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise  # the suite exists but a dependency is missing: a real error
        skip = pytest.mark.skip(reason=f"suite not available: {e}")
        return [pytest.param(None, id=f"{module_name}::unavailable", marks=skip)]
    groups = mod.groups(quick=quick, full=full)
    params = []
    for g in groups:
        if not isinstance(g, Group):
            raise TypeError(f"suite_params: {module_name}.groups() must return Group, got {g!r}")
        if g.baseline not in g.impls:
            raise ValueError(
                f"suite_params: group {g.name!r} baseline must be one of {list(g.impls)}, "
                f"got {g.baseline!r}"
            )
        state = _GroupState(g)
        for label, impl in g.impls.items():
            pid = f"{g.name}::{label}"
            if isinstance(impl, str):
                params.append(pytest.param(None, id=pid, marks=pytest.mark.skip(reason=impl)))
                continue
            _REGISTRY.setdefault(id(impl), (impl, []))[1].append(state)
            params.append(pytest.param(impl, id=pid, marks=pytest.mark.benchmark(group=g.name)))
    return params


def ensure_checked(value: Any) -> None:
    """Run the check of every group ``value`` (an impl callable) belongs to, once.

    Calls every runnable impl of the group once (which also compiles them),
    passes the results to ``group.check``, and remembers the outcome. Fails
    the current test, naming the group, if the check (or an impl) failed.
    Values that :func:`suite_params` did not produce are ignored.
    """
    entry = _REGISTRY.get(id(value))
    if entry is None or entry[0] is not value:
        return
    for state in entry[1]:
        if not state.checked:
            state.error = _run_check(state.group)
            state.checked = True
        if state.error is not None:
            import pytest

            pytest.fail(f"bench group {state.group.name!r}: {state.error}", pytrace=False)


def _run_check(group: Group) -> str | None:
    results: dict[str, Any] = {}
    for label, impl in group.impls.items():
        if isinstance(impl, str):
            continue
        try:
            results[label] = impl()
        except Exception as e:
            return f"impl {label!r} raised {type(e).__name__}: {e}"
    if group.check is None or not results:
        return None
    try:
        group.check(results)
    except Exception as e:
        return f"check failed: {type(e).__name__}: {e}"
    return None
