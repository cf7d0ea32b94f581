"""Every public kernel takes foreign arrays without copying and writes into torch ``out=``.

Inputs come as numpy arrays (writeable and read-only), torch CPU tensors
(plain and ``requires_grad``), objects with only ``__array__``, only
``__dlpack__``, or only the buffer protocol (``memoryview``). Two independent
proofs that nothing is copied:

* every array that ``fastppo._checks.as_array`` hands to the kernel shares
  memory with the caller's buffer (``np.shares_memory``);
* with ``out=`` given, the whole call allocates (numpy, via ``tracemalloc``)
  far less than one input array.

Accelerator arrays are refused with a ``TypeError`` naming function and
argument, before any output is written (checked with fake CUDA objects: there
is no GPU here).
"""

from __future__ import annotations

import importlib
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fastppo
from fastppo import _checks

torch = pytest.importorskip("torch")

T, N = 512, 128  # 64 KiB per bool input, 256 KiB per float32: a copy shows in tracemalloc


@dataclass
class Spec:
    """How to call one kernel: numpy inputs, outputs, and the call itself."""

    module: str
    make: Callable[[np.random.Generator], dict[str, np.ndarray]]  # array args by name
    call: Callable[..., Any]  # call(fn, arrays, out) -> result
    outs: Callable[[dict[str, np.ndarray]], tuple[np.ndarray, ...]] | None = None
    float_args: tuple[str, ...] = ()  # float inputs (requires_grad makes sense)
    scalars: dict[str, Any] = field(default_factory=dict)


def _adv_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    term = rng.random((T, N)) < 0.05
    return {
        "rewards": rng.standard_normal((T, N)).astype(np.float32),
        "values": rng.standard_normal((T, N)).astype(np.float32),
        "last_values": rng.standard_normal(N).astype(np.float32),
        "terminated": term,
        "truncated": (rng.random((T, N)) < 0.05) & ~term,
        "final_values": rng.standard_normal((T, N)).astype(np.float32),
        "valid": rng.random((T, N)) < 0.9,
    }


def _vt_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    d = _adv_inputs(rng)
    d["behavior_logp"] = -rng.random((T, N)).astype(np.float32)
    d["target_logp"] = -rng.random((T, N)).astype(np.float32)
    return d


def _pair(a: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return np.empty((T, N), np.float32), np.empty((T, N), np.float32)


_FLOAT_ADV = ("rewards", "values", "last_values", "final_values")

SPECS: dict[str, Spec] = {
    "gae": Spec(
        "fastppo.advantages",
        _adv_inputs,
        lambda f, a, out: f(
            a["rewards"],
            a["values"],
            a["last_values"],
            a["terminated"],
            a["truncated"],
            final_values=a["final_values"],
            valid=a["valid"],
            out=out,
        ),
        _pair,
        _FLOAT_ADV,
    ),
    "vtrace": Spec(
        "fastppo.advantages",
        _vt_inputs,
        lambda f, a, out: f(
            a["behavior_logp"],
            a["target_logp"],
            a["rewards"],
            a["values"],
            a["last_values"],
            a["terminated"],
            a["truncated"],
            final_values=a["final_values"],
            valid=a["valid"],
            out=out,
        ),
        _pair,
        (*_FLOAT_ADV, "behavior_logp", "target_logp"),
    ),
    "discounted_returns": Spec(
        "fastppo.advantages",
        _adv_inputs,
        lambda f, a, out: f(
            a["rewards"],
            a["last_values"],
            a["terminated"],
            a["truncated"],
            final_values=a["final_values"],
            valid=a["valid"],
            out=out,
        ),
        lambda a: (np.empty((T, N), np.float32),),
        ("rewards", "last_values", "final_values"),
    ),
    "next_step_valid": Spec(
        "fastppo.advantages",
        lambda rng: {
            "terminated": rng.random((T, N)) < 0.1,
            "truncated": rng.random((T, N)) < 0.1,
            "prev_done": rng.random(N) < 0.5,
        },
        lambda f, a, out: f(a["terminated"], a["truncated"], a["prev_done"]),
    ),
}

# Public names that are not array kernels (classes, config, helpers).
NOT_KERNELS = {"__version__", "warmup", "PPOConfig", "PPOTrainer", *fastppo._SUBMODULES}


def _kernel(name: str) -> Callable[..., Any]:
    spec = SPECS[name]
    try:
        importlib.import_module(spec.module)
    except ImportError as e:  # pragma: no cover - only while a module is missing
        pytest.skip(f"{spec.module} not importable yet: {e}")
    return getattr(fastppo, name)


# ---- foreign array kinds -------------------------------------------------------------


class ArrayOnly:
    """Exposes only ``__array__`` (like many array libraries' host arrays)."""

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        assert dtype is None or np.dtype(dtype) == self._a.dtype
        return self._a


class DLPackOnly:
    """Exposes only ``__dlpack__``/``__dlpack_device__`` (np.asarray cannot read it)."""

    def __init__(self, a: np.ndarray, device: tuple[int, int] | None = None) -> None:
        self._a = a
        self._device = device

    def __dlpack__(self, **kw: Any) -> Any:
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device or self._a.__dlpack_device__()


def _to_kind(kind: str, a: np.ndarray, is_float: bool) -> Any:
    if kind == "numpy":
        return a
    if kind == "numpy_readonly":
        v = a.view()
        v.flags.writeable = False
        return v
    if kind == "torch":
        return torch.from_numpy(a)
    if kind == "torch_requires_grad":
        t = torch.from_numpy(a)
        return t.requires_grad_(True) if is_float else t
    if kind == "array_interface":
        return ArrayOnly(a)
    if kind == "dlpack":
        return DLPackOnly(a)
    if kind == "memoryview":
        return memoryview(a)
    raise AssertionError(kind)


KINDS = [
    "numpy",
    "numpy_readonly",
    "torch",
    "torch_requires_grad",
    "array_interface",
    "dlpack",
    "memoryview",
]


class _Recording(dict):
    """Remembers which inputs a call actually passed to the kernel."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.used: set[str] = set()

    def __getitem__(self, k: str) -> Any:
        self.used.add(k)
        return super().__getitem__(k)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any, np.ndarray]]:
    """Record (function, argument, object in, array out) of every as_array call."""
    seen: list[tuple[str, str, Any, np.ndarray]] = []
    real = _checks.as_array

    def as_array(fn: str, name: str, x: Any) -> np.ndarray:
        a = real(fn, name, x)
        seen.append((fn, name, x, a))
        return a

    monkeypatch.setattr(_checks, "as_array", as_array)
    return seen


def _equal(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        for x, y in zip(a, b, strict=True):
            _equal(x, y)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def test_every_public_kernel_has_a_spec() -> None:
    """A public kernel whose module exists must be listed in SPECS (so it is proven here)."""
    missing = set(fastppo.__all__) - set(SPECS) - NOT_KERNELS
    assert sorted(n for n in missing if _importable(fastppo._EXPORTS[n])) == []


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("kind", KINDS)
def test_inputs_are_not_copied(name: str, kind: str, spy: list) -> None:
    f = _kernel(name)
    spec = SPECS[name]
    arrays = spec.make(np.random.default_rng(0))
    expected = spec.call(f, arrays, None)
    wrapped = _Recording({k: _to_kind(kind, a, k in spec.float_args) for k, a in arrays.items()})
    spy.clear()
    got = spec.call(f, wrapped, None)
    _equal(got, expected)
    by_obj = {id(w): k for k, w in wrapped.items()}
    checked = set()
    for _, _, x, a in spy:
        k = by_obj.get(id(x))
        if k is None:
            continue
        assert np.shares_memory(a, arrays[k]), f"{name}: input {k!r} given as {kind} was copied"
        checked.add(k)
    used = wrapped.used
    assert checked == used, f"{name}: inputs never seen by as_array: {used - checked}"


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.outs is not None))
@pytest.mark.parametrize("kind", ["numpy", "torch", "dlpack"])
def test_call_with_out_allocates_no_array(name: str, kind: str) -> None:
    f = _kernel(name)
    spec = SPECS[name]
    assert spec.outs is not None
    arrays = spec.make(np.random.default_rng(1))
    outs = spec.outs(arrays)
    wrapped = {k: _to_kind(kind, a, False) for k, a in arrays.items()}
    spec.call(f, wrapped, outs if len(outs) > 1 else outs[0])  # compile, warm caches
    smallest = min(a.nbytes for a in arrays.values() if a.ndim == 2)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        spec.call(f, wrapped, outs if len(outs) > 1 else outs[0])
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak < smallest // 4, f"{name} with {kind} inputs allocated {peak} bytes"


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.outs is not None))
def test_out_accepts_torch_tensors(name: str) -> None:
    f = _kernel(name)
    spec = SPECS[name]
    assert spec.outs is not None
    arrays = spec.make(np.random.default_rng(2))
    expected = spec.call(f, arrays, None)
    expected = expected if isinstance(expected, tuple) else (expected,)
    outs = tuple(torch.full(o.shape, float("nan"), dtype=torch.float32) for o in spec.outs(arrays))
    got = spec.call(f, arrays, outs if len(outs) > 1 else outs[0])
    got = got if isinstance(got, tuple) else (got,)
    for o, g, e in zip(outs, got, expected, strict=True):
        np.testing.assert_array_equal(o.numpy(), e)  # the kernel wrote into the tensor
        assert np.shares_memory(np.asarray(g), o.numpy())


# ---- accelerator arrays are refused ------------------------------------------------


class _FakeCudaTensor:
    """Looks like a torch CUDA tensor to fastppo (module name and ``.device``)."""

    def __init__(self, a: np.ndarray) -> None:
        self.shape = a.shape
        self.dtype = a.dtype
        self.device = SimpleNamespace(type="cuda", index=0, __str__=lambda: "cuda:0")
        self.requires_grad = False

    def numpy(self) -> np.ndarray:  # pragma: no cover - must never be reached
        raise AssertionError("a CUDA tensor was read as host memory")

    def __array__(self, *a: Any, **k: Any) -> np.ndarray:  # pragma: no cover
        raise AssertionError("a CUDA tensor was silently copied to the host")


_FakeCudaTensor.__module__ = "torch.fake_cuda"


class _FakeCupy:
    def __init__(self, a: np.ndarray) -> None:
        self.shape = a.shape
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "version": 3}


def _gpu(kind: str, a: np.ndarray) -> Any:
    if kind == "torch_cuda":
        return _FakeCudaTensor(a)
    if kind == "cuda_array_interface":
        return _FakeCupy(a)
    return DLPackOnly(a, device=(2, 0))  # kDLCUDA


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("gpu", ["torch_cuda", "cuda_array_interface", "dlpack_cuda"])
def test_accelerator_input_is_refused(name: str, gpu: str) -> None:
    f = _kernel(name)
    spec = SPECS[name]
    arrays = spec.make(np.random.default_rng(3))
    outs = spec.outs(arrays) if spec.outs is not None else None
    rec = _Recording(arrays)
    spec.call(f, rec, None)
    for k in sorted(rec.used):
        if outs is not None:
            for o in outs:
                o.fill(7)
        args = dict(arrays, **{k: _gpu(gpu, arrays[k])})
        with pytest.raises(TypeError, match=rf"^{name}: {k} must be a CPU") as e:
            spec.call(f, args, None if outs is None else (outs if len(outs) > 1 else outs[0]))
        assert "cuda" in str(e.value).lower() or "gpu" in str(e.value).lower()
        if outs is not None:
            assert all(np.all(o == 7) for o in outs), f"{name}: output written before raising"


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.outs is not None))
def test_accelerator_out_is_refused(name: str) -> None:
    f = _kernel(name)
    spec = SPECS[name]
    assert spec.outs is not None
    arrays = spec.make(np.random.default_rng(4))
    outs = spec.outs(arrays)
    bad = tuple(_FakeCudaTensor(o) for o in outs)
    with pytest.raises(TypeError, match=rf"^{name}: out.* must be a CPU tensor or array"):
        spec.call(f, arrays, bad if len(bad) > 1 else bad[0])


def test_unviewable_torch_dtype_gets_house_error() -> None:
    f = _kernel("gae")
    x = torch.zeros(4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"^gae: rewards must be a tensor numpy can view"):
        f(x, x, 0.0, np.zeros(4, bool))
