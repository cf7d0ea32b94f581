"""fastppo.compat imports its frameworks lazily, and says what to install when one is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import fastppo
import fastppo.compat

ROOT = Path(__file__).resolve().parent.parent
PEERS = ("stable_baselines3", "torch", "tianshou", "torchrl", "jax")


def test_importing_the_adapters_imports_no_framework() -> None:
    code = (
        "import sys, fastppo.compat, fastppo.compat.sb3, fastppo.compat.cleanrl, "
        "fastppo.compat.gym, fastppo_bench.suites.compat\n"
        f"print(sorted(m for m in {PEERS!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"


def test_lazy_exports_resolve() -> None:
    for name in fastppo.compat.__all__:
        if name in ("RolloutBuffer", "DictRolloutBuffer"):
            continue  # need SB3: covered in test_compat_sb3.py
        assert getattr(fastppo.compat, name) is not None
    assert fastppo.compat is fastppo.__getattr__("compat")
    with pytest.raises(AttributeError, match=r"fastppo\.compat' has no attribute 'nope'"):
        _ = fastppo.compat.nope  # type: ignore[attr-defined]


def test_buffer_without_sb3_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from fastppo.compat import sb3

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    monkeypatch.setitem(sys.modules, "stable_baselines3.common.buffers", None)
    monkeypatch.delitem(sb3.__dict__, "RolloutBuffer", raising=False)
    with pytest.raises(ImportError, match=r"`pip install stable-baselines3`"):
        _ = sb3.RolloutBuffer


def test_suite_reports_missing_peers_as_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from fastppo_bench.suites import compat as suite

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n in PEERS else real(n, *a)
    )
    g = suite.groups(quick=True)[0]
    reasons = sorted(v for v in g.impls.values() if isinstance(v, str))
    assert reasons == [
        "not installed: pip install stable-baselines3",
        "not installed: pip install tianshou",
        "not installed: pip install torch",
        "not installed: pip install torchrl",
        "not installed: pip install torchrl",
    ]
    runnable = [k for k, v in g.impls.items() if callable(v)]
    assert runnable == ["numpy loop", "fastppo"]
