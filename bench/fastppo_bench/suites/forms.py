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


def groups(quick: bool, full: bool = False) -> list[Group]:
    torch = _torch()  # tensors only carry the data here: no torch compute is timed
    T, N = (512, 64) if quick and not full else (2048, 256)
    # [8x4]: a call small enough that each form's handling (a view, a copy, a
    # conversion) is most of its cost, as an N = 1 actor or a short rollout
    # pays it; the small-call fast path takes every form it can convert
    return _sweep_forms(torch, 8, 4) + _sweep_forms(torch, T, N) + _sampler_forms(torch)
