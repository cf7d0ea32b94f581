"""Benchmark groups for batched action sampling.

Peers, each doing what fastppo's call does (sample + log-prob, masked where
the group says so):

* ``numpy vectorised``: the fastest numpy formulation we know -- masked
  logits via ``np.where``, max-shift, float32 ``exp`` (SIMD in numpy),
  ``cumsum``, one uniform per env and a vectorised search (count of prefix
  sums <= u * total), log-prob by gather; Gaussian by ``mean + std * z``;
* ``torch``: ``torch.distributions.Categorical(logits=masked)`` /
  ``Normal(mean, std)`` with ``validate_args=False`` (as PPO implementations
  construct them), ``.sample()`` then ``.log_prob()``, CPU, torch's default
  thread count. Reported as "not installed" when torch is absent.

Random draws differ between implementations, so the checks verify that every
result is valid (in range, never a masked action, log-prob consistent with
the action) rather than equal -- except the byte-buffer group, whose logits
are exactly representable in bfloat16, so both fastppo paths must agree
bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from fastppo_bench.core import Group

TORCH_MISSING = "not installed: pip install torch==2.13.0 (the bench extra)"
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def numpy_categorical(
    logits: np.ndarray, mask: np.ndarray, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Masked categorical sample + log-prob, vectorised over envs in numpy (float32)."""
    n, a = logits.shape
    lg = np.where(mask, logits, np.float32(-np.inf))
    lg -= lg.max(axis=1, keepdims=True)
    e = np.exp(lg)
    c = np.cumsum(e, axis=1)
    total = c[:, -1]
    t = gen.random(n, dtype=np.float32) * total
    act = (c <= t[:, None]).sum(axis=1)
    np.minimum(act, a - 1, out=act)  # guard against t rounding up to the total
    logp = lg[np.arange(n), act] - np.log(total)
    return act, logp


def numpy_gaussian(
    mean: np.ndarray, log_std: np.ndarray, gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    z = gen.standard_normal(mean.shape, dtype=np.float32)
    act = mean + np.exp(log_std) * z
    logp = (-0.5 * z * z - log_std - np.float32(HALF_LOG_2PI)).sum(axis=1)
    return act, logp


def _torch_categorical(torch: Any, logits: Any, mask: Any) -> tuple[np.ndarray, np.ndarray]:
    d = torch.distributions.Categorical(
        logits=logits.masked_fill(~mask, float("-inf")), validate_args=False
    )
    a = d.sample()
    return a.numpy(), d.log_prob(a).numpy()


def _torch_gaussian(torch: Any, mean: Any, log_std: Any) -> tuple[np.ndarray, np.ndarray]:
    d = torch.distributions.Normal(mean, log_std.exp(), validate_args=False)
    a = d.sample()
    return a.numpy(), d.log_prob(a).sum(-1).numpy()


def _check_categorical(logits: np.ndarray, mask: np.ndarray) -> Callable[[dict[str, Any]], None]:
    x = np.where(mask, logits.astype(np.float64), -np.inf)
    m = x.max(axis=1, keepdims=True)
    logsm = x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))

    def check(results: dict[str, Any]) -> None:
        rows = np.arange(x.shape[0])
        for label, (act, logp) in results.items():
            act = np.asarray(act).astype(np.int64)
            assert act.shape == (x.shape[0],), label
            assert np.all((act >= 0) & (act < x.shape[1])), f"{label}: action out of range"
            assert np.all(mask[rows, act]), f"{label}: sampled a masked action"
            np.testing.assert_allclose(
                np.asarray(logp, np.float64),
                logsm[rows, act],
                rtol=1e-4,
                atol=1e-4,
                err_msg=label,
            )

    return check


def _check_gaussian(mean: np.ndarray, log_std: np.ndarray) -> Callable[[dict[str, Any]], None]:
    def check(results: dict[str, Any]) -> None:
        for label, (act, logp) in results.items():
            act = np.asarray(act, np.float64)
            assert act.shape == mean.shape, label
            z = (act - mean) / np.exp(log_std.astype(np.float64))
            ref = (-0.5 * z * z - log_std - HALF_LOG_2PI).sum(axis=1)
            np.testing.assert_allclose(logp, ref, rtol=1e-3, atol=1e-3, err_msg=label)
            assert abs(z.mean()) < 0.1 and abs(z.std() - 1) < 0.1, f"{label}: not N(mean, std)"

    return check


def _check_equal(results: dict[str, Any]) -> None:
    (a0, l0), (a1, l1) = results.values()
    np.testing.assert_array_equal(np.frombuffer(a1, np.int64) if isinstance(a1, bytes) else a1, a0)
    np.testing.assert_array_equal(
        np.frombuffer(l1, np.float32) if isinstance(l1, bytes) else l1, l0
    )


def _categorical_inputs(n: int, a: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    logits = (g.standard_normal((n, a)) * 2).astype(np.float32)
    mask = g.random((n, a)) > 0.3
    mask[np.arange(n), g.integers(0, a, n)] = True
    return logits, mask


def _categorical_group(n: int, a: int, torch: Any, per_call: bool) -> Group:
    import fastppo

    logits, mask = _categorical_inputs(n, a)
    gen = np.random.default_rng(1)
    act = np.empty(n, np.int64)
    logp = np.empty(n, np.float32)
    counter = iter(range(1 << 62))
    impls: dict[str, Any] = {
        "numpy vectorised": partial(numpy_categorical, logits, mask, gen),
        # fresh outputs for one env (an actor's step); out= buffers for a batch
        "fastppo": (
            (lambda: fastppo.sample_categorical(logits, mask, seed=0, counter=next(counter)))
            if per_call
            else lambda: fastppo.sample_categorical(
                logits, mask, seed=0, counter=next(counter), out=(act, logp)
            )
        ),
        "torch": TORCH_MISSING,
    }
    if torch is not None:
        impls["torch"] = partial(
            _torch_categorical, torch, torch.from_numpy(logits), torch.from_numpy(mask)
        )
    suffix = " (per-call overhead)" if per_call else ""
    target = (
        "fastppo <= 3 us per call"
        if per_call
        else "fastppo >= 5x numpy vectorised; >= 10x torch (ratio(fastppo) / ratio(torch))"
    )
    return Group(
        name=f"sample_categorical masked [{n}x{a}] float32{suffix}",
        baseline="numpy vectorised",
        impls=impls,
        check=_check_categorical(logits, mask),
        target=target,
        bytes_moved=logits.nbytes + mask.nbytes + act.nbytes + logp.nbytes,
    )


def numpy_multi_categorical(
    logits: np.ndarray, mask: np.ndarray, nvec: tuple[int, ...], gen: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-discrete sample + summed log-prob: :func:`numpy_categorical` per dimension."""
    offs = np.cumsum((0, *nvec))
    acts = []
    logp = np.zeros(logits.shape[0], np.float64)
    for d in range(len(nvec)):
        a, lp = numpy_categorical(
            logits[:, offs[d] : offs[d + 1]], mask[:, offs[d] : offs[d + 1]], gen
        )
        acts.append(a)
        logp = logp + lp
    return np.stack(acts, axis=1), logp


def _torch_multi_categorical(
    torch: Any, logits: Any, mask: Any, nvec: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray]:
    # SB3's MultiCategoricalDistribution: one Categorical per dimension over split logits
    dists = [
        torch.distributions.Categorical(
            logits=x.masked_fill(~m, float("-inf")), validate_args=False
        )
        for x, m in zip(torch.split(logits, nvec, dim=1), torch.split(mask, nvec, dim=1))
    ]
    a = torch.stack([d.sample() for d in dists], dim=1)
    logp = torch.stack([d.log_prob(x) for d, x in zip(dists, torch.unbind(a, dim=1))], 1).sum(1)
    return a.numpy(), logp.numpy()


def _multi_group(n: int, nvec: tuple[int, ...], torch: Any) -> Group:
    import fastppo

    logits, mask = _categorical_inputs(n * len(nvec), nvec[0], seed=6)
    logits = logits.reshape(n, -1)  # equal dimensions: the rows of [D * N, A] side by side
    mask = mask.reshape(n, -1)
    gen = np.random.default_rng(1)
    counter = iter(range(1 << 62))
    flat = "sample_categorical, the same logits as [D*N x A]"
    impls: dict[str, Any] = {
        "numpy vectorised": partial(numpy_multi_categorical, logits, mask, nvec, gen),
        "fastppo": lambda: fastppo.sample_multi_categorical(
            logits, nvec, mask, seed=0, counter=next(counter)
        ),
        flat: lambda: fastppo.sample_categorical(
            logits.reshape(-1, nvec[0]), mask.reshape(-1, nvec[0]), seed=0, counter=next(counter)
        ),
        "torch": TORCH_MISSING,
    }
    if torch is not None:
        impls["torch"] = partial(
            _torch_multi_categorical, torch, torch.from_numpy(logits), torch.from_numpy(mask), nvec
        )
    offs = np.cumsum((0, *nvec))
    checks = [
        _check_categorical(logits[:, offs[d] : offs[d + 1]], mask[:, offs[d] : offs[d + 1]])
        for d in range(len(nvec))
    ]
    x = np.where(mask, logits.astype(np.float64), -np.inf)

    def check(results: dict[str, Any]) -> None:
        for label, (act, logp) in results.items():
            act = np.asarray(act).reshape(n, len(nvec))
            logp = np.asarray(logp, np.float64).reshape(n, -1).sum(axis=1)
            total = 0.0
            for d in range(len(nvec)):
                xd = x[:, offs[d] : offs[d + 1]]
                m = xd.max(axis=1)
                lsm = xd[np.arange(n), act[:, d]] - m - np.log(np.exp(xd - m[:, None]).sum(axis=1))
                checks[d]({label: (act[:, d], lsm)})  # range, mask
                total = total + lsm
            np.testing.assert_allclose(logp, total, rtol=1e-4, atol=1e-4, err_msg=label)

    return Group(
        name=f"sample_multi_categorical masked [{n}x{nvec}] float32",
        baseline="numpy vectorised",
        impls=impls,
        check=check,
        target=f"fastppo time <= 1.5x {flat}; >= 10x torch",
        bytes_moved=logits.nbytes + mask.nbytes + 8 * n * len(nvec) + 4 * n,
    )


def _gaussian_group(n: int, a: int, torch: Any) -> Group:
    import fastppo

    g = np.random.default_rng(2)
    mean = g.standard_normal((n, a)).astype(np.float32)
    log_std = (g.standard_normal(a) * 0.2 - 0.5).astype(np.float32)
    gen = np.random.default_rng(3)
    act = np.empty((n, a), np.float32)
    logp = np.empty(n, np.float32)
    counter = iter(range(1 << 62))
    impls: dict[str, Any] = {
        "numpy vectorised": partial(numpy_gaussian, mean, log_std, gen),
        "fastppo": lambda: fastppo.sample_gaussian(
            mean, log_std, seed=0, counter=next(counter), out=(act, logp)
        ),
        "torch": TORCH_MISSING,
    }
    if torch is not None:
        tm = torch.from_numpy(mean)
        tls = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(log_std, mean.shape)))
        impls["torch"] = partial(_torch_gaussian, torch, tm, tls)
    return Group(
        name=f"sample_gaussian [{n}x{a}] float32",
        baseline="numpy vectorised",
        impls=impls,
        check=_check_gaussian(mean, log_std),
        # issue 12's goal for the Gaussian (the categorical's is 10x)
        target="fastppo >= 5x torch (ratio(fastppo) / ratio(torch))",
        bytes_moved=mean.nbytes + act.nbytes + logp.nbytes,
    )


def _squash_group(n: int, a: int) -> Group:
    """``sample_gaussian`` squashed beside the same draw unsquashed (issue 12:
    at most 1.5x). The squashed action is ``tanh32`` of the plain one, bit for
    bit (``reference.fastmath.tanh32``), which the check holds."""
    import fastppo
    from fastppo.reference.fastmath import tanh32

    g = np.random.default_rng(2)
    mean = g.standard_normal((n, a)).astype(np.float32)
    log_std = (g.standard_normal(a) * 0.2 - 0.5).astype(np.float32)
    outs = {k: (np.empty((n, a), np.float32), np.empty(n, np.float32)) for k in (0, 1)}

    def draw(squash: bool) -> Any:
        return lambda: fastppo.sample_gaussian(
            mean, log_std, seed=0, counter=1, squash=squash, out=outs[squash]
        )

    def check(res: dict[str, Any]) -> None:
        (plain, _), (sq, lp) = res["squash=False"], res["squash=True"]
        np.testing.assert_array_equal(sq, tanh32(plain))
        assert np.all(np.isfinite(lp))

    return Group(
        name=f"sample_gaussian [{n}x{a}] float32: squash beside the plain call",
        baseline="squash=False",
        impls={"squash=False": draw(False), "squash=True": draw(True)},
        check=check,
        target="squash=True time <= 1.5x squash=False (ratio >= 0.67)",
        bytes_moved=mean.nbytes + n * a * 4 + n * 4,
    )


def numpy_gaussian_logp(
    mean: np.ndarray, log_std: np.ndarray, act: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian log-density of stored actions + entropy, vectorised in numpy (float32)."""
    z = (act - mean) * np.exp(-log_std)
    logp = (-0.5 * z * z - log_std - np.float32(HALF_LOG_2PI)).sum(axis=1)
    ent = np.full(mean.shape[0], (log_std + np.float32(0.5 + HALF_LOG_2PI)).sum(), np.float32)
    return logp, ent


def numpy_categorical_logp(
    logits: np.ndarray, mask: np.ndarray, act: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Masked log-softmax at stored actions + entropy, vectorised in numpy (float32)."""
    lg = np.where(mask, logits, np.float32(-np.inf))
    lg -= lg.max(axis=1, keepdims=True)
    e = np.exp(lg)
    s = e.sum(axis=1)
    logsm = lg - np.log(s)[:, None]
    p = e / s[:, None]
    ent = -(p * np.where(mask, logsm, np.float32(0))).sum(axis=1)
    return logsm[np.arange(logits.shape[0]), act], ent


def _logp_group(n: int, a: int, torch: Any, categorical: bool) -> Group:
    """``categorical_logp_entropy`` / ``gaussian_logp_entropy`` on stored actions (the
    PPO update's evaluation), beside numpy and torch's distributions."""
    import fastppo

    if categorical:
        logits, mask = _categorical_inputs(n, a, seed=7)
        act, _ = fastppo.sample_categorical(logits, mask, seed=1, counter=2)
        x = np.where(mask, logits.astype(np.float64), -np.inf)
        lse = np.logaddexp.reduce(x, axis=1)
        p = np.exp(x - lse[:, None])
        want = (x[np.arange(n), act] - lse, -(p * np.where(mask, x - lse[:, None], 0)).sum(1))
        impls: dict[str, Any] = {
            "numpy vectorised": partial(numpy_categorical_logp, logits, mask, act),
            "fastppo": partial(fastppo.categorical_logp_entropy, logits, act, mask),
            "torch": TORCH_MISSING,
        }
        if torch is not None:
            tl, tm, ta = (torch.from_numpy(v) for v in (logits, mask, act))

            def torch_cat() -> tuple[np.ndarray, np.ndarray]:
                d = torch.distributions.Categorical(
                    logits=tl.masked_fill(~tm, float("-inf")), validate_args=False
                )
                return d.log_prob(ta).numpy(), d.entropy().numpy()

            impls["torch"] = torch_cat
        name = f"categorical_logp_entropy masked [{n}x{a}] float32"
        moved = logits.nbytes + mask.nbytes + act.nbytes + 8 * n
    else:
        g = np.random.default_rng(8)
        mean = g.standard_normal((n, a)).astype(np.float32)
        log_std = (g.standard_normal(a) * 0.2 - 0.5).astype(np.float32)
        act, _ = fastppo.sample_gaussian(mean, log_std, seed=1, counter=2)
        ls64 = log_std.astype(np.float64)
        z = (act - mean.astype(np.float64)) / np.exp(ls64)
        want = (
            (-0.5 * z * z - ls64 - HALF_LOG_2PI).sum(1),
            np.full(n, (ls64 + 0.5 + HALF_LOG_2PI).sum()),
        )
        impls = {
            "numpy vectorised": partial(numpy_gaussian_logp, mean, log_std, act),
            "fastppo": partial(fastppo.gaussian_logp_entropy, mean, log_std, act),
            "torch": TORCH_MISSING,
        }
        if torch is not None:
            tm, ta = torch.from_numpy(mean), torch.from_numpy(act)
            tls = torch.from_numpy(np.ascontiguousarray(np.broadcast_to(log_std, mean.shape)))

            def torch_gauss() -> tuple[np.ndarray, np.ndarray]:
                d = torch.distributions.Normal(tm, tls.exp(), validate_args=False)
                return d.log_prob(ta).sum(-1).numpy(), d.entropy().sum(-1).numpy()

            impls["torch"] = torch_gauss
        name = f"gaussian_logp_entropy [{n}x{a}] float32"
        moved = mean.nbytes + act.nbytes + 8 * n

    def check(results: dict[str, Any]) -> None:
        for label, (logp, ent) in results.items():
            for got, ref in ((logp, want[0]), (ent, want[1])):
                np.testing.assert_allclose(
                    np.asarray(got, np.float64), ref, rtol=1e-4, atol=1e-4, err_msg=label
                )

    return Group(
        name=name,
        baseline="numpy vectorised",
        impls=impls,
        check=check,
        target="fastppo >= 5x torch (ratio(fastppo) / ratio(torch))",
        bytes_moved=moved,
    )


def _bytes_group(n: int, a: int) -> Group:
    import fastppo
    from fastppo import codec

    logits, mask = _categorical_inputs(n, a, seed=4)
    # bfloat16-exact logits: the float32 and the bfloat16 paths see the same values
    buf = codec.encode(logits, "bfloat16")
    logits = codec.decode(buf, "bfloat16", (n, a))
    mask_buf = mask.astype(np.uint8).tobytes()
    return Group(
        name=f"sample_categorical_bytes bfloat16 [{n}x{a}] masked",
        baseline="sample_categorical float32 arrays",
        impls={
            "sample_categorical float32 arrays": lambda: fastppo.sample_categorical(
                logits, mask, seed=5, counter=6
            ),
            "sample_categorical_bytes bfloat16": lambda: fastppo.sample_categorical_bytes(
                buf, n_envs=n, n_actions=a, dtype="bfloat16", mask_buf=mask_buf, seed=5, counter=6
            ),
        },
        check=_check_equal,
        target="bytes path time <= 1.3x the float32 array path (ratio >= 0.77)",
        bytes_moved=len(buf) + len(mask_buf) + 12 * n,
    )


def groups(quick: bool, full: bool = False) -> list[Group]:
    """The sampling groups: [4096x18] categorical, [1x4] per call, [4096x(6,6,6)]
    multi-discrete, [4096x6] Gaussian (and squashed beside plain), bytes,
    and the log-prob + entropy of stored actions (categorical [4096x18], Gaussian [4096x6]).

    ``full`` adds a small [256x6] and a large [16384x18] categorical.
    """
    torch = _torch()
    sizes = [(4096, 18)]
    if full:
        sizes = [(256, 6), (4096, 18), (16384, 18)]
    out = [_categorical_group(n, a, torch, per_call=False) for n, a in sizes]
    out.append(_categorical_group(1, 4, torch, per_call=True))
    out.append(_multi_group(4096, (6, 6, 6), torch))
    out.append(_gaussian_group(4096, 6, torch))
    out.append(_squash_group(4096, 6))
    out.append(_bytes_group(4096, 18))
    out.append(_logp_group(4096, 18, torch, categorical=True))
    out.append(_logp_group(4096, 6, torch, categorical=False))
    return out
