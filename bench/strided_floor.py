"""What a GAE sweep that read strided rows itself would cost, measured.

Issue 12 asks every input form within 1.5x of the best one. A strided
``[T, N]`` view (every other element of a ``[T, 2N]`` buffer) reaches the
sweeps as its C copy, since the kernels have one compiled variant per dtype,
for C-contiguous rows. This script measures the alternative instead of
estimating it: one GAE kernel (``gae_block``'s three passes over chunks of
``CHUNK`` rows, its bootstrap and mask selects, and a validation pass over
every float input first), compiled twice here, outside the package, with
the rewards' and values' element step a compile-time constant: 1 (the
contiguous form) and 2 (reading the ``[T, 2N]`` buffers in place, the loops
the compiler vectorises with two loads and a permute). Beside them: the same
step-1 kernel after ``fastppo._checks.c_contiguous`` of the two views (what
the package does), and ``fastppo.gae`` itself in both forms::

    NUMBA_NUM_THREADS=1 taskset -c 0 python bench/strided_floor.py [--rounds 15]

The ratio of the step-1 kernel to the step-2 kernel is the floor of a fused
strided sweep on this CPU; the ratio to copy + step 1 is what copying costs.

Reading one float of each pair: LLVM's cost model for znver4 compiles
``x[2 * n]`` alone as a gather (4096 elements: 1.68 us, against 0.49 us
contiguous); reading the pair's other float too, folded into a NaN test
that is kept (``sink``), makes it two loads and a permute (0.74 us). The
step-2 kernel does that for every strided read, as a real one would have to.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
import numba
import numpy as np

import fastppo
from fastppo._checks import c_contiguous
from fastppo.kernels.sweep import CHUNK
from fastppo_bench.timing import print_stages

T, N = 2048, 256
GAMMA, LAM = 0.99, 0.95


def _make(step: int) -> Callable[..., int]:
    """The experimental GAE, reading rewards and values ``step`` elements apart."""
    S = np.uint64(step)  # a closure constant: Numba compiles it as a literal
    GAP = step == 2  # read each value's neighbour too (see the module docstring)
    ONE = np.uint64(1)

    @numba.njit(error_model="numpy")
    def sweep(r, v, lv, fv, te, tr, ok, gamma, gl, has_final, has_valid, adv, ret, junk):
        n_env = adv.shape[1]
        zero = adv.dtype.type(0)
        sink = False
        # validation first, as the kernels: every float input finite
        bad = 0
        for t in range(T):
            rt, vt, ft = r[t], v[t], fv[t]
            for n in range(n_env):
                u = np.uint64(n)
                x = rt[S * u] + vt[S * u] + ft[n]
                bad |= x - x != 0
                if GAP:
                    y = rt[S * u + ONE] + vt[S * u + ONE]
                    sink |= y != y
        if bad:
            return 1
        t_hi = T
        while t_hi > 0:
            t_lo = max(0, t_hi - CHUNK)
            for t in range(t_lo, t_hi):
                rt, vt = r[t], v[t]
                tet, trt, ft, okt, a = te[t], tr[t], fv[t], ok[t], adv[t]
                if t == T - 1:  # the next values are last_values, contiguous
                    for n in range(n_env):
                        u = np.uint64(n)
                        nv = lv[n]
                        f = ft[n] if has_final else nv
                        boot = zero if tet[n] != 0 else (f if trt[n] != 0 else nv)
                        d = rt[S * u] + gamma * boot - vt[S * u]
                        a[n] = d if (okt[n] != 0) | (not has_valid) else zero
                else:
                    nvr = v[t + 1]
                    for n in range(n_env):
                        u = np.uint64(n)
                        nv = nvr[S * u]
                        if GAP:
                            y = nvr[S * u + ONE] + rt[S * u + ONE] + vt[S * u + ONE]
                            sink |= y != y
                        f = ft[n] if has_final else nv
                        boot = zero if tet[n] != 0 else (f if trt[n] != 0 else nv)
                        d = rt[S * u] + gamma * boot - vt[S * u]
                        a[n] = d if (okt[n] != 0) | (not has_valid) else zero
            for t in range(min(t_hi, T - 1) - 1, t_lo - 1, -1):
                tet, trt, okt, a, c = te[t], tr[t], ok[t], adv[t], adv[t + 1]
                for n in range(n_env):
                    stop = tet[n] | trt[n]
                    if has_valid:
                        stop |= okt[n] == 0
                    a[n] += (zero if stop != 0 else gl) * c[n]
            for t in range(t_lo, t_hi):
                a, vt, rt_ = adv[t], v[t], ret[t]
                for n in range(n_env):
                    u = np.uint64(n)
                    rt_[n] = a[n] + vt[S * u]
                    if GAP:
                        y = vt[S * u + ONE]
                        sink |= y != y
            t_hi = t_lo
        junk[0] = sink
        return 0

    return sweep


def _stages() -> dict[str, Callable[[], Any]]:
    rng = np.random.default_rng(0)
    f32 = np.float32
    r, v, fv = (rng.standard_normal((T, N)).astype(f32) for _ in range(3))
    lv = rng.standard_normal(N).astype(f32)
    te = (rng.random((T, N)) < 0.01).view(np.uint8)
    tr = (rng.random((T, N)) < 0.01).view(np.uint8)
    ok = np.ones((T, N), np.uint8)
    wide_r, wide_v = np.zeros((T, 2 * N), f32), np.zeros((T, 2 * N), f32)
    wide_r[:, ::2], wide_v[:, ::2] = r, v
    rs, vs = wide_r[:, ::2], wide_v[:, ::2]
    adv, ret = np.empty((T, N), f32), np.empty((T, N), f32)
    junk = np.zeros(1, np.bool_)
    one, two = _make(1), _make(2)
    g, gl = f32(GAMMA), f32(GAMMA * LAM)

    def kernel(k: Callable[..., int], rr: np.ndarray, vv: np.ndarray) -> Callable[[], int]:
        return lambda: k(rr, vv, lv, fv, te, tr, ok, g, gl, True, False, adv, ret, junk)

    def copied() -> int:
        return one(c_contiguous(rs), c_contiguous(vs), lv, fv, te, tr, ok, g, gl, True, False,
                   adv, ret, junk)  # fmt: skip

    def public(rr: np.ndarray, vv: np.ndarray) -> Callable[[], Any]:
        b_te, b_tr = te.view(bool), tr.view(bool)
        return lambda: fastppo.gae(rr, vv, lv, b_te, b_tr, final_values=fv, gamma=GAMMA,
                                   gae_lambda=LAM)  # fmt: skip

    # the step-2 kernel reads the same values, so the same bits
    kernel(one, r, v)()
    want = adv.copy(), ret.copy()
    kernel(two, wide_r, wide_v)()
    np.testing.assert_array_equal(adv, want[0])
    np.testing.assert_array_equal(ret, want[1])
    return {
        "experiment, step 1 (contiguous)": kernel(one, r, v),
        "experiment, step 2 (the strided buffers in place)": kernel(two, wide_r, wide_v),
        "experiment, C copy of both views + step 1": copied,
        "fastppo.gae, contiguous": public(r, v),
        "fastppo.gae, strided views": public(rs, vs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    cpu = f"CPU (llvmlite): {llvm.get_host_cpu_name()}, numba threads {numba.get_num_threads()}"
    print_stages(_stages(), args.rounds, cpu, ratio_to_first=True)


if __name__ == "__main__":
    main()
