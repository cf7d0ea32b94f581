"""The Cython small-call fast path (``fastppo._cy._fast``): sweeps and categorical sampling.

It must agree bit for bit with the general path, take the plain numpy case,
and hand every unusual call back (None) so that the general path validates and
raises; it must never write to an ``out=`` buffer it then refuses.
"""

from __future__ import annotations

import gc
import itertools
import threading

import numpy as np
import pytest

import fastppo
from fastppo import _dispatch
from fastppo._cy import _fast


def _case(rng, T, N, dt, one_d=False):
    shape = (T,) if one_d else (T, N)
    r = rng.standard_normal(shape).astype(dt)
    v = rng.standard_normal(shape).astype(dt)
    fv = rng.standard_normal(shape).astype(dt)
    te = rng.random(shape) < 0.1
    tr = rng.random(shape) < 0.1
    lv = rng.standard_normal(1 if one_d else N).astype(dt)
    blp = (0.3 * rng.standard_normal(shape)).astype(dt)
    tlp = (0.3 * rng.standard_normal(shape)).astype(dt)
    valid = fastppo.next_step_valid(te, tr)
    return r, v, fv, te, tr, lv, blp, tlp, valid


def _tup(x):
    return x if isinstance(x, tuple) else (x,)


def _calls(r, v, fv, te, tr, lv, blp, tlp, valid):
    """(name, callable(out=...)) for every sweep and option combination."""
    calls = []
    for mode in ("plain", "final", "valid", "both"):
        kw = {}
        trunc = None if mode == "plain" else tr
        if mode in ("final", "both"):
            kw["final_values"] = fv
        if mode in ("valid", "both"):
            kw["valid"] = valid
        calls.append(
            (
                f"gae-{mode}",
                lambda out, kw=kw, trunc=trunc: fastppo.gae(
                    r, v, lv, te, trunc, gamma=0.97, gae_lambda=0.9, out=out, **kw
                ),
            )
        )
        calls.append(
            (
                f"vtrace-{mode}",
                lambda out, kw=kw, trunc=trunc: fastppo.vtrace(
                    blp,
                    tlp,
                    r,
                    v,
                    lv,
                    te,
                    trunc,
                    gamma=0.97,
                    lam=0.9,
                    rho_bar=1.5,
                    c_bar=0.8,
                    out=out,
                    **kw,
                ),
            )
        )
        if mode in ("plain", "final", "both"):
            calls.append(
                (
                    f"returns-{mode}",
                    lambda out, kw=kw, trunc=trunc: fastppo.discounted_returns(
                        r, lv, te, trunc, gamma=0.97, out=out, **kw
                    ),
                )
            )
    return calls


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("one_d", [False, True])
def test_fast_path_equals_general_path_bit_for_bit(dt, one_d, no_fast_path):
    rng = np.random.default_rng(7)
    arrays = _case(rng, 37, 5, dt, one_d)
    # batch-major: the same data in [N, T] rows, passed transposed
    bm = tuple(np.asfortranarray(a) if a.ndim == 2 else a for a in arrays)
    fast = {name: f(None) for name, f in _calls(*arrays)}
    fast_bm = {name: f(None) for name, f in _calls(*bm)}
    no_fast_path()
    for name, f in _calls(*arrays):
        for g, w in zip(_tup(fast_bm[name]), _tup(fast[name])):
            assert g.flags.f_contiguous or g.ndim == 1, name
            assert np.ascontiguousarray(g).tobytes() == w.tobytes(), name
        want = f(None)
        got = fast[name]
        for g, w in zip(
            got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)
        ):
            assert g.dtype == w.dtype and g.shape == w.shape, name
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_plain_numpy_calls_take_the_fast_path():
    rng = np.random.default_rng(0)
    r, v, fv, te, tr, lv, blp, tlp, valid = _case(rng, 8, 3, np.float32)
    a, b = np.empty_like(r), np.empty_like(r)
    assert _fast.gae(r, v, lv, te, None, None, None, 0.99, 0.95, (a, b)) is not None
    assert _fast.gae(r, v, lv, te, tr, fv, valid, 0.99, 0.95, None) is not None
    assert _fast.vtrace(blp, tlp, r, v, lv, te, tr, None, valid, 0.99, 1.0, 1.0, 1.0, 1.0, None)
    assert _fast.discounted_returns(r, lv, te, tr, fv, None, 0.99, a) is a
    # a 1-D rollout with a float bootstrap value
    assert _fast.gae(r[:, 0].copy(), v[:, 0].copy(), 0.5, te[:, 0].copy(), None, None, None,
                     0.99, 0.95, None) is not None  # fmt: skip
    # batch-major [N, T] rows passed transposed (every 2-D array Fortran-ordered):
    # fresh outputs are Fortran-ordered too
    f = [np.asfortranarray(x) for x in (r, v, fv, te, tr, blp, tlp, valid)]
    bm = _fast.gae(f[0], f[1], lv, f[3], f[4], f[2], f[7], 0.99, 0.95, None)
    assert bm is not None and bm[0].flags.f_contiguous and bm[1].flags.f_contiguous
    assert _fast.vtrace(f[5], f[6], f[0], f[1], lv, f[3], None, None, None, 0.99, 1.0, 1.0, 1.0,
                        1.0, None) is not None  # fmt: skip
    assert _fast.discounted_returns(f[0], lv, f[3], f[4], f[2], None, 0.99, None) is not None
    # strided views and C-ordered arrays among Fortran-ordered ones are copied
    # in C order, float 0/1 flags converted to uint8: the general path's
    # conversions, made in C (the bits are the differential test's)
    w = [np.repeat(x, 2, axis=-1)[..., ::2] for x in (r, v, lv, te)]
    assert _fast.gae(w[0], w[1], w[2], w[3], None, None, None, 0.99, 0.95, None) is not None
    assert _fast.gae(r, f[1], lv, te, None, None, None, 0.99, 0.95, None) is not None
    assert _fast.discounted_returns(r, lv, te.astype(np.float32), tr.astype(np.float64), fv,
                                    None, 0.99, None) is not None  # fmt: skip


def test_fast_path_hands_unusual_calls_back():
    rng = np.random.default_rng(1)
    r, v, fv, te, tr, lv, blp, tlp, valid = _case(rng, 8, 4, np.float32)
    a, b = np.empty_like(r), np.empty_like(r)
    ro = np.empty_like(r)
    ro.flags.writeable = False
    wide = np.repeat(r, 2, axis=1)
    refused = {
        "C values among batch-major arrays": (
            (np.asfortranarray(r), v, lv, np.asfortranarray(te)),
            {},
        ),
        "time-major out for batch-major input": (
            (np.asfortranarray(r), np.asfortranarray(v), lv, np.asfortranarray(te)),
            {"out": (a, b)},
        ),
        "mixed dtypes": ((r, v.astype(np.float64), lv, te), {}),
        "float flags not 0/1": ((r, v, lv, te.astype(np.float32) * 0.5), {}),
        "out overlaps a strided input": ((wide[:, ::2], v, lv, te), {"out": (wide[:, 1::2], b)}),
        "list rewards": ((r.tolist(), v, lv, te), {}),
        "int gamma": ((r, v, lv, te), {"gamma": 1}),
        "gamma above 1": ((r, v, lv, te), {"gamma": 1.5}),
        "nan lambda": ((r, v, lv, te), {"gae_lambda": float("nan")}),
        "ambiguous truncation": ((r, v, lv, te, tr), {}),
        "out overlaps rewards": ((r, v, lv, te), {"out": (r, b)}),
        "out overlaps itself": ((r, v, lv, te), {"out": (a, a)}),
        "read-only out": ((r, v, lv, te), {"out": (a, ro)}),
        "out of another dtype": ((r, v, lv, te), {"out": (a, b.astype(np.float64))}),
        "non-finite reward": ((np.where(te, np.nan, r).astype(np.float32), v, lv, te), {}),
    }
    for why, (args, kw) in refused.items():
        args = args + (None,) * (7 - len(args))
        res = _fast.gae(*args, kw.get("gamma", 0.99), kw.get("gae_lambda", 0.95), kw.get("out"))
        assert res is None, why


def test_refused_out_buffers_are_untouched():
    rng = np.random.default_rng(2)
    r, v, fv, te, tr, lv, blp, tlp, valid = _case(rng, 8, 4, np.float64)
    r[3, 1] = np.inf
    a, b = np.full_like(r, 7.0), np.full_like(r, 8.0)
    with pytest.raises(ValueError, match=r"gae: rewards must be finite, got inf at index \(3, 1\)"):
        fastppo.gae(r, v, lv, te, out=(a, b))
    assert (a == 7.0).all() and (b == 8.0).all()
    with pytest.raises(ValueError, match="out must be not to overlap"):
        fastppo.gae(v, r, lv, te, out=(a, v))


def test_fast_path_is_thread_safe():
    """Two threads in the fast path at once (it releases the GIL) get exact results."""
    rng = np.random.default_rng(3)
    r, v, fv, te, tr, lv, blp, tlp, valid = _case(rng, 64, 16, np.float32)
    want = fastppo.gae(r, v, lv, te)
    errors = []

    def work():
        a, b = np.empty_like(r), np.empty_like(r)
        for _ in range(2000):
            fastppo.gae(r, v, lv, te, out=(a, b))
            if not (np.array_equal(a, want[0]) and np.array_equal(b, want[1])):
                errors.append("mismatch")
                return

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def _categorical_calls(x, mask):
    calls = {}
    for name, m in (("plain", None), ("masked", mask), ("uint8 mask", mask.view(np.uint8))):
        for det in (False, True):
            for with_out in (False, True):
                key = f"{name}-det{det}-out{with_out}"

                def call(m=m, det=det, with_out=with_out):
                    n = x.shape[0]
                    out = (np.full(n, -7), np.full(n, -7.0, np.float32)) if with_out else None
                    return fastppo.sample_categorical(
                        x, m, seed=2**63 + 5, counter=11, env_offset=3, deterministic=det, out=out
                    )

                calls[key] = call
    return calls


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 4), (37, 6), (130, 1)])
def test_categorical_fast_path_equals_general_path(dt, shape, no_fast_path):
    rng = np.random.default_rng(9)
    x = (2 * rng.standard_normal(shape)).astype(dt)
    mask = rng.random(shape) < 0.7
    mask[:, 0] = True
    fast = {k: f() for k, f in _categorical_calls(x, mask).items()}
    no_fast_path()
    for k, f in _categorical_calls(x, mask).items():
        (ga, gl), (wa, wl) = fast[k], f()
        assert ga.dtype == wa.dtype and gl.dtype == wl.dtype, k
        np.testing.assert_array_equal(ga, wa, err_msg=k)
        np.testing.assert_array_equal(gl, wl, err_msg=k)


def test_categorical_fast_path_hands_unusual_calls_back():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    mask = np.ones((6, 3), bool)
    a, lp = np.empty(6, np.int64), np.empty(6, np.float32)
    assert _fast.sample_categorical(x, mask, 1, 2, 0, False, (a, lp)) is not None
    ro = x.copy()
    ro.flags.writeable = False
    ro_mask = mask.copy()
    ro_mask.flags.writeable = False
    # read-only inputs are taken (a rollout buffer handed out read-only)
    assert _fast.sample_categorical(ro, ro_mask, 1, 2, 0, False, None) is not None
    bad_row = x.copy()
    bad_row[4, 1] = np.nan
    refused = {
        "list logits": (x.tolist(), None, 1, 2, 0, False, None),
        "float16 logits": (x.astype(np.float16), None, 1, 2, 0, False, None),
        "strided logits": (x[::2], None, 1, 2, 0, False, None),
        "int8 mask": (x, mask.astype(np.int8), 1, 2, 0, False, None),
        "mask shape": (x, mask[:3], 1, 2, 0, False, None),
        "negative seed": (x, None, -1, 2, 0, False, None),
        "seed >= 2**64": (x, None, 2**64, 2, 0, False, None),
        "numpy counter": (x, None, 1, np.uint64(2), 0, False, None),
        "env_offset past 2**32": (x, None, 1, 2, 2**32 - 3, False, None),
        "int deterministic": (x, None, 1, 2, 0, 1, None),
        "out of int32": (x, None, 1, 2, 0, False, (a.astype(np.int32), lp)),
        "out aliasing itself": (x, None, 1, 2, 0, False, (a, a.view(np.float32)[:6])),
        "NaN logit": (bad_row, None, 1, 2, 0, False, (a, lp)),
        "large batch": (
            np.zeros((_dispatch.PARALLEL_MIN_LOGITS, 1), np.float32),
            None,
            1,
            2,
            0,
            False,
            None,
        ),
    }
    for why, args in refused.items():
        assert _fast.sample_categorical(*args) is None, why
    a[:] = -7
    with pytest.raises(ValueError, match="env 4"):
        fastppo.sample_categorical(bad_row, seed=1, counter=2, out=(a, lp))
    assert (a == -7).all()


def _gaussian_calls(mu, ls):
    """``sample_gaussian`` over the log-std forms, flags and ``out=``."""
    n = mu.shape[0]
    distinct = (ls + 0.01 * np.arange(n, dtype=mu.dtype)[:, None]).astype(mu.dtype)
    forms = {
        "[A]": ls,
        "[N, A] copies": np.ascontiguousarray(np.broadcast_to(ls, mu.shape)),
        "[N, A] view": np.broadcast_to(ls, mu.shape),
        "[N, A] per env": distinct,
    }
    calls = {}
    for name, lsf in forms.items():
        for squash, det, with_out in itertools.product((False, True), repeat=3):
            key = f"{name}-squash{squash}-det{det}-out{with_out}"

            def call(lsf=lsf, squash=squash, det=det, with_out=with_out):
                out = None
                if with_out:
                    out = (np.full(mu.shape, -7.0, np.float32), np.full(n, -7.0, np.float32))
                return fastppo.sample_gaussian(
                    mu, lsf, seed=2**63 + 5, counter=11, env_offset=3, squash=squash,
                    deterministic=det, out=out,
                )  # fmt: skip

            calls[key] = call
    return calls


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 4), (37, 6), (130, 1), (65, 9)])
def test_gaussian_fast_path_equals_general_path(dt, shape, no_fast_path):
    rng = np.random.default_rng(10)
    mu = rng.standard_normal(shape).astype(dt)
    ls = (0.3 * rng.standard_normal(shape[1]) - 0.5).astype(dt)
    fast = {k: f() for k, f in _gaussian_calls(mu, ls).items()}
    no_fast_path()
    for k, f in _gaussian_calls(mu, ls).items():
        (ga, gl), (wa, wl) = fast[k], f()
        assert ga.dtype == wa.dtype == np.float32 and gl.dtype == wl.dtype == np.float32, k
        np.testing.assert_array_equal(ga, wa, err_msg=k)
        np.testing.assert_array_equal(gl, wl, err_msg=k)


def test_gaussian_fast_path_takes_the_common_forms_and_hands_the_rest_back():
    rng = np.random.default_rng(5)
    mu = rng.standard_normal((6, 3)).astype(np.float32)
    ls = np.full(3, -0.5, np.float32)
    act, lp = np.empty((6, 3), np.float32), np.empty(6, np.float32)
    ro = mu.copy()
    ro.flags.writeable = False
    taken = {
        "[A]": (mu, ls, 1, 2, 0, False, False, (act, lp)),
        "[N, A]": (mu, np.tile(ls, (6, 1)), 1, 2, 0, True, False, None),
        "broadcast view": (mu, np.broadcast_to(ls, mu.shape), 1, 2, 0, False, True, None),
        "read-only mean": (ro, ls, 1, 2, 0, False, False, None),
    }
    for why, args in taken.items():
        assert _fast.sample_gaussian(*args) is not None, why
    bad = mu.copy()
    bad[4, 1] = np.inf
    big = np.zeros((_dispatch.PARALLEL_MIN_GAUSSIAN, 1), np.float32)
    refused = {
        "list mean": (mu.tolist(), ls, 1, 2, 0, False, False, None),
        "float16 mean": (mu.astype(np.float16), ls.astype(np.float16), 1, 2, 0, False, False, None),
        "strided mean": (mu[::2], ls, 1, 2, 0, False, False, None),
        "log_std of another dtype": (mu, ls.astype(np.float64), 1, 2, 0, False, False, None),
        "log_std [1, A]": (mu, ls[None], 1, 2, 0, False, False, None),
        "strided log_std": (mu, np.tile(ls, (6, 2))[:, ::2], 1, 2, 0, False, False, None),
        "negative seed": (mu, ls, -1, 2, 0, False, False, None),
        "numpy counter": (mu, ls, 1, np.uint64(2), 0, False, False, None),
        "env_offset past 2**32": (mu, ls, 1, 2, 2**32 - 3, False, False, None),
        "int squash": (mu, ls, 1, 2, 0, 1, False, None),
        "numpy bool deterministic": (mu, ls, 1, 2, 0, False, np.bool_(True), None),
        "float64 actions out": (mu, ls, 1, 2, 0, False, False, (act.astype(np.float64), lp)),
        "out over the mean": (mu, ls, 1, 2, 0, False, False, (mu, lp)),
        "out aliasing itself": (mu, ls, 1, 2, 0, False, False, (act, act.reshape(-1)[:6])),
        "infinite mean": (bad, ls, 1, 2, 0, False, False, (act, lp)),
        "large batch": (big, ls[:1], 1, 2, 0, False, False, None),
    }
    for why, args in refused.items():
        assert _fast.sample_gaussian(*args) is None, why
    act[:] = -7
    with pytest.raises(ValueError, match="env 4"):
        fastppo.sample_gaussian(bad, ls, seed=1, counter=2, out=(act, lp))
    assert (act == -7).all()


def test_same_rows_is_the_equality_of_every_row_with_the_first():
    rng = np.random.default_rng(6)
    for dt in (np.float32, np.float64):
        row = rng.standard_normal(5).astype(dt)
        a = np.tile(row, (9, 1))
        assert _fast.same_rows(a)
        for i, j in ((1, 0), (8, 4), (5, 2)):
            b = a.copy()
            b[i, j] = np.nextafter(b[i, j], dt(np.inf))
            assert not _fast.same_rows(b), (i, j)
        z = np.zeros((3, 2), dt)
        z[1, 1] = -0.0
        assert _fast.same_rows(z)  # -0 == +0
        z[:, 0] = np.nan
        assert not _fast.same_rows(z)  # NaN equals nothing
    assert not _fast.same_rows(np.zeros((1, 4), np.float32))
    assert not _fast.same_rows(np.zeros((4, 4), np.float16))
    assert not _fast.same_rows(np.zeros((4, 8), np.float32)[:, ::2])


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.uint8, np.bool_, np.int16])
def test_c_contiguous_copies_every_view_as_numpy_does(dt):
    """The C copy's loops (rows apart, steps 2-4 as constants, any other step,
    the blocked transpose of Fortran-ordered and transposed views, 1-D and
    2-D) against ``np.ascontiguousarray``; a C-contiguous array is returned
    as it is."""
    rng = np.random.default_rng(7)
    base = (rng.standard_normal((12, 40)) * 3).astype(dt)
    views = [base[:, :7], base[::2], base[::3, 1::5]]
    views += [base[1:, k::s] for s in (2, 3, 4, 5, -1, -2, -3) for k in (0, 1)]
    views += [base[3, ::s] for s in (2, 3, 4, 6, -1)]
    # rows that continue each other (copied as one run), reversed
    views += [base[::-1, ::-1], base[::-1], base[::-2, ::-2], base[2:9, ::-3]]
    views += [base.T, base[:, ::2].T, base[1:, 3:].T, np.broadcast_to(base[0], (5, 40))]
    # Fortran order: 8 x 8 blocks and both edges
    views += [np.asfortranarray(base[:r, :c]) for r, c in ((8, 8), (12, 40), (11, 37), (1, 9))]
    big = np.asfortranarray((rng.standard_normal((203, 77)) * 3).astype(dt))
    views += [big]
    # register tiles: columns further apart than the view is long, and every
    # start within a cache line (the rows before the first line boundary)
    views += [big[r0:, 2:70] for r0 in range(0, 17)] + [big[5:150:1, ::3], big[40:41, :]]
    # narrower than a tile, and a narrow tile left over: masked stores
    views += [np.asfortranarray(big[:, :w]) for w in (1, 2, 5, 6, 7, 9, 15, 17)]
    for v in views:
        c = _fast.c_contiguous(v)
        assert c.flags.c_contiguous and c.dtype == v.dtype and c.shape == v.shape
        np.testing.assert_array_equal(c, np.ascontiguousarray(v), err_msg=str(v.strides))
        assert c is v if v.flags.c_contiguous else not np.shares_memory(c, v)
    assert _fast.c_contiguous(base) is base


def test_large_temporaries_reuse_cached_blocks_within_bounds():
    """A copy of at least SCRATCH_MIN bytes lives in a cached block: writeable,
    aligned to 64 bytes, C- or Fortran-ordered as asked; freed, its block
    serves the next temporary of its size (no fresh pages: the page faults
    that made strided sweeps slow); the cache never holds more than
    SCRATCH_SLOTS blocks or SCRATCH_MAX bytes, and small copies bypass it."""
    wide = np.arange(2 * 512 * 256, dtype=np.float32).reshape(512, 512)
    view = wide[:, ::2]  # 512 KiB of values
    c = _fast.c_contiguous(view)
    assert isinstance(c.base, _fast._Block)
    assert c.flags.writeable and c.flags.c_contiguous and c.ctypes.data % 64 == 0
    np.testing.assert_array_equal(c, np.ascontiguousarray(view))
    c[0, 0] = -1.0  # a temporary the caller may write
    address = c.ctypes.data
    del c
    blocks, held = _fast.scratch_cached()
    assert blocks >= 1 and held >= view.nbytes
    again = _fast.c_contiguous(view)
    assert again.ctypes.data == address  # the same block, refilled
    np.testing.assert_array_equal(again, np.ascontiguousarray(view))
    flags = np.asfortranarray((np.arange(512 * 1024) % 2).reshape(512, 1024).astype(np.float32))
    u, bad = _fast.float_flags(flags)
    assert bad == -1 and u.flags.f_contiguous and u.flags.writeable
    np.testing.assert_array_equal(u, flags != 0)
    # many at once: all distinct, and only what the bounds allow is kept
    views = [(wide + k)[:, ::2] for k in range(12)]
    held_now = [_fast.c_contiguous(v) for v in views]
    assert len({h.ctypes.data for h in held_now}) == len(held_now)
    for h, v in zip(held_now, views):
        np.testing.assert_array_equal(h, np.ascontiguousarray(v))
    del held_now, again, u
    blocks, held = _fast.scratch_cached()
    assert blocks <= _fast.SCRATCH_SLOTS and held <= _fast.SCRATCH_MAX
    small = _fast.c_contiguous(wide[:8, ::2])
    assert small.base is None and small.flags.owndata


@pytest.mark.parametrize(("kind", "d"), list(itertools.product(range(5), range(2))))
def test_c_entries_exist(kind, d):
    from fastppo.kernels import cabi

    assert cabi.address(kind, d) > 0


def test_one_declaration_of_the_c_entries() -> None:
    """cabi.ENTRY_ARGS is the declaration: the entry functions take exactly its
    parameters, and the Cython caller's ctypedefs spell the same C types."""
    import inspect
    import re
    from pathlib import Path

    from fastppo.kernels import cabi

    pyx = (Path(_fast.__file__).parent / "_fast.pyx").read_text()
    c_names = {"F*": "void*", "u8*": "unsigned char*", "i64": "int64_t", "f64": "double"}
    c_names |= {"i64*": "int64_t*", "f32*": "float*"}
    names = ("gae_fn", "vtrace_fn", "returns_fn", "categorical_fn", "gaussian_fn")
    assert len(names) == len(cabi.FUNCS) == len(cabi.ENTRY_ARGS)
    for kind, name in enumerate(names):
        decl = cabi.ENTRY_ARGS[kind]
        params = list(inspect.signature(cabi.FUNCS[kind]).parameters)
        assert params == [n for n, _ in decl], name
        m = re.search(rf"ctypedef int64_t \(\*{name}\)\((.*?)\) noexcept nogil", pyx, re.S)
        assert m, f"no ctypedef {name} in _fast.pyx"
        spelled = [" ".join(t.split()) for t in m.group(1).split(",")]
        assert spelled == [c_names[c] for _, c in decl], name
        sig = cabi.signature(kind, cabi._POINTERS[0])
        assert len(sig.args) == len(decl)


def test_ndarray_of_views_arrays_and_plain_cpu_tensors_only() -> None:
    """The general paths' tensor view (as_array, the running statistics'
    per-step calls): an ndarray as it is, a CPU tensor's memory (detached when
    it needs a gradient), and None for anything else, which as_array then
    diagnoses."""
    torch = pytest.importorskip("torch")
    a = np.arange(6.0).reshape(2, 3)
    assert _fast.ndarray_of(a) is a
    t = torch.arange(6.0).reshape(2, 3)
    v = _fast.ndarray_of(t)
    assert isinstance(v, np.ndarray) and v.ctypes.data == t.data_ptr() and v.shape == (2, 3)
    g = torch.ones(3, requires_grad=True)
    assert _fast.ndarray_of(g).ctypes.data == g.data_ptr()
    for other in ([1.0, 2.0], 3.0, np.ma.masked_array([1.0]), torch.nn.Parameter(t.clone())):
        assert _fast.ndarray_of(other) is None, type(other)


def _tensor_layouts(torch):
    """Tensors of every dtype numpy views, in the layouts frameworks hand over."""
    dtypes = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.float32, torch.float64]  # fmt: skip
    dtypes += [getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)]
    for dt in dtypes:
        base = torch.arange(60).reshape(5, 12).to(dt)
        yield dt, base  # contiguous
        yield dt, base.T  # Fortran order (batch-major [N, T].T)
        yield dt, base[1:4, ::3]  # storage offset and steps
        yield dt, base[2]  # a row: 1-D, offset
        yield dt, base[0, :1].expand(4, 3)  # a broadcast view (stride 0)
        yield dt, base[2, 5]  # 0-d
        yield dt, base[:0]  # empty
        yield dt, base.flip(0)[::2]  # no negative strides in torch: a copy, then steps


def test_tensor_view_is_the_numpy_view_of_every_dtype_and_layout() -> None:
    """``ndarray_of`` views a CPU tensor through torch's DLPack exchange API: the same
    dtype, shape, strides and memory as ``Tensor.numpy()``, writeable, with
    the tensor as its base (which keeps the storage alive)."""
    torch = pytest.importorskip("torch")
    for dt, t in _tensor_layouts(torch):
        v, ref = _fast.ndarray_of(t), t.numpy()
        assert type(v) is np.ndarray and v.base is t, (dt, t.shape)
        assert (v.dtype, v.shape, v.strides) == (ref.dtype, ref.shape, ref.strides), (dt, t.shape)
        assert v.size == 0 or v.ctypes.data == ref.ctypes.data, (dt, t.shape)
        assert v.flags.writeable and v.flags.aligned == ref.flags.aligned
        np.testing.assert_array_equal(v, ref)
    # the view outlives the caller's reference: the tensor is its base
    t = torch.arange(1000.0)
    v = _fast.ndarray_of(t)
    del t
    gc.collect()
    np.testing.assert_array_equal(v, np.arange(1000.0))


def test_tensor_view_declines_what_numpy_does_not_view() -> None:
    """DLPack has no negative bit, so a tensor with it set (a complex
    conjugate's ``imag``) is declined as ``Tensor.numpy()`` refuses it, not
    read with its signs flipped (torch's exchange API exports it as it
    lies); bfloat16, sparse and meta tensors too. The public layer then
    explains in the house format."""
    torch = pytest.importorskip("torch")
    neg = torch.tensor([1 + 2j, 3 - 4j]).conj().imag
    assert neg.is_neg() and _fast.ndarray_of(neg) is None
    assert _fast.ndarray_of(neg.resolve_neg()).tolist() == [-2.0, 4.0]
    assert _fast.ndarray_of(torch.ones(3, dtype=torch.bfloat16)) is None
    assert _fast.ndarray_of(torch.eye(3).to_sparse()) is None
    assert _fast.ndarray_of(torch.empty(3, device="meta")) is None  # the export fails: cleared
    # a dtype the DLPack view does not take goes to Tensor.numpy(), as before
    c = torch.ones(2, dtype=torch.complex64)
    assert _fast.ndarray_of(c).ctypes.data == c.data_ptr()
    rewards = torch.tensor([[1 + 2j, 3 - 4j]] * 4).conj().imag  # [4, 2] float32, negative bit
    zeros = np.zeros((4, 2), np.float32)
    with pytest.raises(TypeError, match=r"gae: rewards .* negative bit .* \.resolve_neg\(\)"):
        fastppo.gae(rewards, zeros, zeros[0], zeros != 0)


def test_torch_logits_take_the_fast_path_through_their_numpy_view(monkeypatch) -> None:
    """A plain CPU tensor is viewed by the fast path itself (Tensor.numpy(): the
    N = 1 torch actor's step); one that needs a gradient is taken as its
    detached view, the view the general path's as_array makes."""
    torch = pytest.importorskip("torch")
    from fastppo.sampling import categorical

    real = categorical._fast
    taken: list[bool] = []

    class Spy:
        def sample_categorical(self, *args):
            res = real.sample_categorical(*args)
            taken.append(res is not None)
            return res

        def __getattr__(self, name):
            return getattr(real, name)

    monkeypatch.setattr(categorical, "_fast", Spy())
    x = np.random.default_rng(0).standard_normal((1, 5)).astype(np.float32)
    want = fastppo.sample_categorical(x, seed=3, counter=4)
    taken.clear()
    got = fastppo.sample_categorical(torch.from_numpy(x), seed=3, counter=4)
    assert taken == [True]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    taken.clear()
    t = torch.from_numpy(x.copy()).requires_grad_(True)
    got = fastppo.sample_categorical(t, seed=3, counter=4)
    assert taken == [True]  # taken as its detached view, as the general path takes it
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _spy_on_fast(monkeypatch: pytest.MonkeyPatch, sweep: str) -> list[bool]:
    """Record, per call of the fast path's ``sweep`` entry, whether it took the call."""
    from fastppo import advantages

    real = advantages._fast
    taken: list[bool] = []

    class Spy:
        def __getattr__(self, name):
            fn = getattr(real, name)
            if name != sweep:
                return fn

            def spied(*args):
                res = fn(*args)
                taken.append(res is not None)
                return res

            return spied

    monkeypatch.setattr(advantages, "_fast", Spy())
    return taken


@pytest.mark.parametrize("sweep", ["gae", "vtrace", "discounted_returns"])
def test_torch_sweep_inputs_take_the_fast_path_through_their_numpy_views(
    sweep, monkeypatch
) -> None:
    torch = pytest.importorskip("torch")
    taken = _spy_on_fast(monkeypatch, sweep)
    rng = np.random.default_rng(5)
    arrays = _case(rng, 9, 4, np.float32)
    r, v, fv, te, tr, lv, blp, tlp, valid = arrays
    t = torch.from_numpy
    calls = {
        "gae": lambda f: fastppo.gae(f(r), f(v), f(lv), f(te), f(tr), valid=f(valid)),
        "vtrace": lambda f: fastppo.vtrace(f(blp), f(tlp), f(r), f(v), f(lv), f(te)),
        "discounted_returns": lambda f: fastppo.discounted_returns(
            f(r), f(lv), f(te), f(tr), final_values=f(fv)
        ),
    }
    want = calls[sweep](lambda a: a)
    taken.clear()
    got = calls[sweep](t)
    assert taken == [True]  # viewed by the fast path itself: no retry
    for g, w in zip(_tup(got), _tup(want)):
        np.testing.assert_array_equal(g, w)
    # float flags in a tensor: converted from their view
    taken.clear()
    got = calls[sweep](lambda a: t(a.astype(np.float32)) if a.dtype == bool else t(a))
    assert taken == [True]
    for g, w in zip(_tup(got), _tup(want)):
        np.testing.assert_array_equal(g, w)
    # a tensor that needs a gradient: taken as its detached view
    taken.clear()
    got = calls[sweep](lambda a: t(a.copy()).requires_grad_(a.dtype.kind == "f"))
    assert taken == [True]
    for g, w in zip(_tup(got), _tup(want)):
        np.testing.assert_array_equal(g, w)


def _tensor_forms(torch, a: np.ndarray) -> dict[str, object]:
    """The tensor layouts a framework hands over, each holding ``a``'s values."""
    t = torch.from_numpy
    if a.ndim == 1:  # a strided view past the storage start
        wide = np.zeros(2 * a.shape[0] + 1, a.dtype)
        wide[1::2] = a
        strided = t(wide)[1::2]
    else:
        wide = np.zeros((a.shape[0] + 1, 2 * a.shape[1] + 1), a.dtype)
        wide[1:, 1::2] = a
        strided = t(wide)[1:, 1::2]
    forms: dict[str, object] = {
        "C order": t(a.copy()),
        "offset and steps": strided,
        "needs a gradient": t(a.copy()).requires_grad_(a.dtype.kind == "f"),
    }
    if a.ndim == 2:
        forms["Fortran order"] = t(np.asfortranarray(a))
        forms["Fortran order, offset"] = t(np.asfortranarray(wide))[1:, 1::2]
    return forms


@pytest.mark.parametrize("sweep", ["gae", "vtrace", "discounted_returns"])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(9, 4), (7, 1), (6,)])
def test_sweeps_read_tensors_of_every_layout(sweep, dt, shape, monkeypatch) -> None:
    """The sweeps' fast path reads each tensor's DLPack description (no ndarray
    made): every layout, alone or mixed with ndarrays, gives the numpy call's
    bits; Fortran-ordered tensors run batch-major where every 2-D input is;
    strided ones are copied in the sweep's order; float flags converted."""
    torch = pytest.importorskip("torch")
    taken = _spy_on_fast(monkeypatch, sweep)
    rng = np.random.default_rng(11)
    r, v, fv, te, tr, lv, blp, tlp, valid = _case(rng, shape[0], shape[-1], dt, len(shape) == 1)
    if len(shape) == 1:
        lv = lv.reshape(())  # a 0-D last value for a 1-D rollout

    def call(f, g=None):
        g = g or f
        if sweep == "gae":
            return fastppo.gae(f(r), f(v), g(lv), g(te), f(tr), valid=g(valid))
        if sweep == "vtrace":
            return fastppo.vtrace(f(blp), g(tlp), f(r), g(v), f(lv), g(te), gamma=0.9)
        return fastppo.discounted_returns(f(r), g(lv), f(te), g(tr), final_values=f(fv))

    want = call(lambda a: a)
    for name in _tensor_forms(torch, r):

        def form(a, name=name):
            if a.ndim < len(shape) or (a.ndim == 1 and name.startswith("Fortran")):
                return torch.from_numpy(a.copy())
            return _tensor_forms(torch, a)[name]

        for mixed in (False, True):
            taken.clear()
            got = call(form, (lambda a: a) if mixed else None)
            # Fortran beside C-ordered arrays is no batch-major call: the
            # general path copies it to time-major, as it does ndarrays
            assert taken[0] or (mixed and name.startswith("Fortran")), (name, mixed)
            for gv, wv in zip(_tup(got), _tup(want)):
                assert gv.dtype == wv.dtype and gv.shape == wv.shape, (name, mixed)
                np.testing.assert_array_equal(gv, wv, err_msg=f"{name} mixed={mixed}")
    # float 0/1 flags in tensors of both layouts
    for layout in (np.ascontiguousarray, np.asfortranarray):
        taken.clear()
        got = call(lambda a, o=layout: torch.from_numpy(o(a.astype(dt) if a.dtype == bool else a)))
        assert taken == [True]
        for gv, wv in zip(_tup(got), _tup(want)):
            np.testing.assert_array_equal(gv, wv)


def test_sweep_outputs_over_an_input_tensor_are_refused() -> None:
    """An ``out=`` buffer over a tensor input's memory is refused before anything is
    written: the fast path records tensors' spans as it does ndarrays'."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    r, v, fv, te, tr, lv, blp, tlp, valid = _case(rng, 6, 3, np.float32)
    tv = torch.from_numpy(v.copy())
    over = _fast.ndarray_of(tv)
    before = over.copy()
    with pytest.raises(ValueError, match="gae: out"):
        fastppo.gae(r, tv, lv, te, out=(over, np.empty_like(r)))
    np.testing.assert_array_equal(over, before)


@pytest.mark.parametrize("sweep", ["gae", "vtrace", "discounted_returns"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_flags_take_the_fast_path_as_uint8(sweep, dtype, monkeypatch) -> None:
    """Small float 0/1 flags are converted to uint8 by the fast path, with the
    bits of the bool call; a flag that is neither 0 nor 1 is left to the
    general path, which names it."""
    taken = _spy_on_fast(monkeypatch, sweep)
    rng = np.random.default_rng(6)
    r, v, fv, te, tr, lv, blp, tlp, valid = _case(rng, 9, 4, np.float32)
    calls = {
        "gae": lambda f: fastppo.gae(r, v, lv, f(te), f(tr), valid=f(valid)),
        "vtrace": lambda f: fastppo.vtrace(blp, tlp, r, v, lv, f(te)),
        "discounted_returns": lambda f: fastppo.discounted_returns(
            r, lv, f(te), f(tr), final_values=fv
        ),
    }
    want = calls[sweep](lambda a: a)
    taken.clear()
    got = calls[sweep](lambda a: a.astype(dtype))
    assert taken == [True]  # converted to uint8 by the fast path itself
    for g, w in zip(_tup(got), _tup(want)):
        np.testing.assert_array_equal(g, w)

    def half(a: np.ndarray) -> np.ndarray:
        f = a.astype(dtype)
        f[0, 0] = 0.5
        return f

    taken.clear()
    with pytest.raises(ValueError, match=r"terminated must be 0/1 flags, got value .*0\.5"):
        calls[sweep](half)
    assert taken == [False]  # never retried: the general path explains
