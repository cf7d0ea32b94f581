"""C entry points of serial kernels, for the Cython fast path (``fastppo._cy._fast``).

Each entry takes raw pointers plus the shape, rebuilds C-contiguous views
with ``numba.carray`` (no copy) and calls the kernel in
:mod:`fastppo.kernels.gae`, ``vtrace``, ``returns``, ``categorical`` or ``gaussian``, so the
arithmetic is the kernels', bit for bit. A sweep whose ``options`` carry
``BATCH_MAJOR`` views its arrays as ``[N, T]`` rows and calls the batch-major
kernel. A sweep's ``options`` may also name one step of a threaded run
(``CHECK_ROWS``, ``STATUS``, ``BLOCK`` of :mod:`fastppo.kernels.sweep`, over
``lo:hi``): the Cython caller runs the validation's row ranges, then the
blocks of envs, on OpenMP threads; otherwise ``lo`` and ``hi`` are unused.
Float arguments are declared as typed pointers; the Cython caller passes
``void*`` (the same C ABI) and picks the float32 or float64 entry.
Flags are ``uint8`` (numpy bool has the same layout). Every entry returns the
kernel's status code (the sweeps: nonzero means nothing was written; the
samplers: -1, or the first bad env).

An entry is compiled (or loaded from the cache) on its first use only, so a
process pays for the sweeps and dtypes it calls.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numba import carray, types

from fastppo._jit import c_entry, inline
from fastppo.kernels import categorical as S
from fastppo.kernels import gae, returns, vtrace
from fastppo.kernels import gaussian as G
from fastppo.kernels.sweep import (
    BATCH_MAJOR,
    BLOCK,
    CHECK_ROWS,
    STATUS,
    check_rows,
    rollout,
    status,
)

#: The C entries' arguments in call order, ``(name, C type)``, per kind (0 gae,
#: 1 vtrace, 2 discounted_returns, 3 categorical, 4 gaussian): the one declaration. The
#: Numba signatures are built from it, the entry functions below must take
#: exactly these parameters, and the ``ctypedef``s of ``fastppo._cy._fast``
#: must spell the same C types (``tests/test_fastpath.py`` checks both).
#: ``F*`` is the float pointer of the entry's dtype.
ENTRY_ARGS: tuple[tuple[tuple[str, str], ...], ...] = (
    (
        ("r", "F*"), ("v", "F*"), ("lv", "F*"), ("te", "u8*"), ("tr", "u8*"), ("fv", "F*"),
        ("ok", "u8*"), ("options", "i64"), ("gamma", "f64"), ("gl", "f64"), ("T", "i64"),
        ("N", "i64"), ("lo", "i64"), ("hi", "i64"), ("adv", "F*"), ("ret", "F*"),
    ),
    (
        ("blp", "F*"), ("tlp", "F*"), ("r", "F*"), ("v", "F*"), ("lv", "F*"), ("te", "u8*"),
        ("tr", "u8*"), ("fv", "F*"), ("ok", "u8*"), ("options", "i64"), ("gamma", "f64"),
        ("lam", "f64"), ("rb", "f64"), ("cb", "f64"), ("pb", "f64"), ("T", "i64"),
        ("N", "i64"), ("lo", "i64"), ("hi", "i64"), ("vs", "F*"), ("pg", "F*"),
    ),
    (
        ("r", "F*"), ("lv", "F*"), ("te", "u8*"), ("tr", "u8*"), ("fv", "F*"), ("ok", "u8*"),
        ("options", "i64"), ("gamma", "f64"), ("T", "i64"), ("N", "i64"), ("lo", "i64"),
        ("hi", "i64"), ("ret", "F*"),
    ),
    (
        ("x", "F*"), ("kind", "i64"), ("m", "u8*"), ("m_rows", "i64"), ("m_cols", "i64"),
        ("has_mask", "i64"), ("offs", "i64*"), ("s_lo", "i64"), ("s_hi", "i64"),
        ("c_lo", "i64"), ("c_hi", "i64"), ("env_offset", "i64"), ("det", "i64"),
        ("pre", "i64"), ("N", "i64"), ("A", "i64"), ("act", "i64*"), ("logp", "f32*"),
    ),
    (
        ("mu", "F*"), ("kind", "i64"), ("ls", "F*"), ("ls_rows", "i64"), ("s_lo", "i64"),
        ("s_hi", "i64"), ("c_lo", "i64"), ("c_hi", "i64"), ("env_offset", "i64"),
        ("squash", "i64"), ("det", "i64"), ("N", "i64"), ("A", "i64"), ("act", "f32*"),
        ("logp", "f32*"),
    ),
)  # fmt: skip

_C_TYPES = {
    "u8*": types.CPointer(types.uint8),
    "i64": types.int64,
    "f64": types.float64,
    "i64*": types.CPointer(types.int64),
    "f32*": types.CPointer(types.float32),
}


def signature(kind: int, fp: types.Type) -> Any:
    """The Numba signature of entry ``kind`` with ``fp`` as its float pointer."""
    args = [fp if c == "F*" else _C_TYPES[c] for _, c in ENTRY_ARGS[kind]]
    return types.int64(*args)


@inline
def _shape(options, T, N):  # pragma: no cover - compiled
    return (N, T) if options & BATCH_MAJOR else (T, N)


@inline
def _validation(ro, has_values, has_logp, options, lo, hi):  # pragma: no cover - compiled
    """A threaded sweep's validation steps: CHECK_ROWS, the mask of rows
    ``lo:hi``; STATUS, the status code of the OR of the masks (``lo``)."""
    if options & CHECK_ROWS:
        return check_rows(ro, has_values, has_logp, options, lo, hi)
    return status(np.full(1, lo, np.int64), ro[2])


def _gae(r, v, lv, te, tr, fv, ok, options, gamma, gl, T, N, lo, hi, adv, ret):  # pragma: no cover
    s = _shape(options, T, N)
    ro = _rollout(r, v, lv, fv, te, tr, ok, r, r, s, N)
    a, b = carray(adv, s), carray(ret, s)
    if options & (CHECK_ROWS | STATUS):
        return _validation(ro, True, False, options, lo, hi)
    bm = options & BATCH_MAJOR
    if options & BLOCK:
        g, g_l = ro[0].dtype.type(gamma), ro[0].dtype.type(gl)
        if bm:
            gae.gae_rows(ro, options, g, g_l, lo, hi, a, b)
        else:
            gae.gae_block(ro, options, g, g_l, lo, hi, a, b)
        return 0
    return gae.gae_kernel(ro, options, gamma, gl, N, a, b)


def _vtrace(  # pragma: no cover - compiled
    blp, tlp, r, v, lv, te, tr, fv, ok, options, gamma, lam, rb, cb, pb, T, N, lo, hi, vs, pg
):
    s = _shape(options, T, N)
    ro = _rollout(r, v, lv, fv, te, tr, ok, blp, tlp, s, N)
    vs_, pg_ = carray(vs, s), carray(pg, s)
    if options & (CHECK_ROWS | STATUS):
        return _validation(ro, True, True, options, lo, hi)
    bm = options & BATCH_MAJOR
    if options & BLOCK:
        g = ro[0].dtype.type(gamma)
        if bm:
            vtrace.vtrace_rows(ro, options, g, lam, rb, cb, pb, lo, hi, vs_, pg_)
        else:
            vtrace.vtrace_block(ro, options, g, lam, rb, cb, pb, lo, hi, vs_, pg_)
        return 0
    return vtrace.vtrace_kernel(ro, options, gamma, lam, rb, cb, pb, N, vs_, pg_)


def _returns(r, lv, te, tr, fv, ok, options, gamma, T, N, lo, hi, ret):  # pragma: no cover
    s = _shape(options, T, N)
    ro = _rollout(r, r, lv, fv, te, tr, ok, r, r, s, N)
    out = carray(ret, s)
    if options & (CHECK_ROWS | STATUS):
        return _validation(ro, False, False, options, lo, hi)
    bm = options & BATCH_MAJOR
    if options & BLOCK:
        g = ro[0].dtype.type(gamma)
        if bm:
            returns.returns_rows(ro, options, g, lo, hi, out)
        else:
            returns.returns_block(ro, options, g, lo, hi, out)
        return 0
    return returns.discounted_returns_kernel(ro, options, gamma, N, out)


_record = inline(rollout)


@inline
def _rollout(r, v, lv, fv, te, tr, ok, blp, tlp, s, N):  # pragma: no cover - compiled
    """The sweeps' record over the entry's pointers, arrays of shape ``s`` (a
    stand-in is another input's pointer, as the public layer passes it)."""
    return _record(
        rewards=carray(r, s),
        values=carray(v, s),
        last_values=carray(lv, N),
        final_values=carray(fv, s),
        terminated=carray(te, s),
        truncated=carray(tr, s),
        valid=carray(ok, s),
        behavior_logp=carray(blp, s),
        target_logp=carray(tlp, s),
    )


_categorical_serial = S.categorical_serial


def _categorical(  # pragma: no cover - compiled
    x, kind, m, m_rows, m_cols, has_mask, offs, s_lo, s_hi, c_lo, c_hi, env_offset, det, pre,
    N, A, act, logp,
):  # fmt: skip
    return _categorical_serial(
        carray(x, (N, A)),
        kind,
        carray(m, (m_rows, m_cols)),
        has_mask != 0,
        carray(offs, 2),
        (s_lo, s_hi, c_lo, c_hi, env_offset),  # the stream record (kernels.rng.STREAM)
        det != 0,
        pre != 0,
        carray(x, 0),  # the working-precision prototype: an empty view of the logits
        carray(act, N),
        carray(logp, N),
    )


_gaussian_serial = G.gaussian_serial


def _gaussian(  # pragma: no cover - compiled
    mu, kind, ls, ls_rows, s_lo, s_hi, c_lo, c_hi, env_offset, squash, det, N, A, act, logp,
):  # fmt: skip
    # ls_rows 1 with N > 1: one log-std row for every env (state-independent)
    return _gaussian_serial(
        carray(mu, (N, A)),
        0,
        carray(ls, (ls_rows, A)),
        0,
        A,
        kind,
        ls_rows == 1 and N != 1,
        (s_lo, s_hi, c_lo, c_hi, env_offset),
        squash != 0,
        det != 0,
        carray(act, (N, A)),
        carray(logp, N),
    )


FUNCS = (_gae, _vtrace, _returns, _categorical, _gaussian)
_POINTERS = (types.CPointer(types.float32), types.CPointer(types.float64))


@functools.cache
def entry(kind: int, d: int) -> Any:
    """The C entry of kernel ``kind`` (0 gae, 1 vtrace, 2 discounted_returns, 3
    categorical, 4 gaussian) for dtype ``d`` (0 float32, 1 float64), compiled or loaded from
    the cache on first use."""
    return c_entry(signature(kind, _POINTERS[d]))(FUNCS[kind])


def compile_all() -> None:
    """Compile (or load) every C entry: each kind for float32 and float64."""
    for kind in range(len(FUNCS)):
        for d in range(len(_POINTERS)):
            entry(kind, d)


def address(kind: int, d: int) -> int:
    """Address of :func:`entry`'s machine code (what ``fastppo._cy._fast`` calls)."""
    return int(entry(kind, d).address)
