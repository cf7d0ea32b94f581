"""Refusal matrices of the three sweeps: the fast path and the general path agree.

For ``gae``, ``vtrace`` and ``discounted_returns`` and each way a call can be
unusual, the small-call fast path (``fastppo._cy._fast``) must decline (return
None) and then:

* a call that is invalid raises the house error from the general path, and the
  caller's ``out=`` buffers are untouched (nothing half-written);
* a call that is valid but unusual in form (strided, read-only, float flags, a
  large problem) runs on the general path with the reference's result.

``out=`` may not overlap any input, in any form (issue 13, class 6): a buffer
of ``final_values``, a uint8 view of an output passed as a flag array, a
zero-stride view, nested lists (which would be copied and the result lost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import fastppo
from fastppo import _dispatch
from fastppo._cy import _fast
from fastppo.reference import advantages as R

T, N = 8, 4
SWEEPS = ("gae", "vtrace", "discounted_returns")
# positional order of each fast-path entry
_FAST_ARGS = {
    "gae": ("rewards", "values", "last_values", "terminated", "truncated", "final_values",
            "valid", "gamma", "gae_lambda", "out"),
    "vtrace": ("behavior_logp", "target_logp", "rewards", "values", "last_values", "terminated",
               "truncated", "final_values", "valid", "gamma", "lam", "rho_bar", "c_bar",
               "pg_rho_bar", "out"),
    "discounted_returns": ("rewards", "last_values", "terminated", "truncated", "final_values",
                           "valid", "gamma", "out"),
}  # fmt: skip
_DEFAULTS = {"gamma": 0.99, "gae_lambda": 0.95, "lam": 1.0, "rho_bar": 1.0, "c_bar": 1.0}
_DEFAULTS["pg_rho_bar"] = 1.0


def _base(sweep: str, dt: type) -> dict[str, Any]:
    rng = np.random.default_rng(4)
    kw: dict[str, Any] = {
        "rewards": rng.standard_normal((T, N)).astype(dt),
        "last_values": rng.standard_normal(N).astype(dt),
        "terminated": rng.random((T, N)) < 0.2,
        "truncated": None,
        "final_values": None,
        "valid": None,
    }
    if sweep != "discounted_returns":
        kw["values"] = rng.standard_normal((T, N)).astype(dt)
    if sweep == "vtrace":
        kw["behavior_logp"] = (0.3 * rng.standard_normal((T, N))).astype(dt)
        kw["target_logp"] = (0.3 * rng.standard_normal((T, N))).astype(dt)
    return kw


def _n_out(sweep: str) -> int:
    return 1 if sweep == "discounted_returns" else 2


def _fresh_out(kw: dict[str, Any], sweep: str) -> Any:
    outs = tuple(np.full((T, N), 7.0, kw["rewards"].dtype) for _ in range(_n_out(sweep)))
    return outs[0] if len(outs) == 1 else outs


def _public(sweep: str, kw: dict[str, Any]) -> Any:
    kw = dict(kw)
    if sweep == "vtrace":
        return fastppo.vtrace(kw.pop("behavior_logp"), kw.pop("target_logp"), **kw)
    return getattr(fastppo, sweep)(**kw)


def _tuple(res: Any) -> tuple[np.ndarray, ...]:
    return res if isinstance(res, tuple) else (res,)


def _fast_call(sweep: str, kw: dict[str, Any]) -> Any:
    full = {**_DEFAULTS, "out": None, **kw}
    return getattr(_fast, sweep)(*(full[k] for k in _FAST_ARGS[sweep]))


def _aliased_flag(kw: dict[str, Any], sweep: str, name: str) -> None:
    """``name`` becomes a uint8 view of the first output buffer."""
    out = _fresh_out(kw, sweep)
    first = out if isinstance(out, np.ndarray) else out[0]
    kw[name] = first.view(np.uint8)[:, :N]
    kw[name][...] = name == "valid"  # all valid, or no episode ends
    kw["out"] = out


def _edit(**changes: Any) -> Callable[[dict[str, Any], str], None]:
    def f(kw: dict[str, Any], sweep: str) -> None:
        kw.update(changes)

    return f


def _out_is(make: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any], str], None]:
    def f(kw: dict[str, Any], sweep: str) -> None:
        o = make(kw)
        kw["out"] = o if _n_out(sweep) == 1 else (o, np.full((T, N), 7.0, kw["rewards"].dtype))

    return f


def _nan_reward(kw: dict[str, Any], sweep: str) -> None:
    r = kw["rewards"].copy()
    r[5, 2] = np.nan
    kw["rewards"] = r


def _truncated_without_bootstrap(kw: dict[str, Any], sweep: str) -> None:
    kw["truncated"] = np.zeros((T, N), bool)
    kw["truncated"][2, 1] = True
    kw["terminated"] = np.zeros((T, N), bool)


def _final_values_as_out(kw: dict[str, Any], sweep: str) -> None:
    kw["truncated"] = np.zeros((T, N), bool)
    kw["out"] = _fresh_out(kw, sweep)
    kw["final_values"] = kw["out"] if _n_out(sweep) == 1 else kw["out"][1]


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _zero_stride(kw: dict[str, Any]) -> np.ndarray:
    return as_strided(np.zeros(1, kw["rewards"].dtype), shape=(T, N), strides=(0, 0))


# why -> (edit of the base call, sweeps it applies to)
INVALID: dict[str, tuple[Callable[[dict[str, Any], str], None], tuple[str, ...]]] = {
    "nan reward": (_nan_reward, SWEEPS),
    "gamma above 1": (_edit(gamma=1.5), SWEEPS),
    "nan gamma": (_edit(gamma=float("nan")), SWEEPS),
    "nan lambda": (_edit(gae_lambda=float("nan")), ("gae",)),
    "lam below 0": (_edit(lam=-0.1), ("vtrace",)),
    "rho_bar 0": (_edit(rho_bar=0.0), ("vtrace",)),
    "truncation without bootstrap": (_truncated_without_bootstrap, SWEEPS),
    "out overlaps rewards": (_out_is(lambda kw: kw["rewards"]), SWEEPS),
    "out read-only": (
        _out_is(lambda kw: _read_only(np.zeros((T, N), kw["rewards"].dtype))),
        SWEEPS,
    ),
    "out of another dtype": (_out_is(lambda kw: np.zeros((T, N), np.float16)), SWEEPS),
    "out zero-stride": (_out_is(_zero_stride), SWEEPS),
    "out nested lists": (_out_is(lambda kw: [[0.0] * N for _ in range(T)]), SWEEPS),
    "out is final_values": (_final_values_as_out, SWEEPS),
    "terminated a uint8 view of out": (
        lambda kw, s: _aliased_flag(kw, s, "terminated"),
        SWEEPS,
    ),
    "valid a uint8 view of out": (lambda kw, s: _aliased_flag(kw, s, "valid"), SWEEPS),
}

FORM: dict[str, tuple[Callable[[dict[str, Any], str], None], tuple[str, ...]]] = {
    "strided rewards": (
        lambda kw, s: kw.update(rewards=np.repeat(kw["rewards"], 2, axis=1)[:, ::2]),
        SWEEPS,
    ),
    "memoryview last_values": (
        lambda kw, s: kw.update(last_values=memoryview(kw["last_values"])),
        SWEEPS,
    ),
    "float flags": (
        lambda kw, s: kw.update(terminated=kw["terminated"].astype(np.float32)),
        SWEEPS,
    ),
    "read-only inputs": (
        lambda kw, s: [kw[k].setflags(write=False) for k in ("rewards", "last_values")],
        SWEEPS,
    ),
}


def _cases(table: dict) -> list:
    return [(sweep, why) for why, (_, sweeps) in table.items() for sweep in sweeps]


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize(("sweep", "why"), _cases(INVALID))
def test_invalid_calls_are_declined_then_refused_untouched(sweep, why, dt) -> None:
    kw = _base(sweep, dt)
    INVALID[why][0](kw, sweep)
    kw.setdefault("out", _fresh_out(kw, sweep))
    outs = [o for o in (kw["out"] if isinstance(kw["out"], tuple) else (kw["out"],))]
    before = [np.array(o, copy=True) for o in outs]
    snapshot = {k: np.array(v, copy=True) for k, v in kw.items() if isinstance(v, np.ndarray)}
    assert _fast_call(sweep, kw) is None, why
    with pytest.raises((ValueError, TypeError), match=f"^{sweep}: "):
        _public(sweep, kw)
    for o, b in zip(outs, before):
        np.testing.assert_array_equal(np.asarray(o), b, err_msg=why)
    for k, v in snapshot.items():
        np.testing.assert_array_equal(kw[k], v, err_msg=f"{why}: {k} changed")


#: The forms the fast path converts itself, as the general path would (the rest
#: are the general path's).
FAST_FORMS = ("strided rewards", "float flags", "read-only inputs")


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize(("sweep", "why"), _cases(FORM))
def test_unusual_valid_calls_give_the_reference_results(sweep, why, dt) -> None:
    kw = _base(sweep, dt)
    FORM[why][0](kw, sweep)
    assert (_fast_call(sweep, kw) is not None) == (why in FAST_FORMS), why
    got = _public(sweep, kw)
    ref_kw = {k: (np.asarray(v) if v is not None else None) for k, v in kw.items()}
    want = _reference(sweep, ref_kw)
    tol = 1e-5 if dt == np.float32 else 1e-12
    for g, w in zip(got if isinstance(got, tuple) else (got,), want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=why)


def _reference(sweep: str, kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    kw = {k: v for k, v in kw.items() if v is not None}
    if sweep == "vtrace":
        b, t = kw.pop("behavior_logp"), kw.pop("target_logp")
        r, v, lv, te = (kw.pop(k) for k in ("rewards", "values", "last_values", "terminated"))
        return tuple(R.vtrace(b, t, r, v, lv, te, **kw))
    if sweep == "gae":
        r, v, lv, te = (kw.pop(k) for k in ("rewards", "values", "last_values", "terminated"))
        return tuple(R.gae(r, v, lv, te, **kw))
    r, lv, te = (kw.pop(k) for k in ("rewards", "last_values", "terminated"))
    return (R.discounted_returns(r, lv, te, **kw),)


@pytest.mark.parametrize("sweep", SWEEPS)
def test_a_large_problem_is_taken_on_threads_with_the_serial_bits(sweep, force_parallel_sweeps):
    """Above the parallel size the fast path takes the call and, as the block
    rule says, runs the serial kernel's steps on threads: the same bits as one
    serial call; a bad input is still refused before anything is written."""
    n = _dispatch.PARALLEL_MIN_ELEMENTS // T + 1
    rng = np.random.default_rng(9)
    kw = {k: v for k, v in _base(sweep, np.float32).items()}
    for k in ("rewards", "values", "behavior_logp", "target_logp"):
        if k in kw:
            kw[k] = (0.3 * rng.standard_normal((T, n))).astype(np.float32)
    kw["last_values"] = rng.standard_normal(n).astype(np.float32)
    kw["terminated"] = rng.random((T, n)) < 0.2
    serial = _fast_call(sweep, kw)
    force_parallel_sweeps(16)
    threaded = _fast_call(sweep, kw)
    for a, b in zip(_tuple(serial), _tuple(threaded), strict=True):
        assert a.tobytes() == b.tobytes()
    out = tuple(np.full_like(a, 7.0) for a in _tuple(serial))
    kw["rewards"] = kw["rewards"].copy()
    kw["rewards"][T - 1, n - 1] = np.nan  # the last row checked, in the last block
    kw["out"] = out if len(out) == 2 else out[0]
    assert _fast_call(sweep, kw) is None
    assert all((o == 7.0).all() for o in out)
