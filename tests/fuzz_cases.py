"""Fuzz cases for every public function and loader (run by tests/test_fuzz.py).

Not collected by the main run (no ``test_`` prefix): ``tests/test_fuzz.py``
runs this module in a child pytest process, so a crash (SIGSEGV, abort) fails
that test instead of killing the suite. Each case starts from a valid call and
perturbs one or two arguments with hostile values (wrong types and dtypes,
odd shapes and layouts, NaN/inf/huge values, aliasing buffers). Whatever the
call does, it must:

* succeed, or raise ``TypeError``/``ValueError`` in the house format
  ``"<function>: <argument> must be <expected>, got <actual>"``;
* leave every input array unchanged, and every ``out=`` buffer unchanged when
  it raises;
* never crash the process and never warn (warnings are errors here too).

Case counts per function are written to ``$FASTPPO_FUZZ_COUNTS`` (JSON).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import warnings
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import fastppo
from fastppo import codec
from fastppo.actor_learner import wire
from fastppo.compat.cleanrl import cleanrl_gae
from fastppo.compat.gym import final_obs
from fastppo.compat.sb3 import sb3_gae
from fastppo.nn import ActorCritic

EXAMPLES = int(os.environ.get("FASTPPO_FUZZ_EXAMPLES", "150"))
# The same cases every run (CI must not flip on a new random draw); set
# FASTPPO_FUZZ_RANDOM=1 to explore fresh ones.
DERANDOMIZE = not os.environ.get("FASTPPO_FUZZ_RANDOM")
COUNTS: Counter[str] = Counter()


@atexit.register
def _write_counts() -> None:
    path = os.environ.get("FASTPPO_FUZZ_COUNTS")
    if path:
        with open(path, "w") as f:
            json.dump(dict(COUNTS), f, indent=1, sort_keys=True)


T, N, A = 6, 3, 4


def _f(*shape: int, dt: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dt)


def _rms() -> fastppo.RunningMeanStd:
    r = fastppo.RunningMeanStd((A,))
    r.update(_f(5, A, dt=np.float64))
    return r


# name -> (call(**kw), baseline kwargs factory, names of out= arguments)
Entry = tuple[Callable[..., Any], Callable[[], dict[str, Any]], tuple[str, ...]]
_ENTRIES: dict[str, Entry] = {
    "gae": (
        fastppo.gae,
        lambda: dict(
            rewards=_f(T, N), values=_f(T, N, seed=1), last_values=_f(N, seed=2),
            terminated=np.zeros((T, N), bool), truncated=None, final_values=None, valid=None,
            gamma=0.99, gae_lambda=0.95, out=(np.zeros((T, N), np.float32),
                                              np.zeros((T, N), np.float32)),
        ),
        ("out",),
    ),
    "vtrace": (
        lambda behavior_logp, target_logp, **kw: fastppo.vtrace(behavior_logp, target_logp, **kw),
        lambda: dict(
            behavior_logp=_f(T, N, seed=3), target_logp=_f(T, N, seed=4), rewards=_f(T, N),
            values=_f(T, N, seed=1), last_values=_f(N, seed=2),
            terminated=np.zeros((T, N), bool), gamma=0.99, lam=1.0, rho_bar=1.0, c_bar=1.0,
            out=(np.zeros((T, N), np.float32), np.zeros((T, N), np.float32)),
        ),
        ("out",),
    ),
    "discounted_returns": (
        fastppo.discounted_returns,
        lambda: dict(
            rewards=_f(T, N), last_values=_f(N, seed=2), terminated=np.zeros((T, N), bool),
            gamma=0.9, out=np.zeros((T, N), np.float32),
        ),
        ("out",),
    ),
    "next_step_valid": (
        fastppo.next_step_valid,
        lambda: dict(terminated=np.zeros((T, N), bool), truncated=np.zeros((T, N), bool),
                     prev_done=np.zeros(N, bool)),
        (),
    ),
    "sample_categorical": (
        fastppo.sample_categorical,
        lambda: dict(logits=_f(N, A), mask=np.ones((N, A), bool), seed=1, counter=2,
                     env_offset=0, deterministic=False,
                     out=(np.zeros(N, np.int64), np.zeros(N, np.float32))),
        ("out",),
    ),
    "sample_multi_categorical": (
        fastppo.sample_multi_categorical,
        lambda: dict(logits=_f(N, A), nvec=[2, 2], mask=np.ones((N, A), bool), seed=1,
                     counter=2),
        (),
    ),
    "sample_gaussian": (
        fastppo.sample_gaussian,
        lambda: dict(mean=_f(N, A), log_std=_f(A, seed=5), seed=1, counter=2, squash=True,
                     out=(np.zeros((N, A), np.float32), np.zeros(N, np.float32))),
        ("out",),
    ),
    "categorical_logp_entropy": (
        fastppo.categorical_logp_entropy,
        lambda: dict(logits=_f(N, A), actions=np.zeros(N, np.int64), mask=np.ones((N, A), bool)),
        (),
    ),
    "gaussian_logp_entropy": (
        fastppo.gaussian_logp_entropy,
        lambda: dict(mean=_f(N, A), log_std=_f(A, seed=5), actions=_f(N, A, seed=6) * 0.1,
                     squash=False),
        (),
    ),
    "sample_categorical_bytes": (
        fastppo.sample_categorical_bytes,
        lambda: dict(logits_buf=_f(N, A).tobytes(), n_envs=N, n_actions=A, dtype="float32",
                     seed=1, counter=2),
        (),
    ),
    "sample_gaussian_bytes": (
        fastppo.sample_gaussian_bytes,
        lambda: dict(params_buf=_f(N, 2 * A).tobytes(), n_envs=N, action_dim=A,
                     dtype="float32", seed=1, counter=2),
        (),
    ),
    "RunningMeanStd.update": (
        lambda batch, valid=None: _rms().update(batch, valid=valid),
        lambda: dict(batch=_f(5, A, dt=np.float64), valid=None),
        (),
    ),
    "RunningMeanStd.normalize": (
        lambda x, clip=5.0, out=None: _rms().normalize(x, clip=clip, out=out),
        lambda: dict(x=_f(5, A, dt=np.float64), clip=5.0, out=np.zeros((5, A))),
        ("out",),
    ),
    "ReturnNormalizer.normalize": (
        lambda rewards, terminated, truncated, valid=None, out=None: fastppo.ReturnNormalizer(
            N
        ).normalize(rewards, terminated, truncated, valid, out),
        lambda: dict(rewards=_f(N), terminated=np.zeros(N, bool), truncated=np.zeros(N, bool),
                     valid=None, out=np.zeros(N, np.float32)),
        ("out",),
    ),
    "normalize_returns": (
        lambda returns, **kw: fastppo.normalize_returns(returns, _rms_1(), **kw),
        lambda: dict(returns=_f(T, dt=np.float64), update=True, clip=5.0,
                     out=np.zeros(T)),
        ("out",),
    ),
    "encode": (codec.encode, lambda: dict(array=_f(T, N), dtype="bfloat16"), ()),
    "decode": (
        codec.decode,
        lambda: dict(buf=_f(T, N).tobytes(), dtype="float32", shape=(T, N), out_dtype=None),
        (),
    ),
    "decode_weights": (
        wire.decode_weights,
        lambda: dict(buf=wire.encode_weights(_f(8), 3), n_params=8, dtype=None),
        (),
    ),
    "cleanrl_gae": (
        cleanrl_gae,
        lambda: dict(rewards=_f(T, N), values=_f(T, N, seed=1), dones=np.zeros((T, N), bool),
                     next_value=_f(N, seed=2), next_done=np.zeros(N, bool), gamma=0.99),
        (),
    ),
    "sb3_gae": (
        sb3_gae,
        lambda: dict(rewards=_f(T, N), values=_f(T, N, seed=1),
                     episode_starts=np.zeros((T, N), bool), last_values=_f(N, seed=2),
                     dones=np.zeros(N, bool)),
        (),
    ),
    "denormalize_values": (
        lambda values, out=None: fastppo.denormalize_values(values, _rms_1(), out=out),
        lambda: dict(values=_f(T, dt=np.float64), out=np.zeros(T)),
        ("out",),
    ),
    "RunningMeanStd": (
        fastppo.RunningMeanStd,
        lambda: dict(shape=(A,), epsilon=1e-8),
        (),
    ),
    "RunningMeanStd.from_state_dict": (
        lambda mean, var: _rms_from(mean, var),
        lambda: dict(mean=_f(A, dt=np.float64), var=np.ones(A)),
        (),
    ),
    "ReturnNormalizer": (
        fastppo.ReturnNormalizer,
        lambda: dict(n_envs=N, gamma=0.99, clip=10.0, epsilon=1e-8),
        (),
    ),
    "encode_weights": (wire.encode_weights, lambda: dict(params=_f(8), version=3), ()),
    "ActorCritic": (
        lambda **kw: ActorCritic(**kw).evaluate(np.zeros((2, 3)), np.zeros(2, np.int64)),
        lambda: dict(obs_shape=(3,), kind="discrete", nvec=[2], hidden_sizes=(8,), seed=0),
        (),
    ),
    "ActorCritic.evaluate": (
        lambda obs, actions: _policy().evaluate(obs, actions),
        lambda: dict(obs=_f(5, 3, dt=np.float64), actions=np.zeros(5, np.int64)),
        (),
    ),
    "final_obs": (
        final_obs,
        lambda: dict(terminated=np.zeros(N, bool), truncated=np.array([True, False, False]),
                     infos={"final_obs": np.array([_f(3), None, None], dtype=object),
                            "_final_obs": np.array([True, False, False])}),
        (),
    ),
    "PPOConfig": (
        lambda **kw: fastppo.PPOConfig(**kw).validate(),
        lambda: dict(n_envs=2, n_steps=8, gamma=0.99, learning_rate=3e-4, hidden_sizes=(8,)),
        (),
    ),
}  # fmt: skip


def _rms_from(mean: Any, var: Any) -> fastppo.RunningMeanStd:
    d = {"shape": [A], "count": 3, "mean": mean, "var": var, "epsilon": 1e-8}
    return fastppo.RunningMeanStd.from_state_dict(d)


def _policy() -> ActorCritic:
    return ActorCritic((3,), "discrete", nvec=[2], hidden_sizes=(8,), seed=0)


def _rms_1() -> fastppo.RunningMeanStd:
    r = fastppo.RunningMeanStd()
    r.update(_f(4, dt=np.float64))
    return r


# -- hostile values ----------------------------------------------------------------
_SCALARS: list[Any] = [
    None, "x", b"\x00\x01", 0, -1, 1, 2**31, 2**63, 2**64, -(2**63) - 1, 1.5, 0.0, -0.0,
    float("nan"), float("inf"), -float("inf"), 1e300, True, False, np.float32(0.5),
    np.int8(-3), np.uint64(2**64 - 1), 1j, [], [[1.0, 2.0], [3.0]], {}, (), object(),
]  # fmt: skip
_DTYPES = [np.int8, np.int64, np.uint8, np.uint64, np.float16, np.float32, np.float64,
           np.bool_, np.complex64, object]  # fmt: skip


def _array_variants(a: np.ndarray, pos: int) -> list[Callable[[], Any]]:
    flat = max(a.size, 1)
    i = pos % flat

    def put(v: Any) -> Callable[[], Any]:
        def f() -> Any:
            b = a.copy()
            if b.size:
                with np.errstate(all="ignore"), contextlib.suppress(OverflowError):
                    b.reshape(-1)[i] = v
            return b

        return f

    out: list[Callable[[], Any]] = [
        *(lambda d=d: a.astype(d) for d in _DTYPES),
        lambda: a[None],
        lambda: a[..., :0],
        lambda: a.reshape(-1),
        lambda: a.T,
        lambda: a[::2],
        lambda: np.asfortranarray(a),
        lambda: as_strided(a, shape=a.shape, strides=(0,) * a.ndim),
        lambda: _ro(a),
        lambda: a.tolist(),
        lambda: a.view(np.uint8),
        lambda: np.empty((0, *a.shape[1:]), a.dtype),
    ]
    if a.dtype.kind == "f":
        out += [put(np.nan), put(np.inf), put(-np.inf), put(1e300), put(-1e38), put(3e38)]
    if a.dtype.kind in "iub":
        out += [put(-1), put(255), put(10**6)]
    return out


def _ro(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b.flags.writeable = False
    return b


def _hostile(value: Any, kind: int, pos: int, aliases: list[np.ndarray]) -> Any:
    """One hostile replacement for ``value`` (chosen by ``kind``)."""
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and all(isinstance(v, np.ndarray) for v in value)
    ):
        # an out=(a, b) pair: perturb one member, or alias an input
        choices: list[Callable[[], Any]] = [
            lambda: (value[0], value[0]),
            lambda: value[:1],
            lambda: list(value),
            lambda: (_hostile(value[0], kind // 2, pos, aliases), value[1]),
            lambda: (value[0], _hostile(value[1], kind // 2, pos, aliases)),
        ]
        if aliases:
            choices.append(lambda: (aliases[pos % len(aliases)], value[1]))
        return choices[kind % len(choices)]()
    if isinstance(value, np.ndarray):
        variants = _array_variants(value, pos)
        if aliases:
            variants.append(lambda: aliases[pos % len(aliases)])
        if kind % 3 == 0:
            return _SCALARS[kind // 3 % len(_SCALARS)]
        try:
            return variants[kind % len(variants)]()
        except (OverflowError, ValueError, TypeError):  # a variant this array cannot take
            return value
    return _SCALARS[kind % len(_SCALARS)]


_MSG = re.compile(r"^(?P<fn>[\w.]+): (?P<arg>.+?) must be .+, got .+", re.S)


def _snapshot(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, (tuple, list)) and all(isinstance(x, np.ndarray) for x in v):
        return [x.copy() for x in v]
    return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(b, list):
        return all(_same(x, y) for x, y in zip(a, b))
    return (
        a.dtype == b.dtype and a.shape == b.shape and bool(np.all((a == b) | ((a != a) & (b != b))))
    )


def _run_case(name: str, edits: list[tuple[int, int, int]]) -> None:
    call, base, out_names = _ENTRIES[name]
    kw = base()
    keys = list(kw)
    arrays = [v for v in kw.values() if isinstance(v, np.ndarray)]
    with warnings.catch_warnings():  # making the hostile values may warn; calling may not
        warnings.simplefilter("ignore")
        for which, kind, pos in edits:
            key = keys[which % len(keys)]
            others = [a for k, a in kw.items() if k != key and isinstance(a, np.ndarray)]
            kw[key] = _hostile(kw[key], kind, pos, others if key in out_names else arrays)
    before = {k: _snapshot(v) for k, v in kw.items()}
    try:
        call(**kw)
    except (TypeError, ValueError) as e:
        m = _MSG.match(str(e))
        assert m, f"{name}: not the house format: {type(e).__name__}: {e}"
        want = name.split(".")[-1] if name.startswith("RunningMeanStd.") else name
        assert want in m["fn"], f"{name}: error names {m['fn']!r}: {e}"
        COUNTS[f"{name} refused"] += 1
        for k in out_names:
            if before[k] is not None:
                assert _same(kw[k], before[k]), f"{name}: out= written before raising: {e}"
    else:
        COUNTS[f"{name} ran"] += 1
    for k, v in before.items():
        if v is not None and k not in out_names:
            assert _same(kw[k], v), f"{name}: input {k!r} was modified"


_EDIT = st.tuples(st.integers(0, 50), st.integers(0, 400), st.integers(0, 1000))


@pytest.mark.parametrize("name", sorted(_ENTRIES))
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
    derandomize=DERANDOMIZE,
)
@given(edits=st.lists(_EDIT, min_size=1, max_size=2))
def test_fuzz(name: str, edits: list[tuple[int, int, int]]) -> None:
    _run_case(name, edits)


# -- loaders: mutated checkpoint files ---------------------------------------------
DATA = os.path.join(os.path.dirname(__file__), "data")
# name -> (fixture directory, its files, the loader's name in its errors)
_LOADERS = {
    "PPOTrainer.load": (
        "checkpoints_v1/ppo_cartpole",
        ("checkpoint.json", "checkpoint.npz"),
        "PPOTrainer.load",
    ),
    "actor_learner checkpoint": (
        "checkpoints_v2/learner",
        ("checkpoint.json", "checkpoint.npz"),
        "checkpoint.load",
    ),
    "actor_learner checkpoint v1": ("checkpoints_v1/learner", ("learner.npz",), "checkpoint.load"),
}


def _mutate(raw: bytes, how: int, pos: int, byte: int) -> bytes:
    p = pos % max(len(raw), 1)
    if how == 0:  # flip one byte
        return raw[:p] + bytes([raw[p] ^ (byte or 1)]) + raw[p + 1 :]
    if how == 1:  # truncate
        return raw[:p]
    if how == 2:  # insert
        return raw[:p] + bytes([byte]) * (1 + byte % 7) + raw[p:]
    return raw[:p] + raw[p + 1 :]  # delete one byte


@pytest.mark.parametrize("loader", sorted(_LOADERS))
@settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=DERANDOMIZE)
@given(
    which=st.integers(0, 1),
    how=st.integers(0, 3),
    pos=st.integers(0, 10**6),
    byte=st.integers(0, 255),
)
def test_fuzz_loader(loader: str, which: int, how: int, pos: int, byte: int, tmp_path_factory):
    import shutil

    from fastppo import PPOTrainer
    from fastppo.actor_learner import checkpoint as al_checkpoint

    src, files, fn = _LOADERS[loader]
    d = tmp_path_factory.mktemp("ck")
    for f in files:
        shutil.copy(os.path.join(DATA, src, f), d / f)
    target = d / files[which % len(files)]
    target.write_bytes(_mutate(target.read_bytes(), how, pos, byte))
    try:
        if loader == "PPOTrainer.load":
            PPOTrainer.load(str(d), env="CartPole-v1")
        else:
            al_checkpoint.load(str(d / files[0]) if len(files) == 1 else str(d))
    except ValueError as e:
        m = _MSG.match(str(e))
        assert m and m["fn"] == fn, f"{loader}: {e}"
        COUNTS[f"{loader} refused"] += 1
    else:
        COUNTS[f"{loader} ran"] += 1
