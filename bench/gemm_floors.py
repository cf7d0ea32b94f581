"""The matrix products alone of the trainer's GEMM-bound rows: the floor under their targets.

Issue 14 asks the PPO update (obs 17 / act 6, 256x256, 4,096 samples, minibatch
1,024) and ``policy.act`` (N = 4,096, 256x256) at 2x torch; issue 17 asks a
CartPole-v1 run (CLI defaults: 391 updates x 20 epochs of one 256-row
minibatch, 64x64) at a quarter of an older commit's time. Each is bounded below
by the products it must compute. This script times exactly those products,
each alone, through ``np.dot`` inside a Numba kernel (the BLAS the MLP kernels
call), and sums them per row; beside them ``torch.mm`` on the largest shape::

    taskset -c 0 env NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \\
        python bench/gemm_floors.py

Per network of ``obs -> hidden -> hidden -> out``: the forward's three
products, the backward's three weight gradients (``x.T @ dz``) and two input
gradients (``dz @ W.T``; the first layer's is never needed): 8 for the update,
3 for ``act``. Times are the best of 7 batches, so the floor is optimistic.
"""

from __future__ import annotations

import argparse
import time

import llvmlite.binding as llvm
import numba
import numpy as np

# (name, rows, obs, hidden, outputs of the actor and critic, minibatches, backward)
ROWS = (
    ("CartPole-v1 CLI run: 256-row minibatch, 64x64", 256, 4, 64, (2, 1), 391 * 20, True),
    ("update obs 17 / act 6, 256x256, 4096, mb 1024", 1024, 17, 256, (6, 1), 4 * 10, True),
    ("act N=4096, 256x256 (actor forward)", 4096, 17, 256, (6,), 1, False),
)


@numba.njit(cache=True)
def _products(a: np.ndarray, b: np.ndarray, reps: int) -> float:
    s = 0.0
    for _ in range(reps):
        s += np.dot(a, b)[0, 0]  # kept, so the product cannot be dropped
    return s


def shapes(rows: int, obs: int, hidden: int, outs: tuple[int, ...], backward: bool) -> list:
    """The ``(a.shape, b.shape)`` of every product of one minibatch."""
    out = []
    for n_out in outs:
        dims = (obs, hidden, hidden, n_out)
        for i in range(3):
            out.append(((rows, dims[i]), (dims[i], dims[i + 1])))  # forward
            if backward:
                out.append(((dims[i], rows), (rows, dims[i + 1])))  # weight gradient
        if backward:
            out += [((rows, dims[i + 1]), (dims[i + 1], dims[i])) for i in (2, 1)]
    return out


def best_time(a: np.ndarray, b: np.ndarray, reps: int, batches: int = 7) -> float:
    _products(a, b, 1)
    best = float("inf")
    for _ in range(batches):
        t = time.perf_counter()
        _products(a, b, reps)
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(f"CPU {llvm.get_host_cpu_name()}, float32, one thread")
    rng = np.random.default_rng(0)
    for name, rows, obs, hidden, outs, minibatches, backward in ROWS:
        total = flops = 0.0
        for sa, sb in shapes(rows, obs, hidden, outs, backward):
            a = rng.standard_normal(sa).astype(np.float32)
            b = rng.standard_normal(sb).astype(np.float32)
            f = 2.0 * sa[0] * sa[1] * sb[1]
            total += best_time(a, b, max(5, int(2e8 / f)))
            flops += f
        print(
            f"{name}: {len(shapes(rows, obs, hidden, outs, backward))} products "
            f"{total * 1e6:.1f} us per minibatch ({flops / total / 1e9:.0f} GFLOP/s); "
            f"x {minibatches} = {total * minibatches * 1e3:.1f} ms"
        )
    try:
        import torch
    except ImportError:
        print("torch.mm: not installed (pip install torch==2.13.0, the bench extra)")
        return 0
    torch.set_num_threads(1)
    a, b = torch.randn(1024, 256), torch.randn(256, 256)
    best = float("inf")
    for _ in range(7):
        t = time.perf_counter()
        for _ in range(100):
            torch.mm(a, b)
        best = min(best, (time.perf_counter() - t) / 100)
    print(f"torch.mm [1024x256]x[256x256]: {2 * 1024 * 256 * 256 / best / 1e9:.0f} GFLOP/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
