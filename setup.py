"""Cython extensions (everything else lives in pyproject.toml).

``pip install -e .`` (or ``pip install .``) compiles them; rerun it after
editing a ``.pyx``. Nothing is compiled at import time.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension("fastppo._cy._stats", ["fastppo/_cy/_stats.pyx"]),
]

setup(ext_modules=cythonize(extensions, language_level=3))
