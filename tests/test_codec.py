"""fastppo.codec: exhaustive float16/bfloat16 checks, zero-copy decoding, every dtype pair."""

from __future__ import annotations

import mmap
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fastppo import codec
from fastppo.codec import decode_half, encode_half
from fastppo.reference import codec as rcodec

ALL16 = np.arange(65536, dtype=np.uint16)


def _np_f16_bits(x: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf is the point
        return x.astype(np.float16).view(np.uint16)


def _to_f32(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # values past float32's range become inf, on purpose
        return x.astype(np.float32)


def _spread(n: int, seed: int) -> np.ndarray:
    """float64 values over many binades, both signs, plus specials."""
    g = np.random.default_rng(seed)
    x = g.standard_normal(n) * np.exp2(g.integers(-150, 130, n).astype(np.float64))
    return np.concatenate([x, [0.0, -0.0, np.inf, -np.inf, 65504.0, 65520.0, 65519.99, 1e-8]])


# ---------------------------------------------------------------- float16


def test_float16_decode_all_bit_patterns_match_numpy() -> None:
    got = np.empty(65536, np.float32)
    decode_half(ALL16, got, False)
    with np.errstate(invalid="ignore"):
        ref = ALL16.view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))  # NaN payloads too


def test_float16_encode_all_values_round_trip() -> None:
    with np.errstate(invalid="ignore"):  # signalling NaN patterns
        vals = ALL16.view(np.float16).astype(np.float32)
        vals64 = vals.astype(np.float64)
    for src in (vals, vals64):
        bits = np.empty(65536, np.uint16)
        encode_half(src, bits, False)
        nan = np.isnan(vals)
        np.testing.assert_array_equal(bits[~nan], ALL16[~nan])
        assert np.all(np.isnan(bits[nan].view(np.float16)))


def test_float16_encode_ties_and_random_values_match_numpy() -> None:
    """Midpoints between neighbours are the hard case: ties must go to the even one."""
    v = ALL16[(ALL16 & 0x7C00) != 0x7C00].view(np.float16).astype(np.float64)
    v = np.sort(v[v >= 0])
    mids = (v[:-1] + v[1:]) / 2  # exact in float64
    cases = np.concatenate([mids, -mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf)])
    cases = np.concatenate([cases, _spread(200_000, 1)])
    for src in (cases, _to_f32(cases)):
        bits = np.empty(src.size, np.uint16)
        encode_half(src, bits, False)
        ref = _np_f16_bits(src)
        nan = np.isnan(src)
        np.testing.assert_array_equal(bits[~nan], ref[~nan])


# ---------------------------------------------------------------- bfloat16


def test_bfloat16_decode_all_bit_patterns_match_definition() -> None:
    got = np.empty(65536, np.float32)
    decode_half(ALL16, got, True)
    ref = rcodec.bf16_bits_to_float(ALL16)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(got[~nan].astype(np.float64), ref[~nan])
    np.testing.assert_array_equal(np.signbit(got[~nan]), np.signbit(ref[~nan]))
    assert np.all(np.isnan(got[nan]))


def test_bfloat16_encode_all_values_round_trip() -> None:
    vals = np.empty(65536, np.float32)
    decode_half(ALL16, vals, True)
    bits = np.empty(65536, np.uint16)
    encode_half(vals, bits, True)
    nan = np.isnan(vals)
    np.testing.assert_array_equal(bits[~nan], ALL16[~nan])
    assert np.all(np.isnan((bits[nan].astype(np.uint32) << 16).view(np.float32)))


def test_bfloat16_encode_matches_independent_rounding() -> None:
    vals = np.empty(65536, np.float32)
    decode_half(ALL16, vals, True)
    v = np.sort(vals[np.isfinite(vals) & (vals >= 0)].astype(np.float64))
    mids = (v[:-1] + v[1:]) / 2
    pick = np.random.default_rng(0).choice(mids.size, 6000, replace=False)
    m = mids[pick]
    cases = np.concatenate([m, -m, np.nextafter(m, 0), np.nextafter(m, np.inf), _spread(6000, 2)])
    cases = np.concatenate([cases, [np.nan, 3.3895313892515355e38, 3.4e38, 1e-45, -1e-41]])
    for src in (cases, _to_f32(cases)):
        bits = np.empty(src.size, np.uint16)
        encode_half(src, bits, True)
        ref = rcodec.float_to_bf16_bits(src.astype(np.float64))
        np.testing.assert_array_equal(bits, ref)


def test_bfloat16_float32_input_equals_the_classic_bit_trick() -> None:
    """For float32 input, RNE is (b + 0x7FFF + ((b >> 16) & 1)) >> 16 (non-NaN)."""
    b = np.random.default_rng(3).integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32)
    x = b.view(np.float32)
    x = x[~np.isnan(x)]
    b = x.view(np.uint32).astype(np.uint64)
    ref = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    bits = np.empty(x.size, np.uint16)
    encode_half(x, bits, True)
    np.testing.assert_array_equal(bits, ref)


# ---------------------------------------------------------------- decode


@pytest.mark.parametrize(
    "make", [bytes, bytearray, memoryview, lambda b: np.frombuffer(b, np.uint8).copy()]
)
def test_decode_accepts_buffer_objects(make: object) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = make(x.tobytes())  # type: ignore[operator]
    out = codec.decode(buf, "float32", (3, 4))
    np.testing.assert_array_equal(out, x)
    assert out.dtype == np.float32


def test_decode_mmap_zero_copy() -> None:
    x = np.arange(10, dtype=np.int64)
    mm = mmap.mmap(-1, x.nbytes)
    mm.write(x.tobytes())
    out = codec.decode(mm, "int64", 10)
    np.testing.assert_array_equal(out, x)
    mm[0:8] = np.int64(42).tobytes()
    assert out[0] == 42  # a view of the mapping
    del out
    mm.close()


def test_decode_zero_copy_when_dtype_matches_and_aligned() -> None:
    x = np.arange(8, dtype=np.float32)
    ba = bytearray(x.tobytes())
    out = codec.decode(ba, "float32", (2, 4))
    assert np.shares_memory(out, np.frombuffer(ba, np.uint8))
    assert out.flags.writeable
    ro = codec.decode(bytes(ba), "float32")
    assert not ro.flags.writeable
    i = codec.decode(np.arange(3, dtype=np.int64), "int64")
    assert i.dtype == np.int64


def test_decode_misaligned_buffer_is_copied_and_correct() -> None:
    x = np.arange(5, dtype=np.float64)
    raw = bytearray(1 + x.nbytes)
    raw[1:] = x.tobytes()
    out = codec.decode(memoryview(raw)[1:], "float64", 5, out_dtype="float64")
    np.testing.assert_array_equal(out, x)
    assert out.flags.aligned


def test_decode_default_dtypes_and_bool() -> None:
    assert codec.decode(np.zeros(2, np.float16), "float16").dtype == np.float32
    assert codec.decode(np.zeros(2, np.float64), "float64").dtype == np.float32
    assert codec.decode(np.zeros(2, np.int8), "int8").dtype == np.int64
    np.testing.assert_array_equal(codec.decode(bytes([0, 1, 7, 255]), "bool"), [0, 1, 1, 1])
    np.testing.assert_array_equal(
        codec.decode(np.array([1.9, -2.9]), "float64", out_dtype="int64"), [1, -2]
    )


def test_decode_errors() -> None:
    with pytest.raises(
        ValueError, match=r"decode: buf must be 24 bytes \(shape \(2, 3\) of float32\), got 20"
    ):
        codec.decode(bytes(20), "float32", (2, 3))
    with pytest.raises(ValueError, match="buf must be a multiple of 8 bytes"):
        codec.decode(bytes(12), "int64")
    with pytest.raises(TypeError, match="decode: dtype must be one of"):
        codec.decode(bytes(4), "complex64")
    with pytest.raises(TypeError, match="decode: buf must be a buffer-protocol object"):
        codec.decode([1, 2], "uint8")
    with pytest.raises(TypeError, match="shape must be an int or a tuple"):
        codec.decode(bytes(4), "uint8", (2.0, 2))
    with pytest.raises(ValueError, match="C-contiguous"):
        codec.decode(np.zeros((4, 4), np.uint8)[:, ::2], "uint8")
    with pytest.raises(ValueError, match=r"within \[-9223372036854775808"):
        codec.decode(np.array([np.nan]), "float64", out_dtype="int64")


# ---------------------------------------------------------------- encode


def test_encode_all_dtype_pairs_round_trip() -> None:
    """Values representable in both dtypes survive encode -> decode for all 100 pairs."""
    for src_name in codec.DTYPES:
        for dst in codec.DTYPES:
            vals = [0, 1] if "bool" in (src_name, dst) else [0, 1, 2, 5, 100, 127]
            if src_name == "bfloat16" or src_name == "float16":
                a = np.array(vals, dtype=np.float32)  # no numpy bfloat16: the values as floats
            else:
                a = np.array(vals, dtype=np.dtype(src_name) if src_name != "bool" else bool)
            buf = codec.encode(a, dst)
            assert len(buf) == len(vals) * codec.itemsize(dst)
            back = codec.decode(buf, dst)
            np.testing.assert_array_equal(back, np.array(vals), err_msg=f"{src_name}->{dst}")


def test_encode_bool_and_half_bytes() -> None:
    assert codec.encode(np.array([True, False, True]), "bool") == bytes([1, 0, 1])
    assert codec.encode(np.array([1.0], np.float32), "bfloat16") == bytes([0x80, 0x3F])
    assert codec.encode(np.array([1.0]), "float16") == np.float16(1.0).tobytes()
    assert codec.encode(np.array([-1.0]), "int8") == bytes([0xFF])


def test_encode_floats_to_ints_truncate_toward_zero() -> None:
    got = codec.decode(codec.encode(np.array([1.9, -1.9, 127.99, -128.5]), "int8"), "int8")
    np.testing.assert_array_equal(got, [1, -1, 127, -128])


@pytest.mark.parametrize(
    ("values", "dtype", "match"),
    [
        (np.array([128]), "int8", r"encode: array must be within \[-128, 127\] for int8, got 128"),
        (np.array([-1]), "uint8", r"within \[0, 255\]"),
        (np.array([2**31]), "int32", "int32"),
        (np.array([1e10]), "int32", "after truncation, got 10000000000.0"),
        (np.array([np.nan]), "int16", "finite and within"),
        (np.array([np.inf], np.float32), "uint8", "finite and within"),
        (np.array([2]), "bool", r"within \[0, 1\]"),
        (np.array([0.0, 1.5, 2.0]), "bool", "0 or 1 for bool, got 1.5 at flat index 1"),
        (np.array([2049]), "float16", "integers exactly representable in float16, got 2049"),
        (np.array([257]), "bfloat16", "exactly representable in bfloat16"),
        (np.array([2**24 + 1]), "float32", "exactly representable in float32"),
        (np.array([2**53 + 1]), "float64", "exactly representable in float64"),
    ],
)
def test_encode_range_errors(values: np.ndarray, dtype: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        codec.encode(values, dtype)


def test_encode_type_errors() -> None:
    with pytest.raises(TypeError, match="encode: dtype must be one of"):
        codec.encode(np.zeros(2), "float8")
    with pytest.raises(TypeError, match="encode: array must be bool, integer or float"):
        codec.encode(np.array(["a"]), "int8")


def test_encode_float_overflow_is_ieee_inf_and_input_untouched() -> None:
    x = np.array([1e6, -1e40, 3.0])
    before = x.copy()
    f16 = codec.decode(codec.encode(x, "float16"), "float16")
    np.testing.assert_array_equal(f16, [np.inf, -np.inf, 3.0])
    f32 = codec.decode(codec.encode(x, "float32"), "float32")
    np.testing.assert_array_equal(f32, [1e6, -np.inf, 3.0])
    np.testing.assert_array_equal(x, before)


def test_encode_accepts_strided_and_float16_input() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    assert codec.encode(x, "float32") == np.ascontiguousarray(x).tobytes()
    h = np.array([0.5, -2.0], np.float16)
    assert codec.encode(h, "float16") == h.tobytes()


# ---------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        st.sampled_from([np.int8, np.int16, np.int32, np.int64, np.uint8]),
        hnp.array_shapes(max_dims=2, max_side=9),
    )
)
def test_integer_round_trip_property(a: np.ndarray) -> None:
    buf = codec.encode(a, a.dtype.name)
    np.testing.assert_array_equal(codec.decode(buf, a.dtype.name, a.shape), a)
    big = codec.decode(codec.encode(a, "int64"), "int64", a.shape)
    np.testing.assert_array_equal(big, a)


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(0, 20), elements=st.floats(width=32)))
def test_float32_round_trip_property(a: np.ndarray) -> None:
    for dt in ("float32", "float64"):
        back = codec.decode(codec.encode(a, dt), dt, out_dtype="float64").astype(np.float32)
        np.testing.assert_array_equal(back, a)  # NaN == NaN for assert_array_equal
    h = codec.decode(codec.encode(a, "float16"), "float16")
    np.testing.assert_array_equal(h, _np_f16_bits(a).view(np.float16).astype(np.float32))


# -- exactness at the edges (issue 13, class 8) ---------------------------------------
def _exact_oracle(v: int, dtype: str) -> bool:
    """Python ints: float(v) rounds correctly, so v is exact in float64 iff it
    round-trips; a narrower format holds v iff it holds the (exact) double."""
    if int(float(v)) != v:
        return False
    f = float(v)
    if dtype == "float64":
        return True
    if dtype == "float32":
        return float(np.float32(f)) == f
    if dtype == "float16":
        with np.errstate(over="ignore"):
            return float(np.float16(f)) == f
    return float(codec.decode(codec.encode(np.array([f]), "bfloat16"), "bfloat16")[0]) == f


@pytest.mark.parametrize(
    ("value", "np_dtype", "dtype", "exact"),
    [
        (2**53 + 1, np.int64, "float32", False),
        (2**53 + 1, np.int64, "float64", False),
        (2**64 - 1, np.uint64, "float64", False),
        (2**63 + 2048, np.uint64, "float64", True),
        (2**63, np.uint64, "float32", True),
        (-(2**63), np.int64, "float32", True),
        (-(2**63) + 1, np.int64, "float64", False),
        (65504, np.int64, "float16", True),
        (65505, np.int64, "float16", False),
        (2**17, np.int64, "float16", False),  # beyond float16's range
        (2**40, np.uint64, "bfloat16", True),
        (257, np.int16, "bfloat16", False),
    ],
)
def test_integer_to_float_exactness_edges(value, np_dtype, dtype, exact) -> None:
    assert _exact_oracle(value, dtype) == exact
    arr = np.array([value], np_dtype)
    if exact:
        got = codec.decode(codec.encode(arr, dtype), dtype, out_dtype="float64")
        assert int(got[0]) == value
    else:
        with pytest.raises(ValueError, match=f"integers exactly representable in {dtype}"):
            codec.encode(arr, dtype)


@settings(max_examples=300, deadline=None)
@given(
    v=st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**64 - 1)),
    dtype=st.sampled_from(["float16", "bfloat16", "float32", "float64"]),
)
def test_integer_exactness_matches_an_independent_oracle(v, dtype) -> None:
    arr = np.array([v], np.int64 if v < 2**63 else np.uint64)
    try:
        codec.encode(arr, dtype)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == _exact_oracle(v, dtype)


def test_bool_target_takes_only_0_and_1() -> None:
    assert codec.encode(np.array([0.0, 1.0, -0.0]), "bool") == b"\x00\x01\x00"
    for bad in (0.5, 2.0, -1.0, np.nan):
        with pytest.raises(ValueError, match=r"encode: array must be 0 or 1 for bool"):
            codec.encode(np.array([1.0, bad]), "bool")


def test_decode_refuses_object_arrays_and_reports_huge_shapes_exactly() -> None:
    with pytest.raises(TypeError, match="decode: buf must be a buffer of plain values"):
        codec.decode(np.array([b"a"], dtype=object), "float32")
    with pytest.raises(
        ValueError,
        match=r"decode: buf must be 73786976294838206464 bytes \(shape \(4611686018427387904, 4\)",
    ):
        codec.decode(b"\x00" * 8, "float32", shape=(2**62, 4))
