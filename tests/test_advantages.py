"""GAE, V-trace and discounted returns against hand-worked cases, the reference and identities."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import fastppo
from fastppo import _checks as C
from fastppo._cy import _fast
from fastppo.reference import advantages as R

DTYPES = [np.float32, np.float64]
TOL = {np.float32: dict(rtol=2e-5, atol=2e-5), np.float64: dict(rtol=1e-12, atol=1e-12)}


def make(rng, T, N, dt=np.float64, p_term=0.1, p_trunc=0.1):
    r = rng.standard_normal((T, N)).astype(dt)
    v = rng.standard_normal((T, N)).astype(dt)
    lv = rng.standard_normal(N).astype(dt)
    te = rng.random((T, N)) < p_term
    tr = (rng.random((T, N)) < p_trunc) & ~te
    fv = rng.standard_normal((T, N)).astype(dt)
    return r, v, lv, te, tr, fv


@pytest.fixture(params=["serial", "parallel"])
def mode(request, force_parallel_sweeps):
    """Run each test through the serial build and, forced, the parallel build."""
    if request.param == "parallel":
        force_parallel_sweeps(1)
    return request.param


# ---------------------------------------------------------------- hand-worked


def test_gae_hand_worked():
    # T=3, one env, gamma=0.5, lambda=0.5; terminated at t=1, so t=2 starts a
    # new episode bootstrapping last_value=4.
    r = np.array([1.0, 2.0, 3.0])
    v = np.array([0.5, 1.0, 2.0])
    te = np.array([False, True, False])
    adv, ret = fastppo.gae(r, v, 4.0, te, gamma=0.5, gae_lambda=0.5)
    d2 = 3.0 + 0.5 * 4.0 - 2.0  # 3
    d1 = 2.0 + 0.0 - 1.0  # 1 (terminated: no bootstrap)
    d0 = 1.0 + 0.5 * 1.0 - 0.5  # 1
    a1 = d1  # trace cut at t=1
    a0 = d0 + 0.25 * a1
    np.testing.assert_allclose(adv, [a0, a1, d2])
    np.testing.assert_allclose(ret, [a0 + 0.5, a1 + 1.0, d2 + 2.0])


def test_gae_hand_worked_truncation_and_valid():
    # next-step autoreset: step 0 truncates, row 1 is the reset row (holds
    # V(final obs) = 10), rows 2.. a new episode.
    r = np.array([1.0, 0.0, 2.0])
    v = np.array([3.0, 10.0, 1.0])
    te = np.zeros(3, bool)
    tr = np.array([True, False, False])
    valid = np.array([True, False, True])
    adv, ret = fastppo.gae(r, v, 5.0, te, tr, valid=valid, gamma=0.9, gae_lambda=0.8)
    a2 = 2.0 + 0.9 * 5.0 - 1.0
    a0 = 1.0 + 0.9 * 10.0 - 3.0  # bootstraps the final obs, trace cut
    np.testing.assert_allclose(adv, [a0, 0.0, a2])
    np.testing.assert_allclose(ret, [a0 + 3.0, 10.0, a2 + 1.0])


def test_vtrace_hand_worked():
    # T=2, one env, gamma=0.5, rho_0 = 2 (clipped to 1 / 1.5), rho_1 = 0.5.
    r = np.array([1.0, 2.0])
    v = np.array([1.0, 1.0])
    blp = np.log([0.25, 0.5])
    tlp = np.log([0.5, 0.25])
    vs, pg = fastppo.vtrace(
        blp,
        tlp,
        r,
        v,
        2.0,
        np.zeros(2, bool),
        gamma=0.5,
        rho_bar=1.0,
        c_bar=1.0,
        pg_rho_bar=1.5,
    )
    d1 = 0.5 * (2.0 + 0.5 * 2.0 - 1.0)  # rho_1 = 0.5
    vs1 = 1.0 + d1
    d0 = 1.0 * (1.0 + 0.5 * 1.0 - 1.0)
    vs0 = 1.0 + d0 + 0.5 * 1.0 * (vs1 - 1.0)  # c_0 = min(1, 2) = 1
    pg1 = 0.5 * (2.0 + 0.5 * 2.0 - 1.0)
    pg0 = 1.5 * (1.0 + 0.5 * vs1 - 1.0)
    np.testing.assert_allclose(vs, [vs0, vs1])
    np.testing.assert_allclose(pg, [pg0, pg1])


def test_vtrace_mixed_log_prob_widths():
    """Log-probs of either width: a float64 sweep widens float32 ones exactly; a
    float32 sweep forms float64 log-ratios and rounds them once."""
    rng = np.random.default_rng(5)
    r, v, lv, te, tr, fv = make(rng, 30, 6)
    blp = rng.uniform(-60, -40, r.shape)
    tlp = blp + rng.normal(0, 0.3, r.shape)
    b32, t32 = blp.astype(np.float32), tlp.astype(np.float32)
    got = fastppo.vtrace(b32, tlp, r, v, lv, te, tr, final_values=fv)
    same = fastppo.vtrace(b32.astype(np.float64), tlp, r, v, lv, te, tr, final_values=fv)
    for g, s in zip(got, same):
        np.testing.assert_array_equal(g, s)
    r32, v32, lv32, fv32 = (x.astype(np.float32) for x in (r, v, lv, fv))
    ref = R.vtrace(blp, tlp, r32, v32, lv32, te, tr, final_values=fv32)
    got32 = fastppo.vtrace(blp, tlp, r32, v32, lv32, te, tr, final_values=fv32)
    for g, e in zip(got32, ref):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, e, rtol=2e-6, atol=2e-6)
    bad = blp.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match=r"vtrace: behavior_logp must be finite"):
        fastppo.vtrace(bad, t32, r32, v32, lv32, te)


def test_discounted_returns_hand_worked():
    r = np.array([1.0, 1.0, 1.0, 1.0])
    te = np.array([False, True, False, False])
    tr = np.array([False, False, True, False])
    fv = np.array([0.0, 0.0, 8.0, 0.0])
    g = fastppo.discounted_returns(r, 2.0, te, tr, final_values=fv, gamma=0.5)
    np.testing.assert_allclose(g, [1.5, 1.0, 5.0, 2.0])


# ---------------------------------------------------------------- reference


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("T,N", [(1, 1), (1, 5), (7, 1), (33, 40), (200, 3)])
@pytest.mark.parametrize("variant", ["plain", "valid", "final", "final+valid"])
def test_against_reference(mode, dt, T, N, variant):
    rng = np.random.default_rng(T * 1000 + N)
    r, v, lv, te, tr, fv = make(rng, T, N, dt)
    kw: dict = {}
    if variant != "plain":
        kw["truncated"] = tr
    if "valid" in variant:
        kw["valid"] = fastppo.next_step_valid(te, tr, prev_done=rng.random(N) < 0.3)
    if "final" in variant:
        kw["final_values"] = fv
    g, lam = 0.97, 0.9
    a, ret = fastppo.gae(r, v, lv, te, gamma=g, gae_lambda=lam, **kw)
    a_ref, ret_ref = R.gae(r, v, lv, te, gamma=g, gae_lambda=lam, **kw)
    assert a.dtype == dt and ret.dtype == dt and a.shape == (T, N)
    np.testing.assert_allclose(a, a_ref, **TOL[dt])
    np.testing.assert_allclose(ret, ret_ref, **TOL[dt])

    blp = (rng.standard_normal((T, N)) * 0.5).astype(dt)
    tlp = (rng.standard_normal((T, N)) * 0.5).astype(np.float64)  # either width
    vkw = dict(gamma=g, lam=lam, rho_bar=1.3, c_bar=0.9, pg_rho_bar=2.0)
    vs, pg = fastppo.vtrace(blp, tlp, r, v, lv, te, **kw, **vkw)
    vs_ref, pg_ref = R.vtrace(blp, tlp, r, v, lv, te, **kw, **vkw)
    np.testing.assert_allclose(vs, vs_ref, **TOL[dt])
    np.testing.assert_allclose(pg, pg_ref, **TOL[dt])

    kw["final_values"] = fv
    kw.setdefault("truncated", tr)
    g_ret = fastppo.discounted_returns(r, lv, te, gamma=g, **kw)
    np.testing.assert_allclose(g_ret, R.discounted_returns(r, lv, te, gamma=g, **kw), **TOL[dt])


def _batch_major(a):
    """[T, N] data as torchrl and tianshou hold it: [N, T] C-contiguous, passed transposed."""
    return np.ascontiguousarray(a.T).T


@pytest.mark.parametrize("dt", DTYPES)
# register tiles (kernels/tiles.py) cover 16 float32 or 8 float64 envs x steps:
# whole tiles, leftover envs and steps, T a multiple of a tile, T below one;
# rows a multiple of 2 or 4 KiB apart (512 and 1024 steps) run narrow tiles
# (kernels.tiles.NARROW; vtrace's always, on scratch rows where rows alias),
# per kernels.gae.rows_alias, beside four chains and single envs;
# rollouts shorter than kernels.gae.TILE_MIN tiles run chains on blocks of many envs
@pytest.mark.parametrize(
    "T,N",
    [
        (2, 2), (37, 5), (33, 40), (200, 9), (16, 16), (64, 50), (300, 20), (1030, 17),
        (512, 21), (1024, 23), (3, 17), (5, 40), (8, 1101),
    ],
)  # fmt: skip
@pytest.mark.parametrize("variant", ["plain", "valid", "final", "final+valid"])
def test_gae_batch_major_equals_time_major_bit_for_bit(mode, dt, T, N, variant):
    rng = np.random.default_rng(T * 7 + N)
    r, v, lv, te, tr, fv = make(rng, T, N, dt)
    r[0, 0] = -0.0  # a signed zero must survive as it does time-major
    kw: dict = {}
    if variant != "plain":
        kw["truncated"] = tr
    if "valid" in variant:
        kw["valid"] = fastppo.next_step_valid(te, tr, prev_done=rng.random(N) < 0.3)
    if "final" in variant:
        kw["final_values"] = fv
    want = fastppo.gae(r, v, lv, te, gamma=0.97, gae_lambda=0.9, **kw)
    bm = {k: _batch_major(x) for k, x in kw.items()}
    args = (_batch_major(r), _batch_major(v), lv, _batch_major(te))
    got = fastppo.gae(*args, gamma=0.97, gae_lambda=0.9, **bm)
    for g_, w in zip(got, want):
        assert g_.shape == (T, N) and g_.flags.f_contiguous
        assert np.ascontiguousarray(g_).tobytes() == w.tobytes()
    # the caller's buffers: Fortran-ordered ones are written in place, others through scratch
    for order in "FC":
        out = (np.full((T, N), 7, dt, order=order), np.full((T, N), 7, dt, order=order))
        res = fastppo.gae(*args, gamma=0.97, gae_lambda=0.9, **bm, out=out)
        assert res[0] is out[0] and res[1] is out[1]
        for g_, w in zip(res, want):
            assert np.ascontiguousarray(g_).tobytes() == w.tobytes()
    # mixed layouts run time-major, with the same bits
    mixed = fastppo.gae(_batch_major(r), v, lv, te, gamma=0.97, gae_lambda=0.9, **kw)
    assert mixed[0].tobytes() == want[0].tobytes()
    # V-trace, either log-prob width (a float64 one against float32 data is
    # folded into one float32 log-ratio first)
    for tdt in (dt, np.float64):
        blp = (rng.standard_normal((T, N)) * 0.5).astype(dt)
        tlp = (rng.standard_normal((T, N)) * 0.5).astype(tdt)
        vkw = dict(gamma=0.97, lam=0.9, rho_bar=1.3, c_bar=0.9, pg_rho_bar=2.0)
        want_v = fastppo.vtrace(blp, tlp, r, v, lv, te, **kw, **vkw)
        got_v = fastppo.vtrace(
            _batch_major(blp), _batch_major(tlp), *args[:2], lv, args[3], **bm, **vkw
        )
        for g_, w in zip(got_v, want_v):
            assert g_.flags.f_contiguous
            assert np.ascontiguousarray(g_).tobytes() == w.tobytes()
    # discounted returns: without truncation (cut steps bootstrap from 0, no
    # bootstrap tile), then with final values where truncated
    nk = {k: x for k, x in kw.items() if k == "valid"}
    want_g = fastppo.discounted_returns(r, lv, te, gamma=0.97, **nk)
    got_g = fastppo.discounted_returns(
        _batch_major(r), lv, _batch_major(te), gamma=0.97,
        **{k: _batch_major(x) for k, x in nk.items()},
    )  # fmt: skip
    assert np.ascontiguousarray(got_g).tobytes() == want_g.tobytes()
    kw["final_values"] = fv
    kw.setdefault("truncated", tr)
    bm = {k: _batch_major(x) for k, x in kw.items()}
    want_g = fastppo.discounted_returns(r, lv, te, gamma=0.97, **kw)
    got_g = fastppo.discounted_returns(_batch_major(r), lv, _batch_major(te), gamma=0.97, **bm)
    assert got_g.flags.f_contiguous
    assert np.ascontiguousarray(got_g).tobytes() == want_g.tobytes()
    out_g = np.full((T, N), 7, dt, order="F")
    res_g = fastppo.discounted_returns(_batch_major(r), lv, _batch_major(te), out=out_g, **bm)
    assert res_g is out_g


@pytest.mark.parametrize("dt", DTYPES)
# time-major rows of few envs (under 128 bytes) are swept as one flat run
# (kernels.sweep.few_envs); T = 3000 spans several of its chunks at N = 1, 2
@pytest.mark.parametrize("T", [1, 2, 37, 3000])
@pytest.mark.parametrize("variant", ["plain", "valid", "final", "final+valid"])
def test_sweeps_of_few_envs_equal_the_same_envs_of_a_wide_rollout(mode, dt, T, variant):
    """Envs are independent: each env of a narrow rollout gets the bits it gets
    as a column of a 64-env one (whose rows run the row sweeps)."""
    rng = np.random.default_rng(T)
    r, v, lv, te, tr, fv = make(rng, T, 64, dt)
    blp = (rng.standard_normal((T, 64)) * 0.5).astype(dt)
    tlp = (rng.standard_normal((T, 64)) * 0.5).astype(dt)
    r[0, 0] = -0.0
    kw: dict = {"truncated": tr, "final_values": fv}
    if "valid" in variant:
        kw["valid"] = fastppo.next_step_valid(te, tr, prev_done=rng.random(64) < 0.3)
    if variant == "valid":
        del kw["final_values"]
    if variant == "plain":
        kw = {}
    vkw = dict(gamma=0.97, lam=0.9, rho_bar=1.3, c_bar=0.9, pg_rho_bar=2.0)
    rkw = {**kw, "truncated": tr, "final_values": fv}
    wide = (
        fastppo.gae(r, v, lv, te, gamma=0.97, gae_lambda=0.9, **kw),
        fastppo.vtrace(blp, tlp, r, v, lv, te, **kw, **vkw),
        (fastppo.discounted_returns(r, lv, te, gamma=0.97, **rkw),),
    )
    for N in (1, 2, 3, 7, 15, 16, 31):

        def cut(x, N=N):
            return np.ascontiguousarray(x[:, :N]) if x.ndim == 2 else x[:N].copy()

        k, kr = {n: cut(x) for n, x in kw.items()}, {n: cut(x) for n, x in rkw.items()}
        a = (cut(r), cut(v), cut(lv), cut(te))
        narrow = (
            fastppo.gae(*a, gamma=0.97, gae_lambda=0.9, **k),
            fastppo.vtrace(cut(blp), cut(tlp), *a, **k, **vkw),
            (fastppo.discounted_returns(a[0], a[2], a[3], gamma=0.97, **kr),),
        )
        for got, want in zip(narrow, wide):
            for g_, w in zip(got, want):
                assert g_.tobytes() == np.ascontiguousarray(w[:, :N]).tobytes(), N
        if N == 1:  # 1-D inputs: the same bits again
            one = fastppo.gae(
                a[0][:, 0], a[1][:, 0], a[2], a[3][:, 0], gamma=0.97, gae_lambda=0.9,
                **{n: x[:, 0] for n, x in k.items()},
            )  # fmt: skip
            assert one[0].tobytes() == np.ascontiguousarray(wide[0][0][:, 0]).tobytes()


def test_gae_batch_major_refuses_non_finite_input_and_writes_nothing():
    rng = np.random.default_rng(3)
    r, v, lv, te, _, _ = make(rng, 40, 8)
    rb = _batch_major(r)
    rb[31, 5] = np.nan
    out = (np.zeros((40, 8), order="F"), np.zeros((40, 8), order="F"))
    msg = r"gae: rewards must be finite, got nan at index \(31, 5\)"
    with pytest.raises(ValueError, match=msg):
        fastppo.gae(rb, _batch_major(v), lv, _batch_major(te), out=out)
    assert not out[0].any() and not out[1].any()


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["time-major", "batch-major"])
def test_returns_are_advantages_plus_values_bit_for_bit(dt, layout, mode):
    """The documented identity ``returns = advantages + values`` holds exactly,
    in the inputs' dtype, through cut traces, invalid rows and both layouts
    (the sweeps once added the carry into a ``delta + V`` row instead, which
    rounds differently in about a quarter of float32 elements)."""
    rng = np.random.default_rng(21)
    T, N = 300, 100
    r, v, lv, te, tr, fv = make(rng, T, N, dt)
    valid = fastppo.next_step_valid(te, tr)
    if layout == "batch-major":
        r, v, te, tr, fv, valid = (np.ascontiguousarray(x.T).T for x in (r, v, te, tr, fv, valid))
    for kw in ({"final_values": fv}, {"valid": valid}):
        adv, ret = fastppo.gae(r, v, lv, te, tr, **kw)
        np.testing.assert_array_equal(ret, adv + v)
        ref_adv, _ = R.gae(r, v, lv, te, tr, **kw)
        tol = 1e-4 if dt == np.float32 else 1e-12
        np.testing.assert_allclose(adv, ref_adv, rtol=tol, atol=tol)


@pytest.mark.parametrize("dt", DTYPES)
def test_serial_parallel_bit_identical(dt, force_parallel_sweeps):
    rng = np.random.default_rng(5)
    T, N = 300, 100
    r, v, lv, te, tr, fv = make(rng, T, N, dt)
    valid = fastppo.next_step_valid(te, tr)
    blp = rng.standard_normal((T, N)).astype(dt)
    serial = (
        fastppo.gae(r, v, lv, te, tr, valid=valid),
        fastppo.vtrace(blp, v, r, v, lv, te, tr, final_values=fv, lam=0.9),
        fastppo.discounted_returns(r, lv, te, tr, final_values=fv),
    )
    force_parallel_sweeps(16)
    par = (
        fastppo.gae(r, v, lv, te, tr, valid=valid),
        fastppo.vtrace(blp, v, r, v, lv, te, tr, final_values=fv, lam=0.9),
        fastppo.discounted_returns(r, lv, te, tr, final_values=fv),
    )
    for s, p in zip(serial, par):
        for x, y in zip(s if isinstance(s, tuple) else (s,), p if isinstance(p, tuple) else (p,)):
            assert x.tobytes() == y.tobytes()


def _in_line(x, off):
    """A copy of ``x`` whose data starts ``off`` bytes into a 64-byte line."""
    buf = np.empty(x.nbytes + 128, np.uint8)
    k = (-buf.ctypes.data) % 64 + off
    y = buf[k : k + x.nbytes].view(x.dtype).reshape(x.shape)
    y[...] = x
    return y


@pytest.mark.parametrize("dt", DTYPES)
# rows a whole number of lines long or not (each row then starts elsewhere in
# a line); T spanning several time chunks, the last one partial
@pytest.mark.parametrize("T,N", [(70, 40), (33, 64), (65, 33)])
def test_sweeps_give_the_same_bits_wherever_the_arrays_lie_in_a_line(
    dt, T, N, force_parallel_sweeps
):
    """A serial sweep of whole rows splits its runs where the outputs' lines
    start (kernels.sweep.head), so which elements its vector loops take depends
    on where the arrays lie. Every offset into a line, for the inputs and the
    outputs apart, gives the bits of the threaded sweep, whose blocks of envs
    run row by row."""
    rng = np.random.default_rng(T + N)
    r, v, lv, te, tr, fv = make(rng, T, N, dt)
    blp = (rng.standard_normal((T, N)) * 0.5).astype(dt)
    valid = fastppo.next_step_valid(te, tr, prev_done=rng.random(N) < 0.3)
    kws = ({}, {"truncated": tr, "final_values": fv, "valid": valid})

    def calls(r, v, blp, kw, outs=None):
        o = outs or (None,) * 5
        a = fastppo.gae(r, v, lv, te, gamma=0.97, gae_lambda=0.9, out=outs and o[0:2], **kw)
        b = fastppo.vtrace(blp, v, r, v, lv, te, lam=0.9, out=outs and o[2:4], **kw)
        rkw = {**kw, "truncated": tr, "final_values": fv}
        g = fastppo.discounted_returns(r, lv, te, gamma=0.97, out=o[4], **rkw)
        return [x.tobytes() for x in (*a, *b, g)]

    item = np.dtype(dt).itemsize
    got = []
    for off in range(0, 64, item):
        args = (_in_line(r, off), _in_line(v, off), _in_line(blp, off))
        out_off = (off + 3 * item) % 64
        outs = tuple(_in_line(np.zeros((T, N), dt), out_off) for _ in range(5))
        for kw in kws:
            got.append((off, calls(*args, kw)))
            got.append((off, calls(*args, {k: _in_line(x, off) for k, x in kw.items()}, outs)))
    force_parallel_sweeps(16)
    want = [calls(r, v, blp, kw) for kw in kws]
    for i, (off, g) in enumerate(got):
        w = want[i // 2 % 2]
        assert [x == y for x, y in zip(g, w)] == [True] * 5, (off, i)


_FORK_SCRIPT = """
import os, numpy as np, fastppo
rng = np.random.default_rng(0)
T, N = 256, 512
r = rng.standard_normal((T, N)).astype(np.float32)
lv, te, z = r[0].copy(), np.zeros((T, N), bool), np.zeros((T, N), np.float32)
a = fastppo.vtrace(z, z, r, r, lv, te)[0]  # on OpenMP threads
x = rng.standard_normal((40000, 9)).astype(np.float32)
s = fastppo.sample_categorical(x, seed=1, counter=2)[0]  # Numba's parallel build
pid = os.fork()
if pid == 0:
    b = fastppo.vtrace(z, z, r, r, lv, te)[0]
    g = fastppo.gae(r, r, lv, te)[0]
    t = fastppo.sample_categorical(x, seed=1, counter=2)[0]
    same = a.tobytes() == b.tobytes() and s.tobytes() == t.tobytes()
    os._exit(0 if same and np.isfinite(g).all() else 3)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() here")
def test_a_forked_child_runs_serially_instead_of_hanging() -> None:
    """GNU OpenMP's threads do not survive fork(): a child of a process that
    ran a threaded sweep and a parallel sampler runs them serially (the same
    bits) instead of waiting forever (or being ended by Numba's omp layer)."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, FASTPPO_SERIAL_MAX_THREADS="0", NUMBA_NUM_THREADS="2")
    env["PYTHONPATH"] = str(root)
    out = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert out.stdout.strip().splitlines()[-1] == "0", out.stderr


_NRT_SCRIPT = """
import numpy as np
from numba.core.runtime import rtsys
import fastppo
def bm(a):
    return np.ascontiguousarray(a.T).T
rng = np.random.default_rng(0)
for T, N in ((1024, 21), (100, 21)):  # the scratch path and the caller's rows
    r = rng.standard_normal((T, N)).astype(np.float32)
    te = rng.random((T, N)) < 0.01
    lv = r[0].copy()
    def calls():
        fastppo.gae(bm(r), bm(r), lv, bm(te))
        fastppo.vtrace(bm(r), bm(r), bm(r), bm(r), lv, bm(te))
        fastppo.discounted_returns(bm(r), lv, bm(te))
    calls()
    s0 = rtsys.get_allocation_stats()
    for _ in range(5):
        calls()
    s1 = rtsys.get_allocation_stats()
    assert s1.alloc - s0.alloc > 0, "no scratch allocated: the stats are off"
    live = (s1.alloc - s1.free) - (s0.alloc - s0.free)
    live_mi = (s1.mi_alloc - s1.mi_free) - (s0.mi_alloc - s0.mi_free)
    print(live, live_mi)
"""


def test_batch_major_scratch_is_freed():
    """The batch-major sweeps' scratch (and ``kernels.tiles.readonly``'s retyped
    views of it) is released: Numba's allocation counters balance over calls."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, NUMBA_NRT_STATS="1", PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", _NRT_SCRIPT],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    assert out.stdout.split() == ["0", "0", "0", "0"], out.stdout + out.stderr


# ---------------------------------------------------------------- identities


@pytest.mark.parametrize("dt", DTYPES)
def test_lambda_one_is_discounted_return_minus_value(mode, dt):
    rng = np.random.default_rng(1)
    r, v, lv, te, tr, fv = make(rng, 64, 40, dt)
    a, ret = fastppo.gae(r, v, lv, te, tr, final_values=fv, gamma=0.95, gae_lambda=1.0)
    g = fastppo.discounted_returns(r, lv, te, tr, final_values=fv, gamma=0.95)
    np.testing.assert_allclose(ret, g, **TOL[dt])
    np.testing.assert_allclose(a, g - v, **TOL[dt])


@pytest.mark.parametrize("dt", DTYPES)
def test_lambda_zero_is_td_error(mode, dt):
    rng = np.random.default_rng(2)
    r, v, lv, te, tr, fv = make(rng, 50, 40, dt)
    a, _ = fastppo.gae(r, v, lv, te, tr, final_values=fv, gamma=0.9, gae_lambda=0.0)
    nv = np.vstack([v[1:], lv[None]])
    boot = np.where(te, 0.0, np.where(tr, fv, nv))
    np.testing.assert_allclose(a, r + 0.9 * boot - v, **TOL[dt])


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("lam", [0.0, 0.7, 1.0])
def test_on_policy_vtrace_equals_gae(mode, dt, lam):
    rng = np.random.default_rng(3)
    r, v, lv, te, tr, fv = make(rng, 80, 40, dt)
    valid = fastppo.next_step_valid(te, tr)
    logp = rng.standard_normal((80, 40)).astype(dt)
    vs, pg = fastppo.vtrace(
        logp,
        logp,
        r,
        v,
        lv,
        te,
        tr,
        valid=valid,
        gamma=0.97,
        lam=lam,
        rho_bar=1.0,
        c_bar=1.0,
        pg_rho_bar=1.0,
    )
    a, _ = fastppo.gae(r, v, lv, te, tr, valid=valid, gamma=0.97, gae_lambda=lam)
    np.testing.assert_allclose(vs - v, a, **TOL[dt])
    if lam == 1.0:  # the pg advantage bootstraps on vs_{t+1} = GAE(1) target
        np.testing.assert_allclose(pg, a, **TOL[dt])


# ---------------------------------------------------------------- edge cases


def test_edge_cases(mode):
    rng = np.random.default_rng(4)
    T, N = 6, 3
    r, v, lv, _, _, fv = make(rng, T, N)
    cases = {
        "all terminated": dict(terminated=np.ones((T, N), bool)),
        "none done": dict(terminated=np.zeros((T, N), bool)),
        "truncation at the last step": dict(
            terminated=np.zeros((T, N), bool),
            truncated=np.eye(T, N, k=N - T, dtype=bool) | (np.arange(T)[:, None] == T - 1),
            final_values=fv,
        ),
        "truncation then invalid row": dict(
            terminated=np.zeros((T, N), bool),
            truncated=np.arange(T)[:, None].repeat(N, 1) == 2,
            valid=np.arange(T)[:, None].repeat(N, 1) != 3,
        ),
        "invalid first row": dict(
            terminated=np.zeros((T, N), bool), valid=np.arange(T)[:, None].repeat(N, 1) != 0
        ),
    }
    for name, kw in cases.items():
        te = kw.pop("terminated")
        for g in (0.0, 1.0, 0.9):
            for lam in (0.0, 1.0):
                a, ret = fastppo.gae(r, v, lv, te, gamma=g, gae_lambda=lam, **kw)
                a2, ret2 = R.gae(r, v, lv, te, gamma=g, gae_lambda=lam, **kw)
                np.testing.assert_allclose(a, a2, rtol=1e-12, atol=1e-12, err_msg=name)
                np.testing.assert_allclose(ret, ret2, rtol=1e-12, atol=1e-12, err_msg=name)
    # all terminated: advantage is the one-step reward minus value
    a, _ = fastppo.gae(r, v, lv, np.ones((T, N), bool), gamma=0.9, gae_lambda=0.9)
    np.testing.assert_allclose(a, r - v)
    # gamma 0: advantage is r - V whatever lambda
    a, _ = fastppo.gae(r, v, lv, np.zeros((T, N), bool), gamma=0.0, gae_lambda=1.0)
    np.testing.assert_allclose(a, r - v)
    # invalid rows: advantage 0, return = value
    valid = rng.random((T, N)) < 0.5
    a, ret = fastppo.gae(r, v, lv, np.zeros((T, N), bool), valid=valid)
    assert np.all(a[~valid] == 0) and np.all(ret[~valid] == v[~valid])


def test_one_d_inputs_and_scalar_last_value():
    rng = np.random.default_rng(6)
    r, v, lv, te, tr, fv = make(rng, 20, 1)
    a2, ret2 = fastppo.gae(r, v, lv, te, tr, final_values=fv)
    for last in (float(lv[0]), lv, np.float64(lv[0])):
        a1, ret1 = fastppo.gae(r[:, 0], v[:, 0], last, te[:, 0], tr[:, 0], final_values=fv[:, 0])
        assert a1.shape == (20,)
        np.testing.assert_array_equal(a1, a2[:, 0])
        np.testing.assert_array_equal(ret1, ret2[:, 0])
    vs, pg = fastppo.vtrace(v[:, 0], v[:, 0], r[:, 0], v[:, 0], lv, te[:, 0])
    assert vs.shape == pg.shape == (20,)
    g = fastppo.discounted_returns(r[:, 0], lv[0], te[:, 0])
    assert g.shape == (20,)


@pytest.mark.parametrize("flag_dtype", [np.bool_, np.uint8, np.float32, np.float64])
def test_flag_dtypes(flag_dtype):
    rng = np.random.default_rng(7)
    r, v, lv, te, tr, fv = make(rng, 30, 4)
    ref = fastppo.gae(r, v, lv, te, tr, final_values=fv)
    got = fastppo.gae(r, v, lv, te.astype(flag_dtype), tr.astype(flag_dtype), final_values=fv)
    np.testing.assert_array_equal(ref[0], got[0])


@pytest.mark.parametrize("dt", [np.float16, np.float32, np.float64, np.longdouble])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_float_flags_convert_exactly_and_refuse_anything_but_0_and_1(dt, layout):
    """The one-pass float-flag conversion: (x != 0) as bytes in the input's
    layout; every value other than 0, -0 and 1 refused, the first one named."""
    from fastppo import _checks as C

    rng = np.random.default_rng(17)
    te = rng.random((300, 70)) < 0.3
    x = te.astype(dt)
    x[0, 0] = -0.0  # a zero: not a flag
    x = {"C": x, "F": np.asfortranarray(x), "strided": np.repeat(x, 2, axis=1)[:, ::2]}[layout]
    got = C.flag_array("fn", "terminated", x, x.shape)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, te)
    tiny = np.finfo(dt).smallest_subnormal
    for bad in (0.5, 2.0, -1.0, np.nan, np.inf, -np.inf, tiny, 1 - np.finfo(dt).epsneg, 1e4):
        y = x.copy(order="K")
        y[123 % y.shape[0], 37] = bad
        with pytest.raises(ValueError, match=r"fn: terminated must be 0/1 flags, got value"):
            C.flag_array("fn", "terminated", y, y.shape)
    if dt in (np.float32, np.float64) and layout == "C":  # an unaligned view: copied first
        raw = np.zeros(x.nbytes + 1, np.uint8)[1:]
        u = raw.view(dt).reshape(x.shape)
        u[...] = x
        assert not u.flags.aligned
        np.testing.assert_array_equal(C.flag_array("fn", "terminated", u, u.shape), te)


def test_out_buffers_are_used_and_inputs_untouched():
    rng = np.random.default_rng(8)
    r, v, lv, te, tr, fv = make(rng, 30, 40, np.float32)
    copies = [x.copy() for x in (r, v, lv, te, tr, fv)]
    a, ret = np.empty_like(r), np.empty_like(r)
    out_a, out_ret = fastppo.gae(r, v, lv, te, tr, final_values=fv, out=(a, ret))
    assert out_a is a and out_ret is ret
    np.testing.assert_array_equal(a, fastppo.gae(r, v, lv, te, tr, final_values=fv)[0])
    vs, pg = np.empty_like(r), np.empty_like(r)
    res = fastppo.vtrace(v, v, r, v, lv, te, tr, final_values=fv, out=(vs, pg))
    assert res[0] is vs and np.shares_memory(res[1], pg)
    g = np.empty_like(r)
    assert fastppo.discounted_returns(r, lv, te, tr, final_values=fv, out=g) is g
    for x, c in zip((r, v, lv, te, tr, fv), copies):
        np.testing.assert_array_equal(x, c)


def test_read_only_and_non_contiguous_inputs():
    rng = np.random.default_rng(9)
    r, v, lv, te, tr, fv = make(rng, 40, 12)
    expect = fastppo.gae(r[::2, ::3], v[::2, ::3], lv[::3], te[::2, ::3])
    for x in (r, v, lv, te):
        x.setflags(write=False)
    got = fastppo.gae(r[::2, ::3], v[::2, ::3], lv[::3], te[::2, ::3])
    np.testing.assert_array_equal(got[0], expect[0])
    ref = R.gae(r[::2, ::3], v[::2, ::3], lv[::3], te[::2, ::3])
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12, atol=1e-12)
    # Fortran-ordered input and a non-contiguous out buffer
    buf = np.zeros((20, 8))
    a, ret = fastppo.gae(
        np.asfortranarray(r[:20, :4]),
        v[:20, :4],
        lv[:4],
        te[:20, :4],
        out=(buf[:, ::2], np.empty((20, 4))),
    )
    np.testing.assert_allclose(
        buf[:, ::2], R.gae(r[:20, :4], v[:20, :4], lv[:4], te[:20, :4])[0], rtol=1e-12, atol=1e-12
    )
    assert np.all(buf[:, 1::2] == 0)


def test_next_step_valid():
    te = np.array([[0, 1], [0, 0], [1, 0], [0, 0]], bool)
    tr = np.array([[1, 0], [0, 0], [0, 0], [0, 1]], bool)
    expect = np.array([[1, 1], [0, 0], [1, 1], [0, 1]], bool)
    np.testing.assert_array_equal(fastppo.next_step_valid(te, tr), expect)
    got = fastppo.next_step_valid(te, tr, prev_done=np.array([True, False]))
    np.testing.assert_array_equal(got[0], [False, True])
    np.testing.assert_array_equal(
        fastppo.next_step_valid(te[:, 0], tr[:, 0], prev_done=True)[0], False
    )
    np.testing.assert_array_equal(R.next_step_valid(te, tr), expect)


def _wide(a: np.ndarray) -> np.ndarray:
    w = np.zeros((a.shape[0], 2 * a.shape[1]), a.dtype)
    w[:, ::2] = a
    return w[:, ::2]


@pytest.mark.parametrize(("T", "N"), [(1, 3), (2, 1), (7, 5), (64, 33)])
def test_next_step_valid_in_every_layout_equals_the_reference(T, N):
    """The memory-order computation (N back in C order, one back in Fortran
    order with row 0 set after) in every layout and flag dtype; Fortran-ordered
    flags give a Fortran-ordered result, as the batch-major sweeps read it."""
    rng = np.random.default_rng(T * N)
    te = rng.random((T, N)) < 0.3
    tr = rng.random((T, N)) < 0.3
    pd = rng.random(N) < 0.5
    forms = {
        "C": (te, tr),
        "Fortran": (np.asfortranarray(te), np.asfortranarray(tr)),
        "batch-major .T": (np.ascontiguousarray(te.T).T, np.ascontiguousarray(tr.T).T),
        "mixed": (np.asfortranarray(te), tr),
        "mixed the other way": (te, np.asfortranarray(tr)),
        "strided": (_wide(te), _wide(tr)),
        "uint8": (te.astype(np.uint8), np.asfortranarray(tr.astype(np.uint8))),
        "float": (te.astype(np.float32), tr.astype(np.float64)),
    }
    for label, (a, b) in forms.items():
        for prev in (None, pd):
            got = fastppo.next_step_valid(a, b, prev_done=prev)
            np.testing.assert_array_equal(got, R.next_step_valid(te, tr, prev), err_msg=label)
            assert got.dtype == np.bool_
        if label in ("Fortran", "batch-major .T", "mixed") and T > 1 and N > 1:
            assert got.flags.f_contiguous and not got.flags.c_contiguous, label
    got = fastppo.next_step_valid(te[:, 0], tr[:, 0], prev_done=pd[0])
    np.testing.assert_array_equal(got, R.next_step_valid(te[:, 0], tr[:, 0], pd[0]))


@pytest.mark.parametrize(("T", "N"), [(1, 4), (9, 1), (33, 17), (300, 64)])
def test_next_step_valid_reads_strided_flags_as_they_lie(T, N, monkeypatch):
    """Strided, reversed, column-sliced and 1-D strided flags go through the
    one C pass (``_fast.next_valid``) uncopied and equal the reference;
    transposes are copied in blocks first; the C pass refuses what it
    cannot take."""
    rng = np.random.default_rng(T + N)
    te = rng.random((T, N)) < 0.3
    tr = rng.random((T, N)) < 0.3
    pd = rng.random(N) < 0.5

    def views(a):
        out = {}
        for k in (2, 3):
            w = np.zeros((T, k * N), a.dtype)
            w[:, ::k] = a
            out[f"every {k}th"] = w[:, ::k]
        w = np.zeros((T, N + 5), a.dtype)
        w[:, 2:-3] = a
        out["rows apart"] = w[:, 2:-3]
        out["reversed"] = a[::-1, ::-1].copy()[::-1, ::-1]
        w = np.zeros((2 * T, N), a.dtype)
        w[::2] = a
        out["every other row"] = w[::2]
        return out

    real_copy = C.c_contiguous
    copied = []
    monkeypatch.setattr(C, "c_contiguous", lambda a: copied.append(a.shape) or real_copy(a))
    want = R.next_step_valid(te, tr, pd)
    vt, vr = views(te), views(tr)
    for label in vt:
        for b in (vr[label], tr, vr[label].view(np.uint8)):
            got = fastppo.next_step_valid(vt[label], b, prev_done=pd)
            np.testing.assert_array_equal(got, want, err_msg=label)
            assert got.flags.c_contiguous, label
        got = fastppo.next_step_valid(vt[label][:, 0], vr[label][:, 0], prev_done=pd[0])
        np.testing.assert_array_equal(got, want[:, 0], err_msg=label)
    assert copied == []
    # a reversed transpose: no memory order, so a C result, both copied first
    tt = te[:, ::-1].T.copy().T[:, ::-1]
    got = fastppo.next_step_valid(tt, np.asfortranarray(tr), prev_done=pd)
    np.testing.assert_array_equal(got, want)
    assert got.flags.c_contiguous and copied == [(T, N), (T, N)][: 2 if N > 1 < T else 0]
    copied.clear()
    # Fortran flags beside C ones: the C ones are copied (in blocks), once
    if T > 1 and N > 1:
        got = fastppo.next_step_valid(np.asfortranarray(te), tr, prev_done=pd)
        np.testing.assert_array_equal(got, want)
        assert got.flags.f_contiguous and copied == [(N, T)]
    with pytest.raises(ValueError, match="next_valid"):
        _fast.next_valid(te, tr, np.empty((T, N), np.float32))
    with pytest.raises(ValueError, match="next_valid"):
        _fast.next_valid(te, tr, np.empty((T + 1, N), bool))
    with pytest.raises(ValueError, match="overlaps"):
        _fast.next_valid(te, tr, te.view(np.uint8))


# ---------------------------------------------------------------- errors


def _args(dt=np.float64, T=4, N=3):
    rng = np.random.default_rng(0)
    r, v, lv, te, tr, fv = make(rng, T, N, dt)
    return r, v, lv, te, tr, fv


@pytest.mark.parametrize(
    "mutate,exc,match",
    [
        (
            lambda a: a.update(rewards=a["rewards"].astype(np.int64)),
            TypeError,
            "gae: rewards must be float32 or float64",
        ),
        (
            lambda a: a.update(values=a["values"].astype(np.float32)),
            TypeError,
            "gae: values must be float64 like rewards, last_values, got dtype float32",
        ),
        (
            lambda a: a.update(last_values=a["last_values"].astype(np.float32)),
            TypeError,
            "gae: last_values must be float64",
        ),
        (
            lambda a: a.update(values=a["values"][:3]),
            ValueError,
            r"gae: values must be shape \(4, 3\)",
        ),
        (
            lambda a: a.update(last_values=a["last_values"][:2]),
            ValueError,
            r"gae: last_values must be shape \(3,\)",
        ),
        (
            lambda a: a.update(terminated=a["terminated"][:, :2]),
            ValueError,
            "gae: terminated must be shape",
        ),
        (
            lambda a: a.update(terminated=a["terminated"].astype(np.int32)),
            TypeError,
            "gae: terminated must be bool, uint8 or float 0/1",
        ),
        (
            lambda a: a.update(terminated=a["terminated"] + 0.5),
            ValueError,
            "gae: terminated must be 0/1 flags",
        ),
        (
            lambda a: a.update(rewards=a["rewards"][None]),
            ValueError,
            "gae: rewards must be 1-D or 2-D",
        ),
        (lambda a: a.update(gamma=1.5), ValueError, r"gae: gamma must be in \[0, 1\], got 1.5"),
        (lambda a: a.update(gamma=-0.1), ValueError, "gae: gamma must be in"),
        (lambda a: a.update(gamma=float("nan")), ValueError, "gae: gamma must be in"),
        (lambda a: a.update(gamma="0.9"), TypeError, "gae: gamma must be a real number"),
        (lambda a: a.update(gae_lambda=1.01), ValueError, "gae: gae_lambda must be in"),
        (
            lambda a: a.update(truncated=np.ones((4, 3), bool)),
            ValueError,
            "gae: final_values or valid must be given when truncated has a True",
        ),
        (
            lambda a: a.update(final_values=np.zeros((4, 3), np.float32)),
            TypeError,
            "gae: final_values must be float64",
        ),
    ],
)
def test_gae_errors(mutate, exc, match):
    r, v, lv, te, tr, fv = _args()
    kw = dict(rewards=r, values=v, last_values=lv, terminated=te)
    mutate(kw)
    with pytest.raises(exc, match=match):
        fastppo.gae(**kw)


@pytest.mark.parametrize("name", ["rewards", "values", "last_values"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_inputs_raise_and_write_nothing(name, bad):
    r, v, lv, te, tr, fv = _args()
    kw = dict(rewards=r, values=v, last_values=lv, terminated=te)
    kw[name] = kw[name].copy()
    kw[name].flat[kw[name].size - 1] = bad
    out = (np.full_like(r, 7.0), np.full_like(r, 7.0))
    with pytest.raises(ValueError, match=f"gae: {name} must be finite, got"):
        fastppo.gae(**kw, out=out)
    assert np.all(out[0] == 7.0) and np.all(out[1] == 7.0)


def test_non_finite_final_values_only_where_read():
    r, v, lv, te, tr, fv = _args()
    te[:] = False
    tr[:] = False
    tr[1, 2] = True
    fv[0, 0] = np.nan  # not read: fine
    fastppo.gae(r, v, lv, te, tr, final_values=fv)
    fv[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"final_values \(at truncated steps\) must be finite"):
        fastppo.gae(r, v, lv, te, tr, final_values=fv)


def test_vtrace_errors():
    r, v, lv, te, tr, fv = _args()
    for name in ("rho_bar", "c_bar", "pg_rho_bar"):
        for bad in (0.0, -1.0):
            with pytest.raises(ValueError, match=f"vtrace: {name} must be in"):
                fastppo.vtrace(v, v, r, v, lv, te, **{name: bad})
    with pytest.raises(ValueError, match="vtrace: lam must be in"):
        fastppo.vtrace(v, v, r, v, lv, te, lam=2.0)
    bad = v.copy()
    bad[2, 1] = np.nan
    with pytest.raises(
        ValueError, match=r"vtrace: target_logp must be finite, got .* at index \(2, 1\)"
    ):
        fastppo.vtrace(v, bad, r, v, lv, te)
    with pytest.raises(ValueError, match="vtrace: behavior_logp must be shape"):
        fastppo.vtrace(v[:2], v, r, v, lv, te)
    with pytest.raises(TypeError, match="vtrace: behavior_logp must be float32 or float64"):
        fastppo.vtrace(v.astype(np.int32), v, r, v, lv, te)
    fastppo.vtrace(v, v, r, v, lv, te, rho_bar=np.inf)  # inf thresholds are allowed


def test_discounted_returns_needs_final_values_for_truncation():
    r, v, lv, te, tr, fv = _args()
    te[:] = False
    tr[:] = False
    tr[0, 0] = True
    with pytest.raises(ValueError, match="discounted_returns: final_values must be given"):
        fastppo.discounted_returns(r, lv, te, tr, valid=np.ones_like(te))


@pytest.mark.parametrize(
    "out,exc,match",
    [
        ((np.empty((4, 3)),), TypeError, "gae: out must be a tuple"),
        (np.empty((4, 3)), TypeError, "gae: out must be a tuple"),
        (
            (np.empty((4, 3), np.float32), np.empty((4, 3))),
            TypeError,
            r"gae: out\[0\] \(advantages\) must be dtype float64",
        ),
        (
            (np.empty((4, 3)), np.empty((3, 3))),
            ValueError,
            r"gae: out\[1\] \(returns\) must be shape \(4, 3\)",
        ),
    ],
)
def test_out_errors(out, exc, match):
    r, v, lv, te, tr, fv = _args()
    with pytest.raises(exc, match=match):
        fastppo.gae(r, v, lv, te, out=out)


def test_out_read_only_or_overlapping():
    r, v, lv, te, tr, fv = _args()
    ro = np.empty((4, 3))
    ro.setflags(write=False)
    with pytest.raises(ValueError, match="must be writeable"):
        fastppo.gae(r, v, lv, te, out=(ro, np.empty((4, 3))))
    a = np.empty((4, 3))
    with pytest.raises(ValueError, match="gae: out must be two non-overlapping arrays"):
        fastppo.gae(r, v, lv, te, out=(a, a))
    with pytest.raises(ValueError, match="gae: out must be not to overlap the input 'values'"):
        fastppo.gae(r, v, lv, te, out=(np.empty((4, 3)), v))


# ---------------------------------------------------------------- GIL


def test_kernels_release_the_gil():
    """While one thread is inside a long gae call, another thread runs Python."""
    rng = np.random.default_rng(0)
    T, N = 1 << 16, 32  # ~8 MiB per array: one call takes milliseconds
    r = rng.standard_normal((T, N)).astype(np.float32)
    v = r.copy()
    lv = v[0].copy()
    te = np.zeros((T, N), bool)
    out = (np.empty_like(r), np.empty_like(r))
    fastppo.gae(r, v, lv, te, out=out)  # compiled before the measurement

    def ticks_during_a_call() -> int:
        started = threading.Event()
        done = threading.Event()

        def worker():
            started.set()
            fastppo.gae(r, v, lv, te, out=out)  # one call: no Python between set() and done
            done.set()

        th = threading.Thread(target=worker)
        th.start()
        started.wait()
        ticks = 0
        while not done.is_set():
            ticks += 1
        th.join()
        return ticks

    # If the call held the GIL, this thread could not run at all until the call
    # returned (it needs the GIL even to leave started.wait()), so it would
    # count 0 ticks in every try. Released, it spins for the whole call -- once
    # the OS schedules it: on a loaded 2-core machine (CI runs other work beside
    # the tests) it may not get a core during a call of a few milliseconds, so
    # a few tries are made and one must spin.
    tries = []
    for _ in range(5):
        tries.append(ticks_during_a_call())
        if tries[-1] > 1000:
            break
    assert max(tries) > 1000, tries


def test_float32_results_beyond_float32_range_saturate_as_documented():
    """Finite float32 inputs whose true results exceed float32 give +-inf (documented
    in each sweep's Notes); the same data in float64 is finite."""
    r = np.full((4, 1), 3e38, np.float32)
    z, lv, te = np.zeros_like(r), np.zeros(1, np.float32), np.zeros((4, 1), bool)
    adv, _ = fastppo.gae(r, z, lv, te, gamma=1.0, gae_lambda=1.0)
    ret = fastppo.discounted_returns(r, lv, te, gamma=1.0)
    vs, _ = fastppo.vtrace(z, z, r, z, lv, te, gamma=1.0)
    for x in (adv, ret, vs):
        assert x.dtype == np.float32 and np.isposinf(x[:3]).all() and x[3] == np.float32(3e38)
    r64, z64, lv64 = (x.astype(np.float64) for x in (r, z, lv))
    assert np.isfinite(fastppo.gae(r64, z64, lv64, te, gamma=1.0)[0]).all()
    assert "saturates to +-inf" in fastppo.gae.__doc__


def test_next_step_valid_refuses_zero_steps():
    """Found by the fuzz suite: an empty rollout raised IndexError."""
    with pytest.raises(ValueError, match=r"^next_step_valid: terminated must be non-empty"):
        fastppo.next_step_valid(np.zeros((0, 3), bool), np.zeros((0, 3), bool))
