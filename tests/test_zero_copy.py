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
import sys
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass, field
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
    args: dict[str, str] = field(default_factory=dict)  # input key -> argument name, if not equal


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

NS, NA = 4096, 32  # sampler sizes: 512 KiB of float32 logits, 128 KiB of bool mask
NVEC = np.array([8, 8, 16])


def _logits(rng: np.random.Generator) -> dict[str, np.ndarray]:
    mask = rng.random((NS, NA)) < 0.8
    mask[:, 0] = True
    mask[:, 8] = True
    mask[:, 16] = True  # every sub-space of NVEC keeps an allowed action
    return {"logits": rng.standard_normal((NS, NA)).astype(np.float32), "mask": mask}


def _gauss(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "mean": rng.standard_normal((NS, NA)).astype(np.float32),
        "log_std": (0.1 * rng.standard_normal((NS, NA))).astype(np.float32),
        "actions": rng.standard_normal((NS, NA)).astype(np.float32),
    }


def _sampler_outs(width: int | None, act_dtype: Any) -> Callable[..., tuple[np.ndarray, ...]]:
    shape = (NS,) if width is None else (NS, width)
    return lambda a: (np.empty(shape, act_dtype), np.empty(NS, np.float32))


def _stats_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "x": rng.standard_normal((T, N)).astype(np.float32),
        "returns": rng.standard_normal(T * N).astype(np.float32),
        "terminated": rng.random((T, N)) < 0.05,
        "truncated": rng.random((T, N)) < 0.05,
    }


def _rms_call(f: Any, a: dict, out: Any) -> Any:
    rms = f((N,))
    rms.update(a["x"])
    return rms.normalize(a["x"], clip=5.0, out=out)


def _rn_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    # A few steps of many envs: ReturnNormalizer's parallel path (>= 2**16
    # elements) failed to compile when this was written -- reported, not hidden
    # here, since this file tests copying, not that kernel.
    return {
        "x": rng.standard_normal((64, 4 * N)).astype(np.float32),
        "terminated": rng.random((64, 4 * N)) < 0.05,
        "truncated": rng.random((64, 4 * N)) < 0.05,
    }


def _rn_call(f: Any, a: dict, out: Any) -> Any:
    return f(4 * N).normalize(a["x"], a["terminated"], a["truncated"], out=out)


def _nr_call(f: Any, a: dict, out: Any) -> Any:
    return f(a["returns"], fastppo.RunningMeanStd(), out=out)


def _dv_call(f: Any, a: dict, out: Any) -> Any:
    rms = fastppo.RunningMeanStd()
    rms.update(np.arange(5.0))
    return f(a["returns"], rms, out=out)


SPECS.update(
    {
        "sample_categorical": Spec(
            "fastppo.sampling",
            _logits,
            lambda f, a, out: f(a["logits"], a["mask"], seed=1, counter=2, out=out),
            _sampler_outs(None, np.int64),
            ("logits",),
        ),
        "sample_multi_categorical": Spec(
            "fastppo.sampling",
            _logits,
            lambda f, a, out: f(a["logits"], NVEC, a["mask"], seed=1, counter=2, out=out),
            _sampler_outs(len(NVEC), np.int64),
            ("logits",),
        ),
        "sample_gaussian": Spec(
            "fastppo.sampling",
            _gauss,
            lambda f, a, out: f(a["mean"], a["log_std"], seed=1, counter=2, out=out),
            _sampler_outs(NA, np.float32),
            ("mean", "log_std"),
        ),
        "categorical_logp_entropy": Spec(
            "fastppo.sampling",
            lambda rng: dict(_logits(rng), actions=np.zeros(NS, np.int64)),
            lambda f, a, out: f(a["logits"], a["actions"], a["mask"]),
            None,
            ("logits",),
        ),
        "gaussian_logp_entropy": Spec(
            "fastppo.sampling",
            _gauss,
            lambda f, a, out: f(a["mean"], a["log_std"], a["actions"]),
            None,
            ("mean", "log_std", "actions"),
        ),
        "RunningMeanStd": Spec(
            "fastppo.stats",
            _stats_inputs,
            _rms_call,
            lambda a: (np.empty((T, N), np.float32),),
            ("x",),
            {"x": "batch"},
        ),
        "ReturnNormalizer": Spec(
            "fastppo.stats",
            _rn_inputs,
            _rn_call,
            lambda a: (np.empty((64, 4 * N), np.float32),),
            ("x",),
            {"x": "rewards"},
        ),
        "normalize_returns": Spec(
            "fastppo.stats",
            _stats_inputs,
            _nr_call,
            lambda a: (np.empty(T * N, np.float32),),
            ("returns",),
        ),
        "denormalize_values": Spec(
            "fastppo.stats",
            _stats_inputs,
            _dv_call,
            lambda a: (np.empty(T * N, np.float32),),
            ("returns",),
            {"returns": "values"},
        ),
    }
)

# Byte-buffer kernels take buffers (bytes, bytearray, memoryview, mmap,
# ndarray) through fastppo.codec.byte_view; tested below on their own.
BYTES_KERNELS = {"sample_categorical_bytes", "sample_gaussian_bytes"}

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

    for module in {s.module for s in SPECS.values()}:
        if _importable(module):  # imported now, so its binding is patched below
            importlib.import_module(module)
    # Modules may bind the helper by name (from fastppo._checks import as_array).
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("fastppo") and (
            getattr(mod, "as_array", None) is real
        ):
            monkeypatch.setattr(mod, "as_array", as_array)
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
    missing = set(fastppo.__all__) - set(SPECS) - NOT_KERNELS - BYTES_KERNELS
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
    # Exact ndarrays may skip as_array (a fast path); the allocation test covers them.
    # So may tensors in the fast path of sample_categorical and the sweeps (of
    # any size), which read them themselves (torch's DLPack exchange API: the sweeps its
    # description, sample_categorical a view, _fast.ndarray_of;
    # the detached memory of a tensor that needs a gradient)
    # (test_fastpath.py::test_torch_logits_take_the_fast_path_through_their_numpy_view),
    # and in the running statistics' per-step calls (_fast.ndarray_of, the same view).
    fast_path = (
        "sample_categorical", "gae", "vtrace", "discounted_returns", "RunningMeanStd",
        "denormalize_values", "ReturnNormalizer",
    )  # fmt: skip
    own_views = name in fast_path and kind in ("torch", "torch_requires_grad")
    used = {k for k in wrapped.used if type(wrapped[k]) is not np.ndarray and not own_views}
    assert not used - checked, f"{name}: inputs never seen by as_array: {used - checked}"


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
    assert peak < smallest // 2, f"{name} with {kind} inputs allocated {peak} bytes"


@pytest.mark.parametrize("name", sorted(n for n, s in SPECS.items() if s.outs is not None))
def test_out_accepts_torch_tensors(name: str) -> None:
    f = _kernel(name)
    spec = SPECS[name]
    assert spec.outs is not None
    arrays = spec.make(np.random.default_rng(2))
    expected = spec.call(f, arrays, None)
    expected = expected if isinstance(expected, tuple) else (expected,)
    outs = tuple(torch.from_numpy(np.full_like(o, -1)) for o in spec.outs(arrays))
    got = spec.call(f, arrays, outs if len(outs) > 1 else outs[0])
    got = got if isinstance(got, tuple) else (got,)
    for o, g, e in zip(outs, got, expected, strict=True):
        np.testing.assert_array_equal(o.numpy(), e)  # the kernel wrote into the tensor
        assert np.shares_memory(np.asarray(g), o.numpy())


# ---- accelerator arrays are refused ------------------------------------------------


class _CudaDevice:
    type = "cuda"
    index = 0

    def __str__(self) -> str:
        return "cuda:0"


class _FakeCudaTensor:
    """Looks like a torch CUDA tensor to fastppo (module name and ``.device``)."""

    def __init__(self, a: np.ndarray) -> None:
        self.shape = a.shape
        self.dtype = a.dtype
        self.device = _CudaDevice()
        self.requires_grad = False

    def numpy(self) -> np.ndarray:
        # what torch's Tensor.numpy() does off the CPU
        raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu()")

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
        arg = spec.args.get(k, k)
        # methods report as Class.method
        with pytest.raises(TypeError, match=rf"^{name}(\.\w+)?: {arg} must be a CPU") as e:
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
    with pytest.raises(TypeError, match=rf"^{name}(\.\w+)?: out.* must be a CPU tensor or array"):
        spec.call(f, arrays, bad if len(bad) > 1 else bad[0])


def test_unviewable_torch_dtype_gets_house_error() -> None:
    f = _kernel("gae")
    x = torch.zeros(4, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"^gae: rewards must be a tensor numpy can view"):
        f(x, x, 0.0, np.zeros(4, bool))


# ---- byte-buffer kernels ------------------------------------------------------------

BYTE_KINDS = ["numpy", "bytes", "bytearray", "memoryview"]


def _as_buffer(kind: str, a: np.ndarray) -> Any:
    if kind == "numpy":
        return a
    if kind == "bytes":
        return a.tobytes()
    if kind == "bytearray":
        return bytearray(a.tobytes())
    return memoryview(a)


def _byte_inputs(name: str, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], Any]:
    if name == "sample_categorical_bytes":
        d = _logits(rng)
        arrays = {"logits_buf": d["logits"], "mask_buf": d["mask"].view(np.uint8)}

        def call(f: Any, a: dict) -> Any:
            return f(
                a["logits_buf"], n_envs=NS, n_actions=NA, mask_buf=a["mask_buf"], seed=1, counter=2
            )

        return arrays, call
    g = _gauss(rng)
    arrays = {"params_buf": np.concatenate([g["mean"], g["log_std"]], axis=1)}
    return arrays, lambda f, a: f(a["params_buf"], n_envs=NS, action_dim=NA, seed=1, counter=2)


@pytest.mark.parametrize("name", sorted(BYTES_KERNELS))
@pytest.mark.parametrize("kind", BYTE_KINDS)
def test_byte_kernels_read_buffers_in_place(
    name: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = getattr(fastppo, name)
    from fastppo import codec

    arrays, call = _byte_inputs(name, np.random.default_rng(5))
    expected = call(f, arrays)
    bufs = {k: _as_buffer(kind, a) for k, a in arrays.items()}
    seen: list[tuple[Any, np.ndarray]] = []
    real = codec.byte_view

    def byte_view(fn: str, arg: str, buf: Any) -> np.ndarray:
        v = real(fn, arg, buf)
        seen.append((buf, v))
        return v

    monkeypatch.setattr(codec, "byte_view", byte_view)
    got = call(f, bufs)
    assert got == expected
    for k, b in bufs.items():
        views = [v for x, v in seen if x is b]
        assert views, f"{name}: {k} never read through codec.byte_view"
        src = np.frombuffer(b, np.uint8) if isinstance(b, (bytes, bytearray)) else arrays[k]
        assert all(np.shares_memory(v, src) for v in views), f"{name}: {k} ({kind}) copied"
    monkeypatch.undo()
    smallest = min(a.nbytes for a in arrays.values())
    outputs = sum(len(x) for x in expected)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        call(f, bufs)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    # outputs are built as arrays, then turned into bytes: twice their size
    assert peak < 2 * outputs + smallest // 4, f"{name} ({kind}) allocated {peak} bytes"


@pytest.mark.parametrize("name", sorted(BYTES_KERNELS))
def test_byte_kernels_take_torch_cpu_tensors(name: str) -> None:
    f = getattr(fastppo, name)
    arrays, call = _byte_inputs(name, np.random.default_rng(6))
    assert call(f, {k: torch.from_numpy(a) for k, a in arrays.items()}) == call(f, arrays)


@pytest.mark.parametrize("name", sorted(BYTES_KERNELS))
def test_byte_kernels_refuse_accelerator_buffers(name: str) -> None:
    f = getattr(fastppo, name)
    arrays, call = _byte_inputs(name, np.random.default_rng(7))
    for k in arrays:
        for bad in (_FakeCudaTensor(arrays[k]), _FakeCupy(arrays[k])):
            with pytest.raises(TypeError, match=rf"^{name}: {k} must be"):
                call(f, dict(arrays, **{k: bad}))


@pytest.mark.parametrize("kind", ["numpy", "bytearray", "memoryview"])
def test_codec_decode_is_a_view(kind: str) -> None:
    from fastppo import codec

    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    buf = _as_buffer(kind, a)
    src = np.frombuffer(buf, np.uint8) if isinstance(buf, bytearray) else a
    out = codec.decode(buf, "float32", (4, 6))
    np.testing.assert_array_equal(out, a)
    assert np.shares_memory(out, src)
