"""C entry points of serial kernels, for the Cython fast path (``fastppo._cy._fast``).

Each entry takes raw pointers plus the shape, rebuilds C-contiguous views
with ``numba.carray`` (no copy) and calls the serial build of the kernel in
:mod:`fastppo.kernels.advantages` or :mod:`fastppo.kernels.categorical`, so the
arithmetic is the kernels', bit for bit. Float arguments are declared as
typed pointers; the Cython caller passes ``void*`` (the same C ABI) and picks
the float32 or float64 entry.
Flags are ``uint8`` (numpy bool has the same layout). Every entry returns the
kernel's status code (the sweeps: nonzero means nothing was written; the
categorical sampler: -1, or the first bad env).

An entry is compiled (or loaded from the cache) on its first use only, so a
process pays for the sweeps and dtypes it calls.
"""

from __future__ import annotations

import functools
from typing import Any

from numba import carray, types

from fastppo._jit import c_entry
from fastppo.kernels import advantages as K
from fastppo.kernels import categorical as S

_i64 = types.int64
_f64 = types.float64
_u8p = types.CPointer(types.uint8)


def _gae_sig(fp: types.Type) -> Any:
    # r, v, last_values, te, tr, final_values, valid, options, gamma,
    # gamma*lambda, T, N, adv, ret
    return _i64(fp, fp, fp, _u8p, _u8p, fp, _u8p, _i64, _f64, _f64, _i64, _i64, fp, fp)


def _vtrace_sig(fp: types.Type) -> Any:
    # blp, tlp, r, v, last_values, te, tr, final_values, valid, options, gamma,
    # lam, rho_bar, c_bar, pg_rho_bar, T, N, vs, pg
    return _i64(
        fp, fp, fp, fp, fp, _u8p, _u8p, fp, _u8p, _i64, _f64, _f64, _f64, _f64, _f64, _i64,
        _i64, fp, fp,
    )  # fmt: skip


def _returns_sig(fp: types.Type) -> Any:
    # r, last_values, te, tr, final_values, valid, options, gamma, T, N, ret
    return _i64(fp, fp, _u8p, _u8p, fp, _u8p, _i64, _f64, _i64, _i64, fp)


def _categorical_sig(fp: types.Type) -> Any:
    # logits, kind, mask, mask rows, mask cols, has_mask, offs, seed_lo, seed_hi,
    # ctr_lo, ctr_hi, env_offset, deterministic, prevalidate, N, A, actions, logp
    return _i64(
        fp, _i64, _u8p, _i64, _i64, _i64, types.CPointer(_i64), _i64, _i64, _i64, _i64, _i64,
        _i64, _i64, _i64, _i64, types.CPointer(_i64), types.CPointer(types.float32),
    )  # fmt: skip


_gae_serial = K.gae_kernel[0]
_vtrace_serial = K.vtrace_kernel[0]
_returns_serial = K.discounted_returns_kernel[0]


def _gae(r, v, lv, te, tr, fv, ok, options, gamma, gl, T, N, adv, ret):  # pragma: no cover
    s = (T, N)
    return _gae_serial(
        carray(r, s),
        carray(v, s),
        carray(lv, N),
        carray(te, s),
        carray(tr, s),
        carray(fv, s),
        carray(ok, s),
        options,
        gamma,
        gl,
        N,
        carray(adv, s),
        carray(ret, s),
    )


def _vtrace(  # pragma: no cover - compiled
    blp, tlp, r, v, lv, te, tr, fv, ok, options, gamma, lam, rb, cb, pb, T, N, vs, pg
):
    s = (T, N)
    return _vtrace_serial(
        carray(blp, s),
        carray(tlp, s),
        carray(r, s),
        carray(v, s),
        carray(lv, N),
        carray(te, s),
        carray(tr, s),
        carray(fv, s),
        carray(ok, s),
        options,
        gamma,
        lam,
        rb,
        cb,
        pb,
        N,
        carray(vs, s),
        carray(pg, s),
    )


def _returns(r, lv, te, tr, fv, ok, options, gamma, T, N, ret):  # pragma: no cover
    s = (T, N)
    return _returns_serial(
        carray(r, s),
        carray(lv, N),
        carray(te, s),
        carray(tr, s),
        carray(fv, s),
        carray(ok, s),
        options,
        gamma,
        N,
        carray(ret, s),
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
        s_lo,
        s_hi,
        c_lo,
        c_hi,
        env_offset,
        det != 0,
        pre != 0,
        carray(x, 0),  # the working-precision prototype: an empty view of the logits
        carray(act, N),
        carray(logp, N),
    )


_SIGS = (_gae_sig, _vtrace_sig, _returns_sig, _categorical_sig)
_FUNCS = (_gae, _vtrace, _returns, _categorical)
_POINTERS = (types.CPointer(types.float32), types.CPointer(types.float64))


@functools.cache
def entry(kind: int, d: int) -> Any:
    """The C entry of kernel ``kind`` (0 gae, 1 vtrace, 2 discounted_returns, 3
    categorical) for dtype ``d`` (0 float32, 1 float64), compiled or loaded from
    the cache on first use."""
    return c_entry(_SIGS[kind](_POINTERS[d]))(_FUNCS[kind])


def compile_all() -> None:
    """Compile (or load) every C entry: each kind for float32 and float64."""
    for kind in range(len(_FUNCS)):
        for d in range(len(_POINTERS)):
            entry(kind, d)


def address(kind: int, d: int) -> int:
    """Address of :func:`entry`'s machine code (what ``fastppo._cy._fast`` calls)."""
    return int(entry(kind, d).address)
