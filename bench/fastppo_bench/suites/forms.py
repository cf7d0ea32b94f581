"""The same call in every input form a framework hands over, beside its best form.

Frameworks pass their own array forms: torch CPU tensors, read-only rollout
buffers, batch-major ``[N, T]`` storage transposed to ``[T, N]`` (torchrl,
tianshou), Fortran order, strided slices, bool / uint8 / float flags, a
per-env ``log_std [N, A]`` (what SB3 and torch policies broadcast) instead of
a state-independent ``[A]``. Each group times one public call on the same
data in each form; the baseline is the form fastppo is fastest on, so a ratio
below 1 is the cost of the form. Issue 12's target: every form within 1.5x
(ratio >= 0.67). Every form must give the same result, bit for bit (checked).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from fastppo_bench.core import Group

TARGET = "every form within 1.5x of the best (ratio >= 0.67)"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _readonly(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a


def _strided(a: np.ndarray) -> np.ndarray:
    """The same values as a view with a gap between elements of the last axis."""
    wide = np.zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
    wide[..., ::2] = a
    return wide[..., ::2]


def _batch_major(a: np.ndarray) -> np.ndarray:
    """The same ``[T, N]`` values, stored ``[N, T]`` and handed over transposed."""
    return np.ascontiguousarray(a.T).T


def _same(results: dict[str, Any]) -> None:
    items = list(results.items())
    _, first = items[0]
    for label, res in items[1:]:
        for a, b in zip(
            first if isinstance(first, tuple) else (first,),
            res if isinstance(res, tuple) else (res,),
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=label)


def _forms(
    name: str,
    call: Callable[..., Any],
    base: dict[str, Any],
    variants: dict[str, dict[str, Any] | str],
) -> Group:
    """One group: ``call(**base)`` as the baseline, then each variant's overrides."""
    impls: dict[str, Callable[[], Any] | str] = {"best form": partial(call, **base)}
    for label, over in variants.items():
        impls[label] = over if isinstance(over, str) else partial(call, **{**base, **over})
    return Group(
        name=f"forms: {name}", baseline="best form", impls=impls, check=_same, target=TARGET
    )


def _sweep_forms(torch: Any, T: int, N: int) -> list[Group]:
    import fastppo

    rng = np.random.default_rng(0)
    r = rng.standard_normal((T, N)).astype(np.float32)
    v = rng.standard_normal((T, N)).astype(np.float32)
    lv = rng.standard_normal(N).astype(np.float32)
    te = rng.random((T, N)) < 0.01
    tt = torch.from_numpy if torch is not None else None
    no_torch = "not installed: pip install torch==2.13.0 (the bench extra)"
    base = {"rewards": r, "values": v, "last_values": lv, "terminated": te}
    variants: dict[str, dict[str, Any] | str] = {
        "read-only": {"rewards": _readonly(r), "values": _readonly(v), "terminated": _readonly(te)},
        "batch-major [N, T].T": {
            "rewards": _batch_major(r),
            "values": _batch_major(v),
            "terminated": _batch_major(te),
        },
        "Fortran order": {
            "rewards": np.asfortranarray(r),
            "values": np.asfortranarray(v),
            "terminated": np.asfortranarray(te),
        },
        "strided": {"rewards": _strided(r), "values": _strided(v)},
        "uint8 flags": {"terminated": te.astype(np.uint8)},
        "float flags": {"terminated": te.astype(np.float32)},
        "torch tensors": no_torch
        if tt is None
        else {"rewards": tt(r), "values": tt(v), "last_values": tt(lv), "terminated": tt(te)},
    }
    returns_variants = {
        k: ({kk: vv for kk, vv in o.items() if kk != "values"} if isinstance(o, dict) else o)
        for k, o in variants.items()
    }
    rbase = {k: x for k, x in base.items() if k != "values"}
    # V-trace: the same forms, its log-probs in the form of the other arrays
    blp = (0.3 * rng.standard_normal((T, N))).astype(np.float32)
    tlp = (0.3 * rng.standard_normal((T, N))).astype(np.float32)
    logp_forms: dict[str, Callable[[np.ndarray], Any]] = {
        "read-only": _readonly,
        "batch-major [N, T].T": _batch_major,
        "Fortran order": np.asfortranarray,
        "strided": _strided,
    }
    if tt is not None:
        logp_forms["torch tensors"] = tt
    vbase = {"behavior_logp": blp, "target_logp": tlp, **base}
    vtrace_variants: dict[str, dict[str, Any] | str] = {}
    for label, over in variants.items():
        form = logp_forms.get(label)
        if isinstance(over, dict) and form is not None:
            over = {**over, "behavior_logp": form(blp), "target_logp": form(tlp)}
        vtrace_variants[label] = over
    return [
        _forms(f"gae [{T}x{N}] float32", fastppo.gae, base, variants),
        _forms(f"vtrace [{T}x{N}] float32", fastppo.vtrace, vbase, vtrace_variants),
        _forms(
            f"discounted_returns [{T}x{N}] float32",
            fastppo.discounted_returns,
            rbase,
            returns_variants,
        ),
    ]


def _sampler_forms(torch: Any) -> list[Group]:
    import fastppo

    rng = np.random.default_rng(1)
    no_torch = "not installed: pip install torch==2.13.0 (the bench extra)"
    tt = torch.from_numpy if torch is not None else None
    mu = rng.standard_normal((4096, 6)).astype(np.float32)
    ls = (0.1 * rng.standard_normal(6)).astype(np.float32)
    ls_n = np.ascontiguousarray(np.broadcast_to(ls, mu.shape))
    gbase = {"mean": mu, "log_std": ls, "seed": 1, "counter": 2}
    gaussian = _forms(
        "sample_gaussian [4096x6] float32",
        fastppo.sample_gaussian,
        gbase,
        {
            "log_std [N, A]": {"log_std": ls_n},
            "log_std broadcast view": {"log_std": np.broadcast_to(ls, mu.shape)},
            "read-only": {"mean": _readonly(mu), "log_std": _readonly(ls)},
            "strided mean": {"mean": _strided(mu)},
            "torch tensors": no_torch if tt is None else {"mean": tt(mu), "log_std": tt(ls)},
            "torch, log_std [N, A]": no_torch
            if tt is None
            else {"mean": tt(mu), "log_std": tt(ls_n)},
        },
    )
    lg = rng.standard_normal((4096, 18)).astype(np.float32)
    mk = rng.random((4096, 18)) < 0.8
    mk[:, 0] = True
    cbase = {"logits": lg, "mask": mk, "seed": 1, "counter": 2}
    categorical = _forms(
        "sample_categorical [4096x18] float32 + mask",
        fastppo.sample_categorical,
        cbase,
        {
            "read-only": {"logits": _readonly(lg), "mask": _readonly(mk)},
            "strided logits": {"logits": _strided(lg)},
            "uint8 mask": {"mask": mk.astype(np.uint8)},
            "torch tensors": no_torch if tt is None else {"logits": tt(lg), "mask": tt(mk)},
        },
    )
    one = lg[:1].copy()
    single = _forms(
        "sample_categorical N = 1 float32",
        fastppo.sample_categorical,
        {"logits": one, "seed": 1, "counter": 2},
        {
            "read-only": {"logits": _readonly(one)},
            "torch tensor": no_torch if tt is None else {"logits": tt(one)},
        },
    )
    return [gaussian, categorical, single]


def _state_check(results: dict[str, Any]) -> None:
    """The running states after one update each: the same bits in every form."""
    items = list(results.items())
    want = items[0][1].state_dict()
    for label, rms in items[1:]:
        assert rms.state_dict() == want, label


def _updating(rms_shape: tuple[int, ...], batch: Any) -> Callable[[], Any]:
    """``RunningMeanStd.update`` on a state of its own (returned for the check)."""
    import fastppo

    rms = fastppo.RunningMeanStd(rms_shape)

    def call() -> Any:
        rms.update(batch)
        return rms

    return call


def _normalizing(n_envs: int, args: dict[str, Any]) -> Callable[[], Any]:
    """``ReturnNormalizer.normalize`` on a normalizer of its own: returns the
    scaled rewards and the normalizer (for the check)."""
    import fastppo

    rn = fastppo.ReturnNormalizer(n_envs)

    def call() -> Any:
        return rn.normalize(**args), rn

    return call


def _normalizer_check(results: dict[str, Any]) -> None:
    """After one call each: the same scaled rewards and state in every form."""
    items = list(results.items())
    out0, rn0 = items[0][1]
    for label, (out, rn) in items[1:]:
        np.testing.assert_array_equal(np.asarray(out), out0, err_msg=label)
        assert rn.state_dict() == rn0.state_dict(), label


def _kernel_forms(torch: Any, n: int, T: int, N: int) -> list[Group]:
    """The other public kernels: log-densities, multi-discrete sampling, running
    statistics and the next-step valid mask, ``n`` envs (or samples) and a
    ``[T, N]`` rollout, in the forms of :func:`_sweep_forms`."""
    import fastppo

    rng = np.random.default_rng(2)
    no_torch = "not installed: pip install torch==2.13.0 (the bench extra)"
    tt = torch.from_numpy if torch is not None else None
    groups = []
    lg = rng.standard_normal((n, 18)).astype(np.float32)
    mk = rng.random((n, 18)) < 0.8
    mk[:, 0] = True
    act = np.argmax(np.where(mk, lg, -np.inf), 1)
    groups.append(
        _forms(
            f"categorical_logp_entropy [{n}x18] float32 + mask",
            fastppo.categorical_logp_entropy,
            {"logits": lg, "actions": act, "mask": mk},
            {
                "read-only": {"logits": _readonly(lg), "actions": _readonly(act)},
                "strided logits": {"logits": _strided(lg)},
                "Fortran logits": {"logits": np.asfortranarray(lg)},
                "uint8 mask": {"mask": mk.astype(np.uint8)},
                "int32 actions": {"actions": act.astype(np.int32)},
                "torch tensors": no_torch
                if tt is None
                else {"logits": tt(lg), "actions": tt(act), "mask": tt(mk)},
            },
        )
    )
    mu = rng.standard_normal((n, 6)).astype(np.float32)
    ls = (0.1 * rng.standard_normal(6)).astype(np.float32)
    a = (mu + 0.3 * rng.standard_normal((n, 6))).astype(np.float32)
    groups.append(
        _forms(
            f"gaussian_logp_entropy [{n}x6] float32",
            fastppo.gaussian_logp_entropy,
            {"mean": mu, "log_std": ls, "actions": a},
            {
                "log_std [N, A]": {"log_std": np.ascontiguousarray(np.broadcast_to(ls, mu.shape))},
                "log_std broadcast view": {"log_std": np.broadcast_to(ls, mu.shape)},
                "read-only": {"mean": _readonly(mu), "actions": _readonly(a)},
                "strided mean": {"mean": _strided(mu)},
                "Fortran": {"mean": np.asfortranarray(mu), "actions": np.asfortranarray(a)},
                "torch tensors": no_torch
                if tt is None
                else {"mean": tt(mu), "log_std": tt(ls), "actions": tt(a)},
            },
        )
    )
    ml = rng.standard_normal((n, 18)).astype(np.float32)
    groups.append(
        _forms(
            f"sample_multi_categorical [{n}x(3,4,5,6)] float32",
            fastppo.sample_multi_categorical,
            {"logits": ml, "nvec": np.array([3, 4, 5, 6]), "seed": 1, "counter": 2},
            {
                "read-only": {"logits": _readonly(ml)},
                "strided logits": {"logits": _strided(ml)},
                "Fortran logits": {"logits": np.asfortranarray(ml)},
                "nvec list": {"nvec": [3, 4, 5, 6]},
                "torch tensor": no_torch if tt is None else {"logits": tt(ml)},
            },
        )
    )
    x = rng.standard_normal((n, 17)).astype(np.float32)
    x_forms: dict[str, Any] = {
        "read-only": _readonly(x),
        "strided": _strided(x),
        "Fortran": np.asfortranarray(x),
        "torch tensor": no_torch if tt is None else tt(x),
    }
    groups.append(
        Group(
            name=f"forms: RunningMeanStd.update [{n}x17] float32",
            baseline="best form",
            impls={
                label: f if isinstance(f, str) else _updating((17,), f)
                for label, f in {"best form": x, **x_forms}.items()
            },
            check=_state_check,
            target=TARGET,
        )
    )
    rms = fastppo.RunningMeanStd((17,))
    rms.update(x)
    groups.append(
        _forms(
            f"RunningMeanStd.normalize [{n}x17] float32",
            lambda x: rms.normalize(x, clip=5.0),
            {"x": x},
            {k: f if isinstance(f, str) else {"x": f} for k, f in x_forms.items()},
        )
    )
    r = rng.standard_normal((T, N)).astype(np.float32)
    rms1 = fastppo.RunningMeanStd(())
    rms1.update(r)
    groups.append(
        _forms(
            f"normalize_returns [{T}x{N}] float32 (update=False)",
            lambda returns: fastppo.normalize_returns(returns, rms1, update=False),
            {"returns": r},
            {
                "read-only": {"returns": _readonly(r)},
                "batch-major [N, T].T": {"returns": _batch_major(r)},
                "Fortran order": {"returns": np.asfortranarray(r)},
                "strided": {"returns": _strided(r)},
                "torch tensor": no_torch if tt is None else {"returns": tt(r)},
            },
        )
    )
    groups.append(
        Group(
            name=f"forms: normalize_returns update [{T}x{N}] float32",
            baseline="best form",
            impls={
                label: f if isinstance(f, str) else _updating((), f)
                for label, f in {
                    "best form": r,
                    "batch-major [N, T].T": _batch_major(r),
                    "Fortran order": np.asfortranarray(r),
                    "strided": _strided(r),
                    "torch tensor": no_torch if tt is None else tt(r),
                }.items()
            },
            check=_state_check,
            target=TARGET,
        )
    )
    te = rng.random((T, N)) < 0.01
    tr = rng.random((T, N)) < 0.01
    # the per-step normalizer: one step of N envs (as a training loop calls it)
    # and a [T, N] block of steps
    for rr, tte, ttr in ((r[0], te[0], tr[0]), (r, te, tr)):
        base = {"rewards": rr, "terminated": tte, "truncated": ttr}
        step_forms: dict[str, Any] = {
            "best form": base,
            "uint8 flags": {
                **base,
                "terminated": tte.view(np.uint8),
                "truncated": ttr.view(np.uint8),
            },
            "float flags": {
                **base,
                "terminated": tte.astype(np.float32),
                "truncated": ttr.astype(np.float32),
            },
            "strided rewards": {**base, "rewards": _strided(rr)},
            "torch tensors": no_torch
            if tt is None
            else {"rewards": tt(rr), "terminated": tt(tte), "truncated": tt(ttr)},
        }
        if rr.ndim == 2:
            step_forms["Fortran order"] = {k: np.asfortranarray(x) for k, x in base.items()}
        groups.append(
            Group(
                name=f"forms: ReturnNormalizer.normalize {list(rr.shape)} float32",
                baseline="best form",
                impls={
                    label: f if isinstance(f, str) else _normalizing(N, f)
                    for label, f in step_forms.items()
                },
                check=_normalizer_check,
                target=TARGET,
            )
        )
    groups.append(
        _forms(
            f"next_step_valid [{T}x{N}]",
            fastppo.next_step_valid,
            {"terminated": te, "truncated": tr},
            {
                "read-only": {"terminated": _readonly(te), "truncated": _readonly(tr)},
                "batch-major [N, T].T": {
                    "terminated": _batch_major(te),
                    "truncated": _batch_major(tr),
                },
                "Fortran order": {
                    "terminated": np.asfortranarray(te),
                    "truncated": np.asfortranarray(tr),
                },
                "strided": {"terminated": _strided(te), "truncated": _strided(tr)},
                "uint8 flags": {"terminated": te.view(np.uint8), "truncated": tr.view(np.uint8)},
                "float flags": {
                    "terminated": te.astype(np.float32),
                    "truncated": tr.astype(np.float32),
                },
                "torch tensors": no_torch
                if tt is None
                else {"terminated": tt(te), "truncated": tt(tr)},
            },
        )
    )
    return groups


def groups(quick: bool, full: bool = False) -> list[Group]:
    torch = _torch()  # tensors only carry the data here: no torch compute is timed
    T, N = (512, 64) if quick and not full else (2048, 256)
    # [8x4]: a call small enough that each form's handling (a view, a copy, a
    # conversion) is most of its cost, as an N = 1 actor or a short rollout
    # pays it; the small-call fast path takes every form it can convert
    n = 1024 if quick and not full else 4096
    return (
        _sweep_forms(torch, 8, 4)
        + _sweep_forms(torch, T, N)
        + _sampler_forms(torch)
        + _kernel_forms(torch, 8, 8, 4)
        + _kernel_forms(torch, n, T, N)
    )
