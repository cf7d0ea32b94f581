"""The samplers' shared machinery: storage kinds, chunk layout, row loaders, uniforms.

Kernels return -1 or the first bad env index (NaN or +inf logits, rows with no
allowed action, non-finite Gaussian parameters), and the public layer raises
naming it. When the caller supplied ``out=`` buffers nothing is written on
error: the kernels validate every row first (and allocate nothing the size of
the batch); with fresh outputs the checks ride along the sampling pass and the
partial results are dropped. Work runs over chunks of ``CHUNK``
rows, grouped ``TASK`` chunks to a task that allocates its scratch once;
``prange`` runs over tasks in the parallel build. Rows are independent and
each draws from its own counter-based stream (:mod:`fastppo.kernels.rng`), so
results are bit-identical whatever the thread count, the chunking or the split
of a batch into slices. A chunk's random words are generated first, envs in
the inner loop, so Philox vectorises; every later step of a chunk also runs
with envs in the vector lanes (the single-dimension categorical transposes its
chunk of logits to action-major order for that).

Inputs arrive in their storage type: float32/float64 arrays, or uint16 bit
patterns of float16/bfloat16 (``kind``), so the byte-buffer samplers decode in
the same pass that samples and no float32 copy of the logits is ever made.

The samplers live in :mod:`fastppo.kernels.categorical`,
:mod:`fastppo.kernels.gaussian` and :mod:`fastppo.kernels.logp`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import types
from numba.extending import overload

from fastppo._jit import inline, kernel, linked, subroutine
from fastppo.kernels.codec import bf16_to_f32, f16_to_f32
from fastppo.kernels.rng import env_block, uniform53

# Storage kinds of the logits / parameters.
KIND_F32 = 0
KIND_F64 = 1
KIND_F16 = 2
KIND_BF16 = 3

# Small arithmetic helpers are IR-inlined (``inline``); everything a kernel
# does per chunk or per row is a separate compiled function (``kernel``) that
# Numba types and lowers once per signature and the serial and parallel builds
# share. Inlining the chunk bodies bought nothing measurable at 64 rows a call
# and cost about a minute of compile per parallel variant.

# Rows per chunk: a chunk's scratch (logits, weights, normals) stays in L1.
CHUNK = 64
# Chunks per parallel task; a task allocates its scratch once (per chunk, the
# allocations cost as much as the arithmetic at N = 4096). 512 rows a task
# still gives 8 tasks at N = 4096, 32 at the parallel threshold's sizes.
TASK = 8

_f32 = np.float32
_INF32 = _f32(np.inf)


def half_bits(x: Any) -> bool:
    """True when ``x`` holds float16/bfloat16 bits (uint16 storage).

    In a kernel the answer is a constant of the array's type, so a branch on
    it (``if half_bits(x) and kind == KIND_F16``) is folded away before LLVM
    optimises: a float variant never compiles the half loops and the uint16
    variant never compiles the float ones. ``kind`` still picks float16 or
    bfloat16 at run time.
    """
    return bool(np.asarray(x).dtype == np.uint16)


@overload(half_bits)
def _half_bits(x):  # unannotated: Numba requires the lambdas' exact signature
    half = isinstance(x, types.Array) and x.dtype == types.uint16
    return (lambda x: True) if half else (lambda x: False)


_NO_FLOATS = np.zeros(0, dtype=np.float32)


def float_rows(x: Any) -> Any:
    """``x`` flattened when it holds floats, else (float16/bfloat16 bits) an empty
    float32 array: what a kernel may hand :func:`rows_to_tile`, whose declared
    sources are float. A half variant decodes column by column instead and
    never transposes, but Numba types the call in every variant.
    """
    a = np.asarray(x)
    return _NO_FLOATS if a.dtype == np.uint16 else a.reshape(a.size)


@overload(float_rows)
def _float_rows(x):  # unannotated: Numba requires the lambdas' exact signature
    if isinstance(x, types.Array) and x.dtype == types.uint16:
        return lambda x: _NO_FLOATS
    return lambda x: x.reshape(x.size)


@subroutine
def first_bad(bad):  # pragma: no cover - compiled
    for c in range(bad.shape[0]):
        if bad[c] >= 0:
            return bad[c]
    return -1


@linked
def chunk_uniforms(stream, i0, rows, n_uni, u):  # pragma: no cover - compiled
    """``u[k * CHUNK + i]`` = uniform ``k`` of row ``i0 + i`` of ``stream``
    (:data:`fastppo.kernels.rng.STREAM`), for ``i < rows``, ``k < n_uni``.

    Rows are the inner loop: the Philox rounds of different envs are
    independent, so LLVM runs several envs per vector register.
    """
    for b in range((n_uni + 1) // 2):
        # views indexed from 0: no negative-index wrap for LLVM to keep
        u0 = u[2 * b * CHUNK : (2 * b + 1) * CHUNK]
        u1 = u[(2 * b + 1) * CHUNK : (2 * b + 2) * CHUNK]
        for i in range(rows):
            w0, w1, w2, w3 = env_block(stream, i0 + i, b)
            u0[i] = uniform53(w0, w1)
            u1[i] = uniform53(w2, w3)


@inline
def load1(x, i, j, kind):  # pragma: no cover - compiled
    """``float64(x[i, j])``, decoding float16/bfloat16 bits per ``kind``."""
    if half_bits(x) and kind == KIND_F16:
        return np.float64(f16_to_f32(x[i, j]))
    if half_bits(x):  # KIND_BF16
        return np.float64(bf16_to_f32(x[i, j]))
    return np.float64(x[i, j])


# ------------------------------------------------------------ chunk tiles
# A chunk's [rows, w] block of a C-ordered array and its tile ``tile[j *
# CHUNK + i]`` (envs in the vector lanes; flat: indexed as 2-D arrays the
# two transposes of a [4096x6] Gaussian took a third longer), converted in
# both directions. With ``w`` a compile-time constant LLVM vectorises the
# strided group of ``w`` loads or stores per row with shuffles; with a
# run-time ``w`` every element is a scalar load and store (a [4096x6]
# Gaussian's column writes cost 21 us that way, 7 us through a tile). So the
# widths of common action spaces, 1 to 8, get a loop each; wider rows take
# the generic one.


@inline
def _rows_to_tile(src, tile, rows, w):  # pragma: no cover - compiled
    for i in range(rows):
        for j in range(w):
            tile[j * CHUNK + i] = src[i * w + j]


@inline
def _tile_to_rows(tile, dst, rows, w):  # pragma: no cover - compiled
    for i in range(rows):
        for j in range(w):
            dst[i * w + j] = tile[j * CHUNK + i]


# Declared, not subroutines: the samplers, the log-prob kernels and the
# categorical sampler call them with different float types, which typed a
# subroutine up to six times; these are the three (source -> tile) pairs.
@kernel(
    ("void(f4_1, f8_1w, i8, i8)", "void(f8_1, f8_1w, i8, i8)", "void(f4_1, f4_1w, i8, i8)"),
    linked=True,
)
def rows_to_tile(src, tile, rows, w):  # pragma: no cover - compiled
    """``tile[j * CHUNK + i] = src[i * w + j]`` for ``i < rows``, ``j < w`` (converting)."""
    if w == 1:
        _rows_to_tile(src, tile, rows, 1)
    elif w == 2:
        _rows_to_tile(src, tile, rows, 2)
    elif w == 3:
        _rows_to_tile(src, tile, rows, 3)
    elif w == 4:
        _rows_to_tile(src, tile, rows, 4)
    elif w == 5:
        _rows_to_tile(src, tile, rows, 5)
    elif w == 6:
        _rows_to_tile(src, tile, rows, 6)
    elif w == 7:
        _rows_to_tile(src, tile, rows, 7)
    elif w == 8:
        _rows_to_tile(src, tile, rows, 8)
    else:
        _rows_to_tile(src, tile, rows, w)


@kernel("void(f4_1, f4_1w, i8, i8)", linked=True)
def tile_to_rows(tile, dst, rows, w):  # pragma: no cover - compiled
    """``dst[i * w + j] = tile[j * CHUNK + i]`` for ``i < rows``, ``j < w`` (converting)."""
    if w == 1:
        _tile_to_rows(tile, dst, rows, 1)
    elif w == 2:
        _tile_to_rows(tile, dst, rows, 2)
    elif w == 3:
        _tile_to_rows(tile, dst, rows, 3)
    elif w == 4:
        _tile_to_rows(tile, dst, rows, 4)
    elif w == 5:
        _tile_to_rows(tile, dst, rows, 5)
    elif w == 6:
        _tile_to_rows(tile, dst, rows, 6)
    elif w == 7:
        _tile_to_rows(tile, dst, rows, 7)
    elif w == 8:
        _tile_to_rows(tile, dst, rows, 8)
    else:
        _tile_to_rows(tile, dst, rows, w)
