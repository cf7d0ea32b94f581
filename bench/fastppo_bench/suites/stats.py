"""Benchmark groups for the running statistics.

``rms update``: one ``RunningMeanStd`` update (batch moments in float64 + Chan
merge into the state). Baseline ``numpy``: ``np.mean``/``np.var`` with
``dtype=np.float64`` along the rows, then the Chan merge in numpy -- what
Stable-Baselines3's ``RunningMeanStd.update`` does. The kernels: Numba serial
and parallel, the Cython ``Updater``, and ``fastppo`` (the public method,
validation included: what a trainer pays). Sizes: per-step observation
batches (``[8, 4]`` CartPole x 8 envs, ``[16, 17]`` MuJoCo x 16 envs), a
rollout of observations (``[4096, 64]``) and a rollout of returns
(``[2048 x 64]`` scalars).

``rms normalize``: ``(x - mean) / sqrt(var + eps)`` clipped, as VecNormalize
normalises observations, against the Numba and Cython affine maps.

``return normalizer``: one step of Stable-Baselines3's VecNormalize reward
scaling against the Numba kernel, the Cython ``ReturnScaler`` and
:class:`fastppo.ReturnNormalizer`.

Each impl owns its state, starting from the same one; the check compares the
state after the first call, later calls keep folding the same batch in (the
same work every call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastppo_bench.core import Group

Sizes = list[tuple[tuple[int, ...], Any]]
SMALL: Sizes = [((8, 4), np.float32), ((16, 17), np.float32)]
LARGE: Sizes = [((4096, 64), np.float32)]
DEFAULT_EXTRA: Sizes = [((4096, 64), np.float64), ((2048 * 64,), np.float32)]
FULL_EXTRA: Sizes = [((8, 4), np.float64), ((2048, 256), np.float32)]


class NumpyRMS:
    """Stable-Baselines3's RunningMeanStd without its prior (count starts at 0)."""

    def __init__(self, n_feat: int) -> None:
        self.mean = np.zeros(n_feat)
        self.var = np.ones(n_feat)
        self.count = 0

    def update(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        b_mean = np.mean(x, axis=0, dtype=np.float64)
        b_var = np.var(x, axis=0, dtype=np.float64)
        n_b = x.shape[0]
        tot = self.count + n_b
        w_a, w_b = self.count / tot, n_b / tot
        delta = b_mean - self.mean
        self.mean = self.mean + delta * w_b
        self.var = self.var * w_a + b_var * w_b + delta * delta * (w_a * w_b)
        self.count = tot
        return self.mean, self.var


def _close(results: dict[str, Any]) -> None:
    ref = results["numpy"]
    for label, (mean, var) in results.items():
        np.testing.assert_allclose(mean, ref[0], rtol=1e-12, atol=1e-12, err_msg=label)
        np.testing.assert_allclose(var, ref[1], rtol=1e-10, atol=1e-12, err_msg=label)


def _update_group(shape: tuple[int, ...], dtype: Any) -> Group:
    from fastppo._cy import _stats as cy
    from fastppo._jit import num_threads
    from fastppo.stats import RunningMeanStd, layout

    rng = np.random.default_rng(0)
    x = (3.0 + 2.0 * rng.standard_normal(shape)).astype(dtype)
    sample_shape = shape[1:]
    n_feat = int(np.prod(sample_shape))
    x2 = x.reshape(shape[0], n_feat)
    m, rpb = layout(n_feat)
    nt = num_threads()

    def cython_impl(threads: int) -> Callable[[], Any]:
        mean, var = np.zeros(n_feat), np.ones(n_feat)
        up = cy.Updater(mean, var, m, rpb)
        fn = up.update_f32 if dtype == np.float32 else up.update_f64
        count = [0]

        def run() -> tuple[np.ndarray, np.ndarray]:
            count[0] += fn(x2, None, float(count[0]), threads)
            return mean, var

        return run

    def public_impl() -> Callable[[], Any]:
        rms = RunningMeanStd(sample_shape)

        def run() -> tuple[np.ndarray, np.ndarray]:
            rms.update(x)
            # the state itself: the public getters copy, which is not the update
            return rms._mean, rms._var

        return run

    np_rms = NumpyRMS(n_feat)
    dims = "x".join(map(str, shape)) + (" (scalars)" if not sample_shape else "")
    return Group(
        name=f"rms update [{dims}] {np.dtype(dtype).name}",
        baseline="numpy",
        impls={
            "numpy": lambda: np_rms.update(x2),
            "cython 1 thread": cython_impl(1),
            **({f"cython {nt} threads": cython_impl(nt)} if nt > 1 else {}),
            "fastppo": public_impl(),
        },
        check=_close,
        target="fastppo >= 3x numpy on [4096x64] float32",
        bytes_moved=x.nbytes,
    )


def _normalize_group(shape: tuple[int, int], dtype: Any) -> Group:
    from fastppo._cy import _stats as cy
    from fastppo._jit import num_threads
    from fastppo.stats import RunningMeanStd, layout

    rng = np.random.default_rng(2)
    x = (3.0 + 2.0 * rng.standard_normal(shape)).astype(dtype)
    n_feat = shape[1]
    rms = RunningMeanStd((n_feat,))
    rms.update(x)
    mean, var, eps, clip = rms.mean, rms.var, rms.epsilon, 10.0
    outs = [np.empty_like(x) for _ in range(3)]
    nt = num_threads()
    up = cy.Updater(mean.copy(), var.copy(), *layout(n_feat))
    cy_aff = up.affine_f32 if dtype == np.float32 else up.affine_f64

    def sb3() -> np.ndarray:
        # VecNormalize.normalize_obs, cast back to the observation dtype
        return np.clip((x - mean) / np.sqrt(var + eps), -clip, clip).astype(dtype)

    def check(results: dict[str, Any]) -> None:
        for label, res in results.items():
            np.testing.assert_allclose(res, results["numpy"], rtol=1e-6, atol=1e-6, err_msg=label)

    def run(fn: Callable[[], Any], out: np.ndarray) -> Callable[[], np.ndarray]:
        def call() -> np.ndarray:
            fn()
            return out

        return call

    dims = "x".join(map(str, shape))
    return Group(
        name=f"rms normalize [{dims}] {np.dtype(dtype).name}",
        baseline="numpy",
        impls={
            "numpy": sb3,
            "cython 1 thread": run(lambda: cy_aff(x, outs[0], eps, True, clip, 1), outs[0]),
            **(
                {
                    f"cython {nt} threads": run(
                        lambda: cy_aff(x, outs[1], eps, True, clip, nt), outs[1]
                    )
                }
                if nt > 1
                else {}
            ),
            "fastppo": lambda: rms.normalize(x, clip=clip, out=outs[2]),
        },
        check=check,
        target="fastppo >= numpy (SB3's VecNormalize) at every size",
        bytes_moved=2 * x.nbytes,
    )


def _return_norm_group(n_envs: int) -> Group:
    from fastppo._cy import _stats as cy
    from fastppo.stats import ReturnNormalizer

    rng = np.random.default_rng(1)
    rewards = rng.standard_normal(n_envs).astype(np.float32)
    term = rng.random(n_envs) < 0.02
    trunc = np.zeros(n_envs, bool)
    gamma, clip, eps = 0.99, 10.0, 1e-8

    np_rms = NumpyRMS(1)
    ret = np.zeros(n_envs)

    def sb3_step() -> np.ndarray:
        # VecNormalize.step_wait's reward path, as written in Stable-Baselines3
        nonlocal ret
        ret = ret * gamma + rewards
        np_rms.update(ret.reshape(-1, 1))
        out = np.clip(rewards / np.sqrt(np_rms.var[0] + eps), -clip, clip)
        ret[term | trunc] = 0.0
        return out

    rn = ReturnNormalizer(n_envs, gamma=gamma, clip=clip, epsilon=eps)
    out = np.empty(n_envs, np.float32)

    # the raw Cython step on [1, N] views, with its own state
    r2 = rewards[None]
    t2, u2 = term.view(np.uint8)[None], trunc.view(np.uint8)[None]

    def cython_impl() -> Callable[[], np.ndarray]:
        ret, mean, var, o2 = np.zeros(n_envs), np.zeros(1), np.ones(1), np.empty_like(r2)
        sc = cy.ReturnScaler(ret, mean, var)
        count = [0]

        def run() -> np.ndarray:
            count[0] += sc.step_f32(r2, t2, u2, None, o2, gamma, clip, eps, float(count[0]))
            return o2[0]

        return run

    def check(results: dict[str, Any]) -> None:
        for label, res in results.items():
            np.testing.assert_allclose(res, results["numpy (SB3)"], rtol=1e-6, err_msg=label)

    return Group(
        name=f"return normalizer step [{n_envs}] float32",
        baseline="numpy (SB3)",
        impls={
            "numpy (SB3)": sb3_step,
            "cython": cython_impl(),
            "fastppo": lambda: rn.normalize(rewards, term, trunc, out=out),
        },
        check=check,
        target="fastppo faster than the numpy step",
    )


def groups(quick: bool, full: bool = False) -> list[Group]:
    """The stats groups: small per-step and large rollout updates, reward scaling."""
    sizes = SMALL + LARGE
    if not quick:
        sizes = sizes + DEFAULT_EXTRA
    if full:
        sizes = sizes + FULL_EXTRA
    out = [_update_group(s, dt) for s, dt in sizes]
    out.append(_normalize_group((8, 4), np.float32))
    out.append(_return_norm_group(16))
    if not quick:
        out.append(_normalize_group((4096, 64), np.float32))
    return out
