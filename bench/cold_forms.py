"""The sweeps' strided forms against their best forms, with cold caches.

``fastppo bench --only forms`` calls each form again and again on the same
arrays, so the best form's 8-14 MiB stay in L3 between calls while a
strided form's source spans, copies and outputs do not fit beside them: a
cache-warm ratio. A training loop hands each call a rollout it has just
written, which sits in memory, not in L3. This script times both: each call
once after the previous one (warm), and each call after writing a 64 MiB
buffer (cold: nothing of the call's arrays left in L2 or L3), medians over
``--calls`` calls, the forms interleaved, and counts the page faults of the
whole run (a call that faults its temporaries in measures the allocator)::

    NUMBA_NUM_THREADS=1 taskset -c 0 python bench/cold_forms.py [--calls 25]
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
import numba
import numpy as np

import fastppo
from fastppo_bench.suites.forms import _strided  # the matrix's strided form

T, N = 2048, 256


def _calls() -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    rng = np.random.default_rng(0)
    r, v, blp, tlp = (rng.standard_normal((T, N)).astype(np.float32) for _ in range(4))
    blp *= 0.3
    tlp *= 0.3
    lv = rng.standard_normal(N).astype(np.float32)
    te = rng.random((T, N)) < 0.01
    rs, vs, bs, ts = (_strided(x) for x in (r, v, blp, tlp))
    return {
        "gae": (
            lambda: fastppo.gae(r, v, lv, te),
            lambda: fastppo.gae(rs, vs, lv, te),
        ),
        "vtrace": (
            lambda: fastppo.vtrace(blp, tlp, r, v, lv, te),
            lambda: fastppo.vtrace(bs, ts, rs, vs, lv, te),
        ),
        "discounted_returns": (
            lambda: fastppo.discounted_returns(r, lv, te),
            lambda: fastppo.discounted_returns(rs, lv, te),
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=25)
    args = ap.parse_args()
    calls = _calls()
    flat = {(name, form): fn for name, fns in calls.items() for form, fn in zip("bs", fns)}
    for fn in flat.values():
        fn()  # compile and warm
    flush = np.ones(64 << 20, np.uint8)
    print(f"CPU (llvmlite): {llvm.get_host_cpu_name()}, numba threads {numba.get_num_threads()}")
    print("| sweep [2048x256] float32 | caches | best form | strided | ratio | page faults |")
    print("|---|---|---:|---:|---:|---:|")
    for mode in ("warm", "cold"):
        times: dict[tuple[str, str], list[float]] = {k: [] for k in flat}
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(args.calls):
            for key, fn in flat.items():
                if mode == "cold":
                    flush += 1  # writes 64 MiB: evicts the call's arrays
                else:
                    fn()
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        for name in calls:
            best = float(np.median(times[(name, "b")]))
            strided = float(np.median(times[(name, "s")]))
            print(
                f"| {name} | {mode} | {best * 1e6:.0f} us | {strided * 1e6:.0f} us | "
                f"{best / strided:.2f} | {faults} (the run) |"
            )


if __name__ == "__main__":
    main()
