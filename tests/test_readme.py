"""The README's quick start is what CI runs: exactly two commands, the second one in .ci/run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_quick_start_has_exactly_two_commands():
    cmds = _quick_start_commands()
    assert len(cmds) == 2, cmds
    assert all("\n" not in c for c in cmds), "each command is one line"
    assert "fastppo train CartPole-v1" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    assert _quick_start_commands()[1] in ci


def _python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_usage_for_every_public_function():
    import fastppo

    text = (ROOT / "README.md").read_text()
    for name in fastppo._EXPORTS:
        assert name in text, f"README has no usage for fastppo.{name}"


# One block runs fastppo.warmup(), which compiles every kernel variant not yet
# in the cache: minutes on a cold 2-core machine, so more than the default.
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("i", range(len(_python_blocks())))
def test_readme_python_blocks_run(i, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(_python_blocks()[i], f"README.md block {i}", "exec"), {"__name__": "readme"})
