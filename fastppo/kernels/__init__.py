"""Numba kernels. Import only numpy, numba, math and ``fastppo._jit`` here.

Kernels trust their inputs: the public layer validates shapes, dtypes and
ranges first, so a kernel never raises and never reads out of bounds.
"""
