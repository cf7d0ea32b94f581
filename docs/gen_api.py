"""Generate docs/api.md from the docstrings of fastppo's public names.

    python docs/gen_api.py           # rewrite docs/api.md
    python docs/gen_api.py --check   # exit 1 if docs/api.md is out of date

Documents every name in ``fastppo.__all__``, ``fastppo.codec.__all__`` and
``fastppo.compat.__all__`` and ``fastppo.envs.__all__`` (classes with their public methods and
properties). tests/test_docs.py runs the check, so the reference cannot drift
from the code: after changing a public docstring or signature, run this.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
API_MD = Path(__file__).resolve().parent / "api.md"
MODULES = ("fastppo", "fastppo.codec", "fastppo.compat", "fastppo.envs")

HEADER = """\
# API reference

Generated from the docstrings by `python docs/gen_api.py`; do not edit by
hand (tests/test_docs.py fails when this file is out of date). Conventions
(time-major `[T, N]` arrays, `terminated`/`truncated`/`valid`, dtypes, `out=`)
are explained in [concepts.md](concepts.md).
"""


# For a module without ``__all__``: its public names per the API contract.
FALLBACK_NAMES = {"fastppo.codec": ["decode", "encode"]}


def public_names(module: str) -> list[str]:
    """The names a module exports, in ``__all__`` order."""
    mod = importlib.import_module(module)
    names = getattr(mod, "__all__", None)
    return list(names) if names is not None else list(FALLBACK_NAMES.get(module, []))


def _signature(obj: Any, name: str) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = "(...)"
    return f"{name}{sig}"


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or "(no docstring)"
    return f"```text\n{doc}\n```\n"


def _members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties defined on ``cls`` itself (not inherited)."""
    out = []
    for k, v in cls.__dict__.items():
        if k.startswith("_"):
            continue
        if isinstance(v, (staticmethod, classmethod)):
            v = v.__func__
        if isinstance(v, property) or inspect.isfunction(v):
            out.append((k, v))
    return out


def _static(module: str, name: str) -> tuple[str, str] | None:
    """(signature, docstring) a module declares for names it builds lazily."""
    if module != "fastppo.compat":
        return None
    from fastppo.compat import sb3

    return sb3.STATIC_DOCS.get(name)


def document(module: str, name: str) -> str:
    qual = f"{module}.{name}"
    head = f"### `{qual}`\n\n"
    static = _static(module, name)
    if static is not None:
        sig, doc = static
        return head + f"```python\n{sig}\n```\n\n```text\n{inspect.cleandoc(doc)}\n```\n"
    try:
        obj = getattr(importlib.import_module(module), name)
    except Exception as e:  # an unbuilt extension or missing module: say so, loudly
        return head + f"**Not importable when this page was generated:** `{type(e).__name__}`\n"
    if inspect.ismodule(obj):
        first = (inspect.getdoc(obj) or "").strip().split("\n\n")[0]
        return head + f"Submodule. {textwrap.fill(first, 88)}\n"
    if not callable(obj):
        return head + f"```python\n{name} = {obj!r}\n```\n"
    kind = "class " if inspect.isclass(obj) else ""
    text = head + f"```python\n{kind}{_signature(obj, name)}\n```\n\n" + _doc(obj)
    if inspect.isclass(obj):
        for k, v in _members(obj):
            if isinstance(v, property):
                text += f"\n#### `{name}.{k}` (property)\n\n" + _doc(v)
            else:
                text += f"\n#### `{name}.{k}`\n\n```python\n{_signature(v, k)}\n```\n\n" + _doc(v)
    return text


def render() -> str:
    sys.path.insert(0, str(ROOT))
    parts = [HEADER]
    import fastppo._files

    threat = inspect.getdoc(fastppo._files) or ""
    parts.append(f"\n## Files are data: what loading a checkpoint may cause\n\n{threat}\n")
    for module in MODULES:
        names = public_names(module)
        parts.append(f"\n## `{module}`\n\n" + ", ".join(f"`{n}`" for n in names) + "\n")
        for name in names:
            parts.append("\n" + document(module, name))
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is stale")
    ns = p.parse_args(argv)
    text = render()
    if ns.check:
        if not API_MD.exists() or API_MD.read_text() != text:
            print("docs/api.md is out of date: run `python docs/gen_api.py`", file=sys.stderr)
            return 1
        return 0
    API_MD.write_text(text)
    print(f"wrote {API_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
