"""Importing an optional framework with an error that says what to install."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, pip_name: str, what: str) -> ModuleType:
    """Import ``module`` or raise ``ImportError`` naming the pip package.

    Parameters
    ----------
    module : str
        Import name, e.g. ``"stable_baselines3"``.
    pip_name : str
        What ``pip install`` needs, e.g. ``"stable-baselines3"``.
    what : str
        The fastppo name that needs it, for the message.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(
            f"{what} needs {module!r}, which is not installed; "
            f"install it with `pip install {pip_name}` "
            f"(or `pip install fastppo[compat-test]` for every supported framework)"
        ) from e
