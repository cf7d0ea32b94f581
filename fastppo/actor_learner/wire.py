"""The policy-broadcast format: versioned weight bytes, never pickled.

A broadcast crosses threads, processes and machines, and a process that
receives one must not run code chosen by whoever wrote it, so the format is a
fixed header followed by raw floats::

    offset  size  field
    0       4     magic  b"FPPW"
    4       2     format version (uint16, currently 2)
    6       1     dtype code (uint8: 1 = float32, 2 = float64)
    7       1     reserved, must be 0
    8       8     policy version (uint64)
    16      8     number of parameters n (uint64)
    24      4     CRC-32 of the whole frame (uint32, zlib.crc32), computed with
                  these four bytes set to zero
    28      4     reserved, must be 0
    32      n*w   the flat parameter vector, little-endian, w = 4 or 8 bytes

All integers are little-endian. The CRC covers every byte but its own, header
included: a flipped bit in the policy version (which the staleness valve
trusts) is caught like a truncated payload or a read torn by a concurrent
writer (the shared-memory transport relies on it as a second line behind its
sequence lock). Version 1 covered the payload only; it is refused (broadcasts
live only as long as one run, so no stored ones need reading).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from fastppo._checks import fail

MAGIC = b"FPPW"
FORMAT_VERSION = 2
HEADER = struct.Struct("<4sHBBQQII")
HEADER_SIZE = HEADER.size  # 32
_CODES = {np.dtype("<f4"): 1, np.dtype("<f8"): 2}
_DTYPES: dict[int, np.dtype] = {1: np.dtype("<f4"), 2: np.dtype("<f8")}
_CRC_AT = 24
_ZERO_CRC = bytes(4)


def _frame_crc(mv: memoryview) -> int:
    """CRC-32 of the frame with its CRC field read as zeros."""
    crc = zlib.crc32(mv[:_CRC_AT])
    crc = zlib.crc32(_ZERO_CRC, crc)
    return zlib.crc32(mv[_CRC_AT + 4 :], crc)


def encoded_size(n_params: int, dtype: Any = np.float32) -> int:
    """Length in bytes of a broadcast of ``n_params`` values of ``dtype``."""
    return HEADER_SIZE + n_params * np.dtype(dtype).itemsize


def encode_weights(params: np.ndarray, version: int) -> bytes:
    """Pack a flat float32/float64 parameter vector and its version.

    Parameters
    ----------
    params : ndarray [n], float32 or float64
        The policy's flat parameter vector.
    version : int
        Policy version (>= 0); it counts broadcasts.

    Returns
    -------
    bytes
        Header and payload as documented in this module.
    """
    fn = "encode_weights"
    if not isinstance(params, np.ndarray):
        fail(fn, "params", "an ndarray", type(params).__name__, exc=TypeError)
    if params.ndim != 1:
        fail(fn, "params", "1-D", f"shape {params.shape}")
    dt = params.dtype.newbyteorder("<")
    if dt not in _CODES:
        fail(fn, "params", "float32 or float64", f"dtype {params.dtype}", exc=TypeError)
    if isinstance(version, bool) or not isinstance(version, (int, np.integer)):
        fail(fn, "version", "an int in [0, 2**64)", repr(version), exc=TypeError)
    if not 0 <= int(version) < 2**64:  # the header's uint64 field
        fail(fn, "version", "an int in [0, 2**64)", repr(version))
    payload = np.ascontiguousarray(params, dtype=dt).tobytes()
    frame = bytearray(
        HEADER.pack(MAGIC, FORMAT_VERSION, _CODES[dt], 0, int(version), params.size, 0, 0)
    )
    frame += payload
    struct.pack_into("<I", frame, _CRC_AT, _frame_crc(memoryview(frame)))
    return bytes(frame)


def _bytes_view(fn: str, buf: Any) -> memoryview:
    try:
        mv = memoryview(buf)
    except TypeError:
        fail(fn, "buf", "a bytes-like object", type(buf).__name__, exc=TypeError)
    if not mv.c_contiguous:
        fail(fn, "buf", "a C-contiguous buffer", "a non-contiguous one")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


def read_header(buf: Any) -> tuple[int, np.dtype, int, int]:
    """Parse and check a header: ``(version, dtype, n_params, crc)``.

    The CRC itself is checked by :func:`decode_weights`, over the whole frame.
    """
    fn = "decode_weights"
    mv = _bytes_view(fn, buf)
    if mv.nbytes < HEADER_SIZE:
        fail(fn, "buf", f"at least {HEADER_SIZE} bytes (the header)", f"{mv.nbytes} bytes")
    magic, fmt, code, r0, version, n, crc, r1 = HEADER.unpack_from(mv, 0)
    if magic != MAGIC:
        fail(fn, "buf", f"a fastppo broadcast starting with {MAGIC!r}", f"magic {bytes(magic)!r}")
    if fmt != FORMAT_VERSION:
        fail(fn, "buf", f"format version {FORMAT_VERSION}", fmt)
    if code not in _DTYPES:
        fail(fn, "buf", "dtype code 1 (float32) or 2 (float64)", code)
    if r0 or r1:
        fail(fn, "buf", "a header whose reserved fields are 0", f"{r0} at byte 7, {r1} at byte 28")
    return int(version), _DTYPES[code], int(n), int(crc)


def decode_weights(
    buf: Any, n_params: int | None = None, dtype: Any = None
) -> tuple[int, np.ndarray]:
    """Check and unpack a broadcast made by :func:`encode_weights`.

    Parameters
    ----------
    buf : bytes-like
        The broadcast (bytes, bytearray, memoryview, shared memory...).
    n_params : int, optional
        Expected number of parameters; a mismatch raises ``ValueError``.
    dtype : dtype, optional
        Expected float dtype; a mismatch raises ``TypeError``.

    Returns
    -------
    version : int
    params : ndarray [n]
        A read-only view into ``buf`` (no copy); copy it, or hand it to
        ``policy.set_params``, before ``buf`` is reused.

    Raises
    ------
    ValueError
        Wrong magic, format version, dtype code, non-zero reserved fields,
        length, or a CRC mismatch anywhere in the frame (corrupted, truncated
        or torn bytes).
    TypeError
        ``buf`` is not a bytes-like object, or ``dtype`` does not match.
    """
    fn = "decode_weights"
    version, dt, n, crc = read_header(buf)
    mv = _bytes_view(fn, buf)
    need = HEADER_SIZE + n * dt.itemsize
    if mv.nbytes != need:
        fail(fn, "buf", f"{need} bytes for {n} {dt.name} parameters", f"{mv.nbytes} bytes")
    if n_params is not None and n != n_params:
        fail(fn, "buf", f"{n_params} parameters (this policy's size)", f"{n}")
    if dtype is not None:
        try:
            want = np.dtype(dtype)
        except TypeError:
            fail(fn, "dtype", "a numpy float dtype or None", repr(dtype)[:60], exc=TypeError)
        if want.newbyteorder("<") != dt:
            fail(fn, "buf", f"{want.name} parameters", dt.name, exc=TypeError)
    if _frame_crc(mv) != crc:
        fail(
            fn,
            "buf",
            "a frame whose CRC-32 matches its header",
            "a mismatch (corrupted, truncated or torn)",
        )
    arr = np.frombuffer(mv[HEADER_SIZE:], dtype=dt, count=n)
    if arr.flags.writeable:
        arr.flags.writeable = False
    return version, arr
