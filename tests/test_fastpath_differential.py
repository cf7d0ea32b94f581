"""Differential tests of the two paths of gae, vtrace, discounted_returns and
sample_categorical: the Cython fast path and the general path.

Hypothesis draws a valid call (sweep, dtype, shape, optional inputs, ``out=``)
and perturbs one argument of it, either in *form* (a strided, Fortran-order,
read-only or listed array, float or uint8 flags, a numpy-scalar
hyperparameter, log-probs of the other float dtype for V-trace) or in
*validity* (a NaN or inf, a wrong or byte-swapped dtype, a wrong shape, a
hyperparameter outside its range, an ``out=`` that overlaps an input or is
read-only). Then:

* whenever the fast path accepts a call, its result is bit-identical to the
  general path's;
* the general path raises exactly for the validity perturbations, and the
  fast path declines every one of them, writing nothing to ``out``;
* an unperturbed plain call is taken by the fast path.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import fastppo
from fastppo import advantages
from fastppo._cy import _fast
from fastppo.sampling import categorical  # sets the categorical fast path's size limit

FLOAT_TN = {
    "gae": ("rewards", "values"),
    "vtrace": ("behavior_logp", "target_logp", "rewards", "values"),
    "discounted_returns": ("rewards",),
}
HYPER = {
    "gae": {"gamma": 0.97, "gae_lambda": 0.9},
    "vtrace": {"gamma": 0.97, "lam": 0.9, "rho_bar": 1.5, "c_bar": 0.8, "pg_rho_bar": 1.2},
    "discounted_returns": {"gamma": 0.97},
}
#: Ranges of the hyperparameters, as API.md states them: [0, 1] or (0, inf].
UNIT = ("gamma", "gae_lambda", "lam")
N_OUT = {"gae": 2, "vtrace": 2, "discounted_returns": 1}


class _Off:
    """The fast path switched off: every call is handed to the general path."""

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


@contextlib.contextmanager
def _general_only() -> Iterator[None]:
    saved = advantages._fast
    advantages._fast = _Off()
    try:
        yield
    finally:
        advantages._fast = saved


def _public(sweep: str, kw: dict[str, Any]) -> Any:
    kw = dict(kw)
    if sweep == "vtrace":
        return fastppo.vtrace(kw.pop("behavior_logp"), kw.pop("target_logp"), **kw)
    return getattr(fastppo, sweep)(**kw)


def _fast_call(sweep: str, kw: dict[str, Any]) -> Any:
    g = kw.get
    tail = (g("terminated"), g("truncated"), g("final_values"), g("valid"))
    if sweep == "gae":
        return _fast.gae(
            g("rewards"), g("values"), g("last_values"), *tail, g("gamma"), g("gae_lambda"),
            g("out"),
        )  # fmt: skip
    if sweep == "vtrace":
        return _fast.vtrace(
            g("behavior_logp"), g("target_logp"), g("rewards"), g("values"), g("last_values"),
            *tail, g("gamma"), g("lam"), g("rho_bar"), g("c_bar"), g("pg_rho_bar"), g("out"),
        )  # fmt: skip
    return _fast.discounted_returns(g("rewards"), g("last_values"), *tail, g("gamma"), g("out"))


def _base(data: st.DataObject, sweep: str) -> dict[str, Any]:
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    T = data.draw(st.integers(1, 6))
    one_d = data.draw(st.booleans())
    N = 1 if one_d else data.draw(st.integers(1, 5))
    shape = (T,) if one_d else (T, N)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    kw: dict[str, Any] = {
        name: (0.3 * rng.standard_normal(shape)).astype(dt) for name in FLOAT_TN[sweep]
    }
    kw["last_values"] = rng.standard_normal(N).astype(dt)
    kw["terminated"] = rng.random(shape) < 0.2
    mode = data.draw(st.sampled_from(["plain", "final", "valid", "both"]))
    if sweep == "discounted_returns" and mode == "valid":
        mode = "both"  # a truncation there always needs final_values
    if mode != "plain":
        kw["truncated"] = (rng.random(shape) < 0.2) & ~kw["terminated"]
    if mode in ("final", "both"):
        kw["final_values"] = rng.standard_normal(shape).astype(dt)
    if mode in ("valid", "both"):
        kw["valid"] = rng.random(shape) < 0.9
    kw.update(HYPER[sweep])
    if data.draw(st.booleans()):
        outs = tuple(np.full(shape, -7.0, dt) for _ in range(N_OUT[sweep]))
        kw["out"] = outs[0] if N_OUT[sweep] == 1 else outs
    return kw


def _other(dt: np.dtype) -> type:
    return np.float64 if dt == np.float32 else np.float32


def _perturb(data: st.DataObject, sweep: str, kw: dict[str, Any]) -> tuple[str, bool]:
    """Apply one perturbation to ``kw``; returns (what, whether it is a validity error)."""
    floats = list(FLOAT_TN[sweep])
    flags = [k for k in ("terminated", "truncated", "valid") if k in kw]
    arrays = floats + [k for k in ("final_values",) if k in kw]
    hypers = list(HYPER[sweep])
    r = kw["rewards"]
    rows = np.flatnonzero(np.ravel(kw["valid"])) if "valid" in kw else np.arange(r.size)
    options = ["nan", "inf last_values", "int dtype", "short", "range", "strided", "readonly",
               "list", "float flags", "uint8 flags", "np scalar", "edge", "swapped"]  # fmt: skip
    if sweep != "vtrace":
        options.append("mixed dtype")
    else:
        options.append("logp dtype")
    if r.ndim == 2 and min(r.shape) > 1:
        options.append("fortran")
    if "out" in kw:
        options += ["out overlaps", "out overlaps strided", "out readonly", "out strided"]
    how = data.draw(st.sampled_from(options))
    if how == "nan":
        if rows.size == 0:
            return "nothing valid to poison", False
        name = data.draw(st.sampled_from(floats))
        a = kw[name].copy()
        a.flat[data.draw(st.sampled_from(rows.tolist()))] = np.nan
        kw[name] = a
        return f"NaN in {name}", True
    if how == "inf last_values":
        kw["last_values"] = kw["last_values"].copy()
        kw["last_values"][-1] = np.inf
        return how, True
    if how == "int dtype":
        name = data.draw(st.sampled_from(floats))
        kw[name] = np.zeros(kw[name].shape, np.int64)
        return f"int64 {name}", True
    if how == "mixed dtype":
        name = data.draw(st.sampled_from([*arrays, "last_values"]))
        kw[name] = kw[name].astype(_other(r.dtype))
        return f"{name} of the other float dtype", True
    if how == "logp dtype":
        name = data.draw(st.sampled_from(["behavior_logp", "target_logp"]))
        kw[name] = kw[name].astype(_other(r.dtype))
        return f"{name} of the other float dtype", False
    if how == "short":
        name = data.draw(st.sampled_from(arrays + flags))
        kw[name] = kw[name][: kw[name].shape[0] - 1] if kw[name].shape[0] > 1 else kw[name][:0]
        return f"{name} one step short", True
    if how == "range":
        name = data.draw(st.sampled_from(hypers))
        bad = [-1e-9, 1.0 + 1e-9, np.nan] if name in UNIT else [0.0, -1.0, np.nan]
        kw[name] = data.draw(st.sampled_from(bad))
        return f"{name} = {kw[name]}", True
    if how == "strided":
        name = data.draw(st.sampled_from(arrays))
        a = kw[name]
        wide = np.repeat(a, 2, axis=-1)
        kw[name] = wide[..., ::2]
        return f"strided {name}", False
    if how == "fortran":
        name = data.draw(st.sampled_from(arrays + flags))
        kw[name] = np.asfortranarray(kw[name])
        return f"Fortran-order {name}", False
    if how == "readonly":
        name = data.draw(st.sampled_from(arrays + flags + ["last_values"]))
        a = kw[name].copy()
        a.flags.writeable = False
        kw[name] = a
        return f"read-only {name}", False
    if how == "list":
        name = data.draw(st.sampled_from(arrays + flags + ["last_values"]))
        kw[name] = kw[name].tolist()
        # a list of floats is float64: among float32 arrays that is a mixed dtype
        # (no silent casts), except V-trace's log-probs
        mixed = name not in flags and r.dtype == np.float32
        return f"{name} as a list", mixed and name not in ("behavior_logp", "target_logp")
    if how == "float flags":
        name = data.draw(st.sampled_from(flags))
        kw[name] = kw[name].astype(r.dtype)
        return f"{name} as 0.0/1.0", False
    if how == "uint8 flags":
        name = data.draw(st.sampled_from(flags))
        kw[name] = kw[name].astype(np.uint8)
        return f"{name} as uint8", False
    if how == "edge":
        name = data.draw(st.sampled_from(hypers))
        edges = [0.0, 1.0] if name in UNIT else [5e-324, np.inf]
        kw[name] = data.draw(st.sampled_from(edges))
        return f"{name} = {kw[name]} (the range's edge)", False
    if how == "np scalar":
        name = data.draw(st.sampled_from(hypers))
        kw[name] = np.float64(kw[name])
        return f"{name} as np.float64", False
    if how == "swapped":
        name = data.draw(st.sampled_from(arrays))
        kw[name] = kw[name].astype(kw[name].dtype.newbyteorder())
        return f"byte-swapped {name}", True  # no silent casts: a non-native order is refused
    outs = kw["out"] if isinstance(kw["out"], tuple) else (kw["out"],)
    if how == "out overlaps":
        name = data.draw(st.sampled_from(arrays))
        outs = (kw[name], *outs[1:])
        kw[name] = kw[name]  # the input itself is the output
        kw["out"] = outs if len(outs) > 1 else outs[0]
        return f"out[0] is {name}", True
    if how == "out overlaps strided":
        # the input a strided view of every other element, out[0] the others:
        # no element is shared, but the bounds overlap (np.may_share_memory),
        # and the fast path, which copies such an input, must compare the view's
        name = data.draw(st.sampled_from(arrays))
        wide = np.repeat(kw[name], 2, axis=-1)
        kw[name] = wide[..., ::2]
        outs = (wide[..., 1::2], *outs[1:])
        kw["out"] = outs if len(outs) > 1 else outs[0]
        # (a single element each: the bounds are disjoint too, a valid call)
        return f"out[0] interleaved with a strided {name}", kw[name].size > 1
    if how == "out readonly":
        outs[-1].flags.writeable = False
        return how, True
    wide = np.full((*outs[0].shape[:-1], 2 * outs[0].shape[-1]), -7.0, outs[0].dtype)
    outs = (wide[..., ::2], *outs[1:])
    kw["out"] = outs if len(outs) > 1 else outs[0]
    return "strided out[0]", False


def _as_tuple(x: Any) -> tuple[np.ndarray, ...]:
    return x if isinstance(x, tuple) else (x,)


def _outs(kw: dict[str, Any]) -> tuple[np.ndarray, ...]:
    return _as_tuple(kw["out"]) if "out" in kw else ()


def _fresh_outs(kw: dict[str, Any]) -> dict[str, Any]:
    """``kw`` with its writable out buffers replaced by equal copies (same layout)."""
    if "out" not in kw:
        return kw
    outs = []
    for o in _as_tuple(kw["out"]):
        if o.flags.writeable and not any(o is kw.get(k) for k in kw if k != "out"):
            c = np.empty_like(o) if o.flags.c_contiguous else o.base.copy()[..., ::2]
            c[...] = o
            outs.append(c)
        else:
            outs.append(o)
    return dict(kw, out=tuple(outs) if len(outs) > 1 else outs[0])


@settings(max_examples=600, deadline=None, database=None, derandomize=True)
@given(data=st.data(), sweep=st.sampled_from(sorted(FLOAT_TN)))
def test_fast_and_general_paths_agree_under_one_perturbation(data, sweep) -> None:
    kw = _base(data, sweep)
    plain = _fast_call(sweep, _fresh_outs(kw))
    assert plain is not None, "an unperturbed plain call must take the fast path"
    what, invalid = _perturb(data, sweep, kw)
    event(f"{'invalid' if invalid else 'form'}: {what.split(' ')[0]}")
    before = [o.copy() for o in _outs(kw)]
    fast = _fast_call(sweep, kw)
    if invalid:
        assert fast is None, f"fast path took an invalid call ({what})"
        for o, b in zip(_outs(kw), before):
            np.testing.assert_array_equal(o, b, err_msg=f"{what}: out written")
        with _general_only():
            try:
                _public(sweep, kw)
            except (ValueError, TypeError) as e:
                assert str(e).startswith(sweep), f"{what}: {e}"
            else:
                raise AssertionError(f"general path accepted an invalid call ({what})")
        return
    with _general_only():
        general = _public(sweep, _fresh_outs(kw))
    if fast is not None:
        for f, g in zip(_as_tuple(fast), _as_tuple(general)):
            assert f.dtype == g.dtype and f.shape == g.shape, what
            np.testing.assert_array_equal(f, g, err_msg=what)


# -- sample_categorical -------------------------------------------------------------
def _categorical_base(data: st.DataObject) -> dict[str, Any]:
    dt = data.draw(st.sampled_from([np.float32, np.float64]))
    N = data.draw(st.integers(1, 6))
    A = data.draw(st.integers(1, 5))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    kw: dict[str, Any] = {"logits": (2.0 * rng.standard_normal((N, A))).astype(dt)}
    if data.draw(st.booleans()):
        mask = rng.random((N, A)) < 0.6
        mask[np.arange(N), rng.integers(0, A, N)] = True  # one allowed action per row
        kw["mask"] = mask
    kw["seed"] = data.draw(st.integers(0, 2**64 - 1))
    kw["counter"] = data.draw(st.integers(0, 2**64 - 1))
    kw["env_offset"] = data.draw(st.integers(0, 1000))
    kw["deterministic"] = data.draw(st.booleans())
    if data.draw(st.booleans()):
        kw["out"] = (np.full(N, -7, np.int64), np.full(N, -7.0, np.float32))
    return kw


def _categorical_perturb(data: st.DataObject, kw: dict[str, Any]) -> tuple[str, bool]:
    x = kw["logits"]
    N, A = x.shape
    options = ["nan", "inf", "int logits", "seed < 0", "seed >= 2**64", "counter < 0",
               "env_offset < 0", "env_offset past 2**32", "strided", "fortran", "readonly",
               "list", "np seed", "np counter"]  # fmt: skip
    if "mask" in kw:
        options += ["all masked", "mask shape", "uint8 mask", "readonly mask"]
    if "out" in kw:
        options += ["int32 actions", "out readonly", "out list", "out overlaps"]
    how = data.draw(st.sampled_from(options))
    allowed = np.argwhere(kw["mask"]) if "mask" in kw else np.argwhere(np.ones((N, A), bool))
    if how in ("nan", "inf"):
        i, j = allowed[data.draw(st.integers(0, len(allowed) - 1))]
        x = x.copy()
        x[i, j] = np.nan if how == "nan" else np.inf
        kw["logits"] = x
        return f"{how} logit", True
    if how == "int logits":
        kw["logits"] = np.zeros((N, A), np.int64)
        return how, True
    if how == "seed < 0":
        kw["seed"] = -1
        return how, True
    if how == "seed >= 2**64":
        kw["seed"] = 2**64
        return how, True
    if how == "counter < 0":
        kw["counter"] = -1
        return how, True
    if how == "env_offset < 0":
        kw["env_offset"] = -1
        return how, True
    if how == "env_offset past 2**32":
        kw["env_offset"] = 2**32 - N + 1
        return how, True
    if how == "strided":
        kw["logits"] = np.repeat(x, 2, axis=1)[:, ::2]
        return how, False
    if how == "fortran":
        kw["logits"] = np.asfortranarray(x)
        return how, False
    if how == "readonly":
        x = x.copy()
        x.flags.writeable = False
        kw["logits"] = x
        return how, False
    if how == "list":
        kw["logits"] = x.tolist()
        return how, False
    if how == "np seed":
        kw["seed"] = np.uint64(kw["seed"])
        return how, False
    if how == "np counter":
        kw["counter"] = np.uint64(kw["counter"])
        return how, False
    if how == "all masked":
        m = kw["mask"].copy()
        m[data.draw(st.integers(0, N - 1))] = False
        kw["mask"] = m
        return how, True
    if how == "mask shape":
        kw["mask"] = kw["mask"][:, :-1] if A > 1 else kw["mask"][:0]
        return how, True
    if how == "uint8 mask":
        kw["mask"] = kw["mask"].astype(np.uint8)
        return how, False
    if how == "readonly mask":
        m = kw["mask"].copy()
        m.flags.writeable = False
        kw["mask"] = m
        return how, False
    act, lp = kw["out"]
    if how == "int32 actions":
        kw["out"] = (act.astype(np.int32), lp)
        return how, True
    if how == "out readonly":
        lp.flags.writeable = False
        return how, True
    if how == "out list":
        kw["out"] = [act, lp]
        return how, False
    kw["out"] = (act, act.view(np.float32)[:N])  # logp aliases the actions
    return how, True


def _categorical_fast(kw: dict[str, Any]) -> Any:
    g = kw.get
    return _fast.sample_categorical(
        g("logits"), g("mask"), g("seed"), g("counter"), g("env_offset"), g("deterministic"),
        g("out"),
    )  # fmt: skip


def _categorical_general(kw: dict[str, Any]) -> Any:
    saved = categorical._fast
    categorical._fast = _Off()
    try:
        return fastppo.sample_categorical(**kw)
    finally:
        categorical._fast = saved


def _categorical_fresh(kw: dict[str, Any]) -> dict[str, Any]:
    if "out" not in kw:
        return kw
    act, lp = kw["out"]
    if not (act.flags.writeable and lp.flags.writeable) or act.base is not None:
        return kw
    return dict(kw, out=type(kw["out"])((act.copy(), lp.copy())))


@settings(max_examples=400, deadline=None, database=None, derandomize=True)
@given(data=st.data())
def test_categorical_fast_and_general_paths_agree_under_one_perturbation(data) -> None:
    kw = _categorical_base(data)
    assert _categorical_fast(_categorical_fresh(kw)) is not None, "a plain call: fast path"
    what, invalid = _categorical_perturb(data, kw)
    event(f"{'invalid' if invalid else 'form'}: {what}")
    outs = kw.get("out") or ()
    before = [o.copy() for o in outs]
    fast = _categorical_fast(kw)
    if invalid:
        assert fast is None, f"fast path took an invalid call ({what})"
        for o, b in zip(outs, before):
            np.testing.assert_array_equal(o, b, err_msg=f"{what}: out written")
        try:
            _categorical_general(kw)
        except (ValueError, TypeError) as e:
            assert str(e).startswith("sample_categorical"), f"{what}: {e}"
        else:
            raise AssertionError(f"general path accepted an invalid call ({what})")
        return
    general = _categorical_general(_categorical_fresh(kw))
    if fast is not None:
        for f, g in zip(fast, general):
            assert f.dtype == g.dtype and f.shape == g.shape, what
            np.testing.assert_array_equal(f, g, err_msg=what)
