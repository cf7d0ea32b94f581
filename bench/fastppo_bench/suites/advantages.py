"""Benchmark groups for GAE and V-trace.

Baselines:

* ``numpy loop``: the loop over T vectorised across envs, as Stable-Baselines3's
  ``RolloutBuffer.compute_returns_and_advantage`` does it;
* ``np.copyto floor``: copying ``rewards -> advantages`` and ``values ->
  returns`` -- the bytes a sweep must at least read and write, so the
  memory-bandwidth floor for a memory-bound kernel;
* ``chain floor``: one env's recurrence alone, ``c = r_t + gamma * c`` over
  its steps (a multiply and an add per step, each waiting on the last): the
  latency floor of a rollout of one env, which no sweep of it can beat.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numba
import numpy as np

from fastppo_bench.core import Group

GAMMA, LAM = 0.99, 0.95

SIZES_QUICK = [(2048, 256)]
SIZES_FULL = [(128, 8), (2048, 64), (2048, 256), (8192, 256)]


FEW_STEPS = 65536  # elements of the few-envs group, in every shape


@numba.njit(cache=True, error_model="numpy")
def _chain(r: np.ndarray, gamma: float, out: np.ndarray) -> None:
    """The chain floor: ``c = r_t + gamma * c`` backwards over one env's steps."""
    g = r.dtype.type(gamma)
    c = r.dtype.type(0)
    for i in range(r.shape[0]):
        t = r.shape[0] - 1 - i
        c = r[t] + g * c
        out[t] = c


def _few_envs() -> Group:
    """The sweeps on rollouts of few envs (time-major ``[T, N]``, the form
    Stable-Baselines3's buffer holds with ``n_envs`` envs), beside one env's
    chain floor and the same steps as 256 envs."""
    import fastppo

    impls: dict[str, Any] = {}
    floor_in = np.random.default_rng(1).standard_normal(FEW_STEPS).astype(np.float32)
    impls["chain floor (1 env)"] = partial(_chain, floor_in, GAMMA, np.empty_like(floor_in))
    for N in (1, 8, 256):
        r, v, lv, te, blp, tlp = _inputs(FEW_STEPS // N, N)
        a, b = np.empty_like(r), np.empty_like(r)
        envs = f"{N} env{'s' if N > 1 else ''}"
        impls[f"gae, {envs}"] = partial(fastppo.gae, r, v, lv, te, out=(a, b))
        impls[f"vtrace, {envs}"] = partial(fastppo.vtrace, blp, tlp, r, v, lv, te, out=(a, b))
        impls[f"discounted_returns, {envs}"] = partial(fastppo.discounted_returns, r, lv, te, out=a)
    return Group(
        name=f"sweeps of few envs, {FEW_STEPS} steps float32",
        baseline="chain floor (1 env)",
        impls=impls,
        target="1 env: gae and discounted_returns <= 2x the chain floor, vtrace <= 3x",
    )


def _short_batch_major(T: int) -> list[Group]:
    """Batch-major ``[N, T]`` rollouts of a few steps (many envs, short
    horizons, as torchrl and tianshou hand them over), beside the same data
    time-major: issue 12 asks at most 1.5x."""
    import fastppo

    N = FEW_STEPS // T
    r, v, lv, te, blp, tlp = _inputs(T, N)

    def bm(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.T).T

    a, b = np.empty_like(r), np.empty_like(r)
    fa, fb = np.asfortranarray(a), np.asfortranarray(b)
    calls = {
        "gae": lambda r, v, te, blp, tlp, o: fastppo.gae(r, v, lv, te, out=o),
        "vtrace": lambda r, v, te, blp, tlp, o: fastppo.vtrace(blp, tlp, r, v, lv, te, out=o),
        "discounted_returns": lambda r, v, te, blp, tlp, o: (
            fastppo.discounted_returns(r, lv, te, out=o[0]),
        ),
    }
    out = []
    for name, call in calls.items():
        out.append(
            Group(
                name=f"{name} [{T}x{N}] float32, batch-major beside time-major",
                baseline="time-major",
                impls={
                    "time-major": partial(call, r, v, te, blp, tlp, (a, b)),
                    "batch-major [N, T].T": partial(
                        call, bm(r), bm(v), bm(te), bm(blp), bm(tlp), (fa, fb)
                    ),
                },
                check=_same_bits,
                target="batch-major <= 1.5x time-major",
            )
        )
    return out


def _same_bits(results: dict[str, Any]) -> None:
    first, *rest = results.values()
    for res in rest:
        for x, y in zip(first, res):
            assert np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes()


def numpy_gae(r, v, lv, te, gamma=GAMMA, lam=LAM):
    """Stable-Baselines3's loop: over T, vectorised across envs."""
    T = r.shape[0]
    adv = np.empty_like(r)
    last = np.zeros_like(lv)
    nonterm = 1.0 - te.astype(r.dtype)
    for t in range(T - 1, -1, -1):
        nv = lv if t == T - 1 else v[t + 1]
        delta = r[t] + gamma * nv * nonterm[t] - v[t]
        last = delta + gamma * lam * nonterm[t] * last
        adv[t] = last
    return adv, adv + v


def numpy_vtrace(
    blp, tlp, r, v, lv, te, gamma=GAMMA, lam=1.0, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0
):
    """V-trace as rlax/IMPALA write it, vectorised across envs, looped over T."""
    T = r.shape[0]
    rho = np.exp(tlp - blp)
    rho_c = np.minimum(rho_bar, rho)
    cs = lam * np.minimum(c_bar, rho)
    rho_pg = np.minimum(pg_rho_bar, rho)
    nonterm = 1.0 - te.astype(r.dtype)
    vs = np.empty_like(r)
    diff = np.zeros_like(lv)
    for t in range(T - 1, -1, -1):
        nv = lv if t == T - 1 else v[t + 1]
        delta = rho_c[t] * (r[t] + gamma * nonterm[t] * nv - v[t])
        diff = delta + gamma * nonterm[t] * cs[t] * diff
        vs[t] = v[t] + diff
    next_vs = np.concatenate([vs[1:], lv[None]], axis=0)
    pg = rho_pg * (r + gamma * nonterm * next_vs - v)
    return vs, pg


def _inputs(T: int, N: int, dt: Any = np.float32, seed: int = 0):
    rng = np.random.default_rng(seed)
    r = rng.standard_normal((T, N)).astype(dt)
    v = rng.standard_normal((T, N)).astype(dt)
    lv = rng.standard_normal(N).astype(dt)
    te = rng.random((T, N)) < 0.01
    blp = (rng.standard_normal((T, N)) * 0.1).astype(dt)
    tlp = (rng.standard_normal((T, N)) * 0.1).astype(dt)
    return r, v, lv, te, blp, tlp


def _copy2(r: np.ndarray, v: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    np.copyto(a, r)
    np.copyto(b, v)


def _close(rtol: float = 1e-4, atol: float = 1e-4):
    def check(results: dict[str, Any]) -> None:
        ref = results.get("numpy loop")
        for label, res in results.items():
            if label.startswith("np.copyto") or ref is None:
                continue
            for a, b in zip(res, ref):
                np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=label)

    return check


def groups(quick: bool, full: bool = False) -> list[Group]:
    import fastppo
    from fastppo.advantages import _gae_general

    sizes = SIZES_QUICK if quick and not full else SIZES_FULL
    out: list[Group] = []
    for T, N in sizes:
        r, v, lv, te, blp, tlp = _inputs(T, N)
        a, b = np.empty_like(r), np.empty_like(r)
        nbytes = 4 * r.nbytes + te.nbytes  # read r, v (+ flags), write adv, ret

        ca, cb = np.empty_like(r), np.empty_like(r)  # own buffers: results are compared

        copy_floor = partial(_copy2, r, v, ca, cb)

        out.append(
            Group(
                name=f"gae [{T}x{N}] float32",
                baseline="numpy loop",
                impls={
                    "numpy loop": partial(numpy_gae, r, v, lv, te),
                    "fastppo": partial(
                        fastppo.gae, r, v, lv, te, gamma=GAMMA, gae_lambda=LAM, out=(a, b)
                    ),
                    "np.copyto floor": copy_floor,
                },
                check=_close(),
                target="fastppo >= 20x numpy loop; time <= 1.5x np.copyto floor",
                bytes_moved=nbytes,
            )
        )
        vs, pg = np.empty_like(r), np.empty_like(r)
        out.append(
            Group(
                name=f"vtrace [{T}x{N}] float32",
                baseline="numpy loop",
                impls={
                    "numpy loop": partial(numpy_vtrace, blp, tlp, r, v, lv, te),
                    "fastppo": partial(
                        fastppo.vtrace, blp, tlp, r, v, lv, te, gamma=GAMMA, out=(vs, pg)
                    ),
                    "np.copyto floor": copy_floor,
                },
                check=_close(),
                target="fastppo >= 20x numpy loop; time <= 2x np.copyto floor",
                bytes_moved=nbytes + 2 * blp.nbytes,
            )
        )
    # Per-call overhead: a [1, 1] problem is all Python layer and dispatch.
    r, v, lv, te, _, _ = _inputs(1, 1)
    a, b = np.empty_like(r), np.empty_like(r)
    out.append(
        Group(
            name="gae [1x1] float32 (per-call overhead)",
            baseline="numpy loop",
            impls={
                "numpy loop": lambda: numpy_gae(r, v, lv, te),
                "fastppo": lambda: fastppo.gae(r, v, lv, te, out=(a, b)),
                # what the call costs without the Cython fast path
                "fastppo general path": lambda: _gae_general(
                    r, v, lv, te, None, None, None, GAMMA, LAM, (a, b)
                ),
            },
            check=_close(),
            target="fastppo <= 5 us per call (Cython fast path; the general path for reference)",
        )
    )
    if full:
        out.append(_few_envs())
        for T in (8, 32):
            out.extend(_short_batch_major(T))
    return out
