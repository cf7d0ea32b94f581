"""A sweep timed over several placements of its arrays (batch-major, or time-major).

One process is one placement: numpy's large arrays all start 16 bytes past a
page, so whether rows of different arrays share L1 sets depends on where
each landed, and a before/after comparison of one process per side can
measure the placement instead of the code (docs/design.md, "Rows that
alias"). This script carves the arrays out of one pool at random page and
line offsets (each still 16 bytes past a line, as numpy's are) and reports
the median and the worst over the placements::

    NUMBA_NUM_THREADS=1 taskset -c 0 python bench/placements.py --sweep gae --T 2048 --N 256
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fastppo


def _time(f: Callable[[], Any], calls: int = 10, rounds: int = 5) -> float:
    """Best of ``rounds`` means over ``calls`` calls, in us (after one warm call)."""
    f()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best * 1e6


def _call(
    sweep: str, r: Any, v: Any, lp: Any, lv: Any, te: Any, a1: Any, a2: Any
) -> Callable[[], Any]:
    if sweep == "gae":
        return lambda: fastppo.gae(r, v, lv, te, out=(a1, a2))
    if sweep == "vtrace":
        return lambda: fastppo.vtrace(lp, lp, r, v, lv, te, out=(a1, a2))
    return lambda: fastppo.discounted_returns(r, lv, te, out=a1)


def placements(
    sweep: str,
    T: int,
    N: int,
    count: int,
    seed: int = 1,
    time_major: bool = False,
    dtype: Any = np.float32,
) -> list[float]:
    """``count`` timings of the batch-major ``sweep`` ("gae", "vtrace" or
    "returns") on ``[N, T]`` rows (or time-major ``[T, N]`` ones) of ``dtype``,
    each with the arrays placed anew."""
    rng = np.random.default_rng(0)
    prng = np.random.default_rng(seed)
    slot = np.dtype(dtype).itemsize * T * N + 2 * 4096  # one array and room to shift it
    pool = np.empty(64 * 4096 + 7 * slot + 4096, np.uint8)

    def carve(off: int, dt: Any) -> np.ndarray:
        nb = T * N * np.dtype(dt).itemsize
        a = pool[off : off + nb].view(dt)
        return a.reshape(T, N) if time_major else a.reshape(N, T).T  # [T, N]: C or Fortran

    out = []
    for _ in range(count):
        base = int(prng.integers(0, 64)) * 4096 + (-pool.ctypes.data) % 4096
        offs = [base + i * slot + int(prng.integers(0, 64)) * 64 + 16 for i in range(6)]
        r, v, lp, a1, a2 = (carve(o, dtype) for o in offs[:5])
        te = carve(offs[5], np.uint8)
        r[:] = rng.standard_normal((T, N))
        v[:] = rng.standard_normal((T, N))
        lp[:] = 0.3 * rng.standard_normal((T, N))
        te[:] = rng.random((T, N)) < 0.01
        lv = rng.standard_normal(N).astype(dtype)
        out.append(_time(_call(sweep, r, v, lp, lv, te, a1, a2)))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", choices=("gae", "vtrace", "returns"), default="gae")
    p.add_argument("--T", type=int, default=2048)
    p.add_argument("--N", type=int, default=256)
    p.add_argument("--count", type=int, default=8, help="placements")
    p.add_argument("--time-major", action="store_true", help="[T, N] C-contiguous arrays")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    a = p.parse_args()
    ts = np.array(
        placements(a.sweep, a.T, a.N, a.count, time_major=a.time_major, dtype=np.dtype(a.dtype))
    )
    layout = "time-major" if a.time_major else "batch-major"
    print(
        f"{a.sweep} {layout} [{a.T}x{a.N}] {a.dtype} over {a.count} placements: "
        f"median {np.median(ts):.0f} us, best {ts.min():.0f}, worst {ts.max():.0f}"
    )


if __name__ == "__main__":
    main()
