"""Byte-buffer samplers: same draws as the array samplers on the decoded values, errors."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from fastppo import codec
from fastppo import sampling as S
from fastppo.reference import sampling as R

N, A = 40, 6


def _logits(seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((N, A)) * 2).astype(np.float64)


def _mask() -> np.ndarray:
    m = np.random.default_rng(9).random((N, A)) > 0.5
    m[:, 2] = True
    return m


def _decoded(buf: bytes, dtype: str, shape: tuple[int, int]) -> np.ndarray:
    """What the kernel sees: float64 for float64 buffers, else the exact float32 values."""
    return codec.decode(buf, dtype, shape, out_dtype="float64" if dtype == "float64" else None)


@pytest.mark.parametrize("dtype", codec.FLOAT_DTYPES)
@pytest.mark.parametrize("masked", [False, True])
def test_categorical_bytes_equal_array_sampler_on_decoded_logits(dtype: str, masked: bool) -> None:
    x = _logits()
    x[0, 4] = -np.inf
    buf = codec.encode(x, dtype)
    m = _mask() if masked else None
    ab, lb = S.sample_categorical_bytes(
        buf,
        n_envs=N,
        n_actions=A,
        dtype=dtype,
        seed=5,
        counter=6,
        env_offset=3,
        mask_buf=None if m is None else m.astype(np.uint8).tobytes(),
    )
    dec = _decoded(buf, dtype, (N, A))
    ra, rl = S.sample_categorical(dec, m, seed=5, counter=6, env_offset=3)
    assert isinstance(ab, bytes) and isinstance(lb, bytes)
    np.testing.assert_array_equal(np.frombuffer(ab, np.int64), ra)
    np.testing.assert_array_equal(np.frombuffer(lb, np.float32), rl)
    ref_a, _ = R.sample_categorical(dec, m, 5, 6, env_offset=3)
    np.testing.assert_array_equal(np.frombuffer(ab, np.int64), ref_a)


@pytest.mark.parametrize("action_dtype", codec.DTYPES)
def test_categorical_action_dtypes(action_dtype: str) -> None:
    n_actions = 2 if action_dtype == "bool" else A
    x = _logits()[:, :n_actions]
    ab, _ = S.sample_categorical_bytes(
        codec.encode(x, "float32"),
        n_envs=N,
        n_actions=n_actions,
        action_dtype=action_dtype,
        seed=1,
        counter=2,
    )
    ref, _ = S.sample_categorical(x.astype(np.float32), seed=1, counter=2)
    assert len(ab) == N * codec.itemsize(action_dtype)
    np.testing.assert_array_equal(codec.decode(ab, action_dtype), ref)


@pytest.mark.parametrize(
    "wrap", [bytes, bytearray, memoryview, lambda b: np.frombuffer(b, np.uint8)]
)
def test_buffer_kinds_and_deterministic(wrap: object) -> None:
    buf = codec.encode(_logits(), "bfloat16")
    got = S.sample_categorical_bytes(
        wrap(buf),
        n_envs=N,
        n_actions=A,
        dtype="bfloat16",
        seed=0,
        counter=0,  # type: ignore[operator]
        deterministic=True,
    )
    dec = _decoded(buf, "bfloat16", (N, A))
    np.testing.assert_array_equal(np.frombuffer(got[0], np.int64), np.argmax(dec, axis=1))


def test_misaligned_and_mmap_buffers() -> None:
    x = _logits().astype(np.float32)
    raw = bytearray(1 + x.nbytes)
    raw[1:] = x.tobytes()
    a1 = S.sample_categorical_bytes(memoryview(raw)[1:], n_envs=N, n_actions=A, seed=3, counter=3)
    mm = mmap.mmap(-1, x.nbytes)
    mm.write(x.tobytes())
    a2 = S.sample_categorical_bytes(mm, n_envs=N, n_actions=A, seed=3, counter=3)
    mm.close()
    ref = S.sample_categorical(x, seed=3, counter=3)
    assert a1[0] == a2[0] == ref[0].tobytes()


@pytest.mark.parametrize("dtype", codec.FLOAT_DTYPES)
@pytest.mark.parametrize("squash", [False, True])
def test_gaussian_bytes_equal_array_sampler(dtype: str, squash: bool) -> None:
    a_dim = 3
    g = np.random.default_rng(4)
    p = np.concatenate([g.standard_normal((N, a_dim)), g.standard_normal((N, a_dim)) * 0.3 - 1], 1)
    buf = codec.encode(p, dtype)
    ab, lb = S.sample_gaussian_bytes(
        buf, n_envs=N, action_dim=a_dim, dtype=dtype, seed=8, counter=1, squash=squash
    )
    dec = _decoded(buf, dtype, (N, 2 * a_dim))
    ra, rl = S.sample_gaussian(
        np.ascontiguousarray(dec[:, :a_dim]),
        np.ascontiguousarray(dec[:, a_dim:]),
        seed=8,
        counter=1,
        squash=squash,
    )
    np.testing.assert_array_equal(np.frombuffer(ab, np.float32).reshape(N, a_dim), ra)
    np.testing.assert_array_equal(np.frombuffer(lb, np.float32), rl)


def test_gaussian_bytes_action_dtypes() -> None:
    p = np.zeros((N, 4), np.float32)
    p[:, :2] = [[0.25, -100.7]]
    p[:, 2:] = -30.0  # std ~ 1e-13: the actions are the means
    buf = p.tobytes()
    for adt, want in [
        ("float16", [0.25, -100.6875]),
        ("bfloat16", [0.25, -100.5]),
        ("float64", [0.25, np.float32(-100.7)]),
        ("int8", [0, -100]),
    ]:
        ab, _ = S.sample_gaussian_bytes(
            buf, n_envs=N, action_dim=2, action_dtype=adt, seed=1, counter=1
        )
        got = codec.decode(ab, adt, (N, 2), out_dtype="float64")
        np.testing.assert_allclose(got, np.broadcast_to(want, (N, 2)), rtol=1e-7)
    with pytest.raises(
        ValueError, match=r"sample_gaussian_bytes: actions must be finite and within \[0, 255\]"
    ):
        S.sample_gaussian_bytes(
            buf, n_envs=N, action_dim=2, action_dtype="uint8", seed=1, counter=1
        )


def test_bytes_errors() -> None:
    buf = codec.encode(_logits(), "float32")
    kw = {"seed": 1, "counter": 1}
    fn = "sample_categorical_bytes: "
    with pytest.raises(
        ValueError,
        match=fn + r"logits_buf must be 960 bytes \(40 envs x 6 actions of float32\), got 956",
    ):
        S.sample_categorical_bytes(buf[:-4], n_envs=N, n_actions=A, **kw)
    with pytest.raises(ValueError, match=r"mask_buf must be 240 bytes"):
        S.sample_categorical_bytes(buf, n_envs=N, n_actions=A, mask_buf=bytes(10), **kw)
    with pytest.raises(TypeError, match="dtype must be one of float16, bfloat16, float32, float64"):
        S.sample_categorical_bytes(buf, n_envs=N, n_actions=A, dtype="int32", **kw)
    with pytest.raises(TypeError, match="action_dtype must be one of"):
        S.sample_categorical_bytes(buf, n_envs=N, n_actions=A, action_dtype="str", **kw)
    with pytest.raises(
        ValueError, match="action_dtype must be able to hold action 199 exactly, got 'int8'"
    ):
        S.sample_categorical_bytes(
            bytes(4 * 200), n_envs=1, n_actions=200, action_dtype="int8", **kw
        )
    with pytest.raises(ValueError, match="action_dtype must be able to hold action 5"):
        S.sample_categorical_bytes(buf, n_envs=N, n_actions=A, action_dtype="bool", **kw)
    with pytest.raises(ValueError, match="n_actions must be an int >= 1"):
        S.sample_categorical_bytes(b"", n_envs=0, n_actions=0, **kw)
    with pytest.raises(TypeError, match="n_envs must be an int"):
        S.sample_categorical_bytes(buf, n_envs=40.0, n_actions=A, **kw)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="logits_buf must be a buffer-protocol object"):
        S.sample_categorical_bytes([0.0] * 240, n_envs=N, n_actions=A, **kw)
    bad = _logits()
    bad[17, 3] = np.nan
    with pytest.raises(ValueError, match=r"logits_buf must be free of NaN.*env 17, action 3"):
        S.sample_categorical_bytes(
            codec.encode(bad, "float16"), n_envs=N, n_actions=A, dtype="float16", **kw
        )
    m = np.ones((N, A), np.uint8)
    m[11] = 0
    with pytest.raises(ValueError, match=r"mask_buf must be nonzero.*env 11"):
        S.sample_categorical_bytes(buf, n_envs=N, n_actions=A, mask_buf=m.tobytes(), **kw)
    with pytest.raises(
        ValueError,
        match=r"params_buf must be 24 bytes \(1 envs x \[mean \| log_std\] of 3 of float32\)",
    ):
        S.sample_gaussian_bytes(bytes(20), n_envs=1, action_dim=3, **kw)
    p = np.zeros((2, 4), np.float32)
    p[1, 3] = np.inf
    with pytest.raises(
        ValueError,
        match=r"params_buf \(log_std\) must be finite and within \+-700, got inf at env 1, "
        r"dimension 1",
    ):
        S.sample_gaussian_bytes(p.tobytes(), n_envs=2, action_dim=2, **kw)
