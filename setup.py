"""Cython extensions (everything else lives in pyproject.toml).

``pip install -e .`` (or ``pip install .``) compiles them; rerun it after
editing a ``.pyx``. Nothing is compiled at import time.
"""

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = [
    Extension("fastppo._cy._stats", ["fastppo/_cy/_stats.pyx"]),
    # numpy's C API: reading array headers in C is what makes the fast path fast.
    Extension(
        "fastppo._cy._fast",
        ["fastppo/_cy/_fast.pyx"],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    ),
]

setup(ext_modules=cythonize(extensions, language_level=3))
