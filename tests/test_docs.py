"""The docs stay true: complete API reference, runnable recipes and examples, live links."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _gen_api() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_api", DOCS / "gen_api.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_api_md_is_up_to_date() -> None:
    gen = _gen_api()
    assert (DOCS / "api.md").read_text() == gen.render(), (
        "docs/api.md is out of date: run `python docs/gen_api.py`"
    )


@pytest.mark.parametrize("module", ["fastppo", "fastppo.codec", "fastppo.compat"])
def test_every_public_name_is_documented(module: str) -> None:
    gen = _gen_api()
    api = (DOCS / "api.md").read_text()
    names = gen.public_names(module)
    assert names, f"{module} exports nothing"
    for name in names:
        heading = f"### `{module}.{name}`"
        assert heading in api, f"{module}.{name} missing from docs/api.md"
        section = api.split(heading, 1)[1].split("\n### ", 1)[0]
        assert "Not importable" not in section, f"{module}.{name} could not be documented"
        own = section.split("\n#### ", 1)[0]  # the entry itself, not its members
        assert "(no docstring)" not in own, f"{module}.{name} has no docstring"


def test_fastppo_all_is_covered_by_the_generator() -> None:
    import fastppo

    assert _gen_api().public_names("fastppo") == list(fastppo.__all__)


# ---- recipes: every python block runs --------------------------------------------------

_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
_RECIPES = _BLOCK.findall((DOCS / "recipes.md").read_text())


def test_recipes_have_code() -> None:
    assert len(_RECIPES) >= 5


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("i", range(len(_RECIPES)))
def test_recipe_block_runs(i: int) -> None:
    code = _RECIPES[i]
    for need in re.findall(r"# needs: (\w+)", code):
        pytest.importorskip(need)
    exec(compile(code, f"docs/recipes.md block {i}", "exec"), {"__name__": "__recipe__"})


# ---- examples: each one runs (small sizes) ------------------------------------------

EXAMPLES = {
    "sb3_rollout_buffer.py": (
        "stable_baselines3",
        ["--timesteps", "128", "--n-steps", "32", "--n-envs", "2"],
    ),
    "cleanrl_ppo.py": (
        "torch",
        ["--total-timesteps", "512", "--num-steps", "64", "--num-envs", "2"],
    ),
    "cleanrl_compiled_env.py": (
        "torch",
        ["--total-timesteps", "512", "--num-steps", "64", "--num-envs", "2"],
    ),
    "gymnasium_autoreset.py": (None, ["--steps", "64"]),
    "zero_copy_torch.py": ("torch", []),
}


def test_every_example_is_listed() -> None:
    assert sorted(p.name for p in (ROOT / "examples").glob("*.py")) == sorted(EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name: str) -> None:
    need, args = EXAMPLES[name]
    if need is not None:
        pytest.importorskip(need)
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True, text=True, env=env, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{name} printed nothing"


# ---- links between pages ------------------------------------------------------------


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_relative_links_resolve(page: str) -> None:
    text = (DOCS / page).read_text()
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (DOCS / target).exists(), f"{page} links to missing {target}"


def test_index_lists_every_page_and_example() -> None:
    index = (DOCS / "index.md").read_text()
    for p in DOCS.glob("*.md"):
        if p.name != "index.md":
            assert f"({p.name})" in index, f"index.md does not link {p.name}"
    for name in EXAMPLES:
        assert f"examples/{name}" in index, f"index.md does not mention examples/{name}"
