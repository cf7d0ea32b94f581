"""Files are data: atomic writes, and reads that can neither run code nor over-allocate.

Threat model. A checkpoint (``checkpoint.json`` + ``checkpoint.npz``, written
by ``PPOTrainer.save`` and the actor-learner; a previous release's
``learner.npz``) may come from someone
else: a downloaded run directory, a shared disk. Loading one
(``PPOTrainer.load``, ``fastppo eval``, ``fastppo train --resume``, an
actor-learner resume) may:

* read the files, and allocate what they hold: arrays exactly as large as the
  bytes behind them, and a network of at most ``ActorCritic``'s size rule
  (``MAX_PARAMS`` parameters), believed only when the weights in the file
  match it;
* fail with one ``ValueError`` naming the loader, the file and the problem.

It may not:

* unpickle anything or import any module: arrays are read from ``.npy``
  members with numpy's header parser (a literal, never ``eval``), object
  dtypes are refused, JSON is parsed by :mod:`json` with a bounded nesting
  depth;
* make an env: a loaded trainer makes its envs when the caller first needs
  them (``learn``, ``evaluate``, ``envs``). An env id read from a file that
  has a module part (``"pkg.mod:Env-v0"``, whose module ``gymnasium.make``
  would import) is refused unless the caller passes ``env=`` or
  ``trust_env_id=True`` (``fastppo eval --env`` / ``--trust-env-id``). A
  plain id only looks up gymnasium's registry, which installed code filled;
  the file's ``env_kwargs`` reach that registered env's constructor;
* allocate beyond the file: every ``.npz`` member must be stored
  uncompressed (``np.savez`` writes them so) with exactly the size its
  header declares, so a zip bomb or a header claiming 2**40 elements is
  refused before anything the size of the array exists; sizes read from the
  JSON (network widths, statistics' shapes, env counts) are checked against
  the arrays they describe before anything is allocated; the rollout buffer
  (``n_steps * n_envs`` rows) is made by the first rollout, not by loading;
* surface a raw ``KeyError``, ``BadZipFile``, ``EOFError`` or numpy's pickle
  message.

Broadcast frames (:mod:`fastppo.actor_learner.wire`) follow the same rules:
fixed header, reserved fields zero, a CRC-32 over the whole frame.

Writes go to a temporary name, are flushed to disk and renamed into place
(``os.replace`` is atomic on POSIX and Windows), so a crash mid-save leaves the
previous file intact.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np

#: Array dtypes a checkpoint may hold: fixed-size numbers, no objects, no structs.
ARRAY_KINDS = "biuf"
#: Members per archive; fastppo writes at most a dozen.
MAX_MEMBERS = 256
#: Nesting depth of a JSON document (deeper is refused before the parser recurses).
MAX_JSON_DEPTH = 32


def bad(fn: str, label: str, expected: str, got: Any) -> NoReturn:
    """Raise the loader error: ``"<fn>: <label> must be <expected>, got <got>"``."""
    raise ValueError(f"{fn}: {label} must be {expected}, got {got}")


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, ``os.replace``)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An uncompressed ``.npz`` of ``arrays`` (what :func:`read_npz` accepts)."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]
    return buf.getvalue()


def read_file(fn: str, path: str) -> bytes:
    """The bytes of ``path``; a missing or unreadable file is the loader's ``ValueError``."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        bad(fn, path, "a readable file", f"{type(e).__name__}: {e.strerror or e}")


def _json_depth_ok(text: str) -> bool:
    # Brackets outside strings; the JSON parser recurses once per level, so a
    # file of a million '[' would otherwise end in RecursionError.
    depth = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def parse_json(fn: str, label: str, raw: bytes) -> dict[str, Any]:
    """A JSON object from ``raw`` (UTF-8); anything else is the loader's ``ValueError``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad(fn, label, "UTF-8 JSON", f"undecodable bytes ({e.reason} at byte {e.start})")
    if not _json_depth_ok(text):
        bad(fn, label, f"JSON nested at most {MAX_JSON_DEPTH} deep", "deeper nesting")
    try:
        meta = json.loads(text)
    except ValueError as e:
        bad(fn, label, "valid JSON", str(e))
    if not isinstance(meta, dict):
        bad(fn, label, "a JSON object", type(meta).__name__)
    return meta


def _npy_header(fn: str, label: str, f: Any) -> tuple[tuple[int, ...], bool, np.dtype]:
    try:
        major, _ = np.lib.format.read_magic(f)
        if major == 1:
            return np.lib.format.read_array_header_1_0(f)
        if major in (2, 3):
            return np.lib.format.read_array_header_2_0(f)
    except (ValueError, TypeError, SyntaxError, EOFError, OSError, zipfile.BadZipFile) as e:
        bad(fn, label, "a .npy array", f"a broken header ({e})")
    bad(fn, label, "a .npy array of format version 1, 2 or 3", f"version {major}")


def read_npz(fn: str, path: str, data: bytes) -> dict[str, np.ndarray]:
    """Every array of an uncompressed ``.npz`` held in ``data``, checked as the module says.

    The arrays are fresh, writeable and own their memory (nothing refers to ``data``).
    """
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        OSError,
        EOFError,
        ValueError,
        NotImplementedError,  # e.g. "zip file version 10.9" from a corrupted directory
        RuntimeError,
    ) as e:
        bad(fn, path, "a .npz (zip) archive", f"{len(data)} bytes that are not one ({e})")
    arrays: dict[str, np.ndarray] = {}
    with zf:
        infos = zf.infolist()
        if len(infos) > MAX_MEMBERS:
            bad(fn, path, f"at most {MAX_MEMBERS} arrays", f"{len(infos)} members")
        for info in infos:
            label = f"{path} member {info.filename!r}"
            if not info.filename.endswith(".npy") or info.filename[:-4] in arrays:
                bad(fn, label, "a uniquely named .npy member", "another name or a duplicate")
            if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
                bad(
                    fn,
                    label,
                    "stored uncompressed (as fastppo writes it)",
                    f"compression method {info.compress_type}, {info.compress_size} bytes "
                    f"expanding to {info.file_size}",
                )
            if info.flag_bits & 0x1:
                bad(fn, label, "not encrypted (as fastppo writes it)", "an encrypted member")
            if info.header_offset + info.file_size > len(data):
                bad(fn, label, "inside the file", "a member that runs past its end (truncated)")
            arrays[info.filename[:-4]] = _read_member(fn, label, zf, info)
    return arrays


def _read_member(fn: str, label: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    try:
        f = zf.open(info)
    except (
        zipfile.BadZipFile,
        OSError,
        EOFError,
        ValueError,
        NotImplementedError,
        RuntimeError,
    ) as e:
        bad(fn, label, "a readable zip member", str(e))
    with f:
        shape, fortran, dtype = _npy_header(fn, label, f)
        if dtype.kind not in ARRAY_KINDS or dtype.hasobject or dtype.fields is not None:
            bad(fn, label, "an array of numbers or bools (no objects)", f"dtype {dtype}")
        count = 1
        for s in shape:
            count *= int(s)
        nbytes = count * dtype.itemsize
        header = f.tell()
        if header + nbytes != info.file_size:
            bad(
                fn,
                label,
                f"{header + nbytes} bytes for shape {tuple(shape)} of {dtype}",
                f"{info.file_size} bytes",
            )
        try:
            raw = f.read(nbytes)  # reaching the end checks the member's CRC-32
            extra = f.read(1)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            bad(fn, label, "intact (CRC-32 and length as recorded)", str(e))
    if len(raw) != nbytes or extra:
        bad(fn, label, f"{nbytes} bytes of data", f"{len(raw) + len(extra)}")
    arr = np.frombuffer(bytearray(raw), dtype=dtype)
    return arr.reshape(shape, order="F" if fortran else "C")


def member(
    fn: str,
    path: str,
    arrays: Mapping[str, np.ndarray],
    name: str,
    dtype: Any,
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """``arrays[name]``, which must exist with ``dtype`` (one of them, given a tuple)
    and ``shape`` when given."""
    label = f"{path} array {name!r}"
    if name not in arrays:
        bad(fn, label, "present", f"an archive holding only {sorted(arrays)}")
    a = arrays[name]
    allowed = [np.dtype(d) for d in (dtype if isinstance(dtype, tuple) else (dtype,))]
    if a.dtype not in allowed:
        want = " or ".join(str(d) for d in allowed)
        bad(fn, label, f"dtype {want}", f"dtype {a.dtype}")
    if shape is not None and a.shape != tuple(shape):
        bad(fn, label, f"shape {tuple(shape)}", f"shape {a.shape}")
    return np.ascontiguousarray(a)


# -- the checkpoint format: a directory holding checkpoint.npz + checkpoint.json --
#: Arrays of a checkpoint (policy parameters, optimizer moments, statistics).
CHECKPOINT_NPZ = "checkpoint.npz"
#: Everything else: ``format`` and ``version`` (what the pair holds), the
#: npz's ``npz_sha256``, and the sections the writer defines.
CHECKPOINT_JSON = "checkpoint.json"
#: What rebuilding state from a parsed file may raise on inconsistent content;
#: a loader turns each into its one ValueError naming the file.
RESTORE_ERRORS = (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError)


def split_state(prefix: str, state: Mapping[str, Any], arrays: dict[str, np.ndarray]) -> dict:
    """Arrays of ``state`` go to ``arrays`` under ``prefix/key``; the rest is returned for JSON."""
    rest: dict[str, Any] = {}
    for k, v in state.items():
        if isinstance(v, np.ndarray):
            arrays[f"{prefix}/{k}"] = v
        elif isinstance(v, np.generic):
            rest[k] = v.item()
        else:
            rest[k] = v
    return rest


def join_state(prefix: str, rest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict:
    """Inverse of :func:`split_state`."""
    d = dict(rest)
    p = f"{prefix}/"
    for name, a in arrays.items():
        if name.startswith(p):
            d[name[len(p) :]] = a
    return d


def write_checkpoint(path: str, meta: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """Write the directory ``path`` (created if missing): the npz first, then the JSON.

    Both are written atomically; the JSON records the npz's SHA-256, so a crash
    between the two renames, or a mismatched pair copied by hand, is detected on
    load instead of silently mixing states.
    """
    os.makedirs(path, exist_ok=True)
    data = npz_bytes(arrays)
    meta = dict(meta, npz_sha256=hashlib.sha256(data).hexdigest())
    write_atomic(os.path.join(path, CHECKPOINT_NPZ), data)
    write_atomic(os.path.join(path, CHECKPOINT_JSON), json.dumps(meta, indent=1).encode())


def read_checkpoint(
    fn: str, path: str, fmt: str, version: int
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, arrays)`` of the checkpoint directory ``path``, which must hold ``fmt``
    at ``version``; both files parsed as this module says, the pair checked to match."""
    meta_path = os.path.join(path, CHECKPOINT_JSON)
    npz_path = os.path.join(path, CHECKPOINT_NPZ)
    if not (os.path.isfile(meta_path) and os.path.isfile(npz_path)):
        bad(fn, "path", f"a directory holding {CHECKPOINT_JSON} and {CHECKPOINT_NPZ}", repr(path))
    meta = parse_json(fn, meta_path, read_file(fn, meta_path))
    if meta.get("format") != fmt:
        bad(fn, meta_path, f"a {fmt} file", f"format {meta.get('format')!r}")
    if meta.get("version") != version:
        bad(fn, meta_path, f"format version {version}", repr(meta.get("version")))
    data = read_file(fn, npz_path)
    if hashlib.sha256(data).hexdigest() != meta.get("npz_sha256"):
        bad(
            fn,
            npz_path,
            f"the file {CHECKPOINT_JSON} was written with (SHA-256 mismatch)",
            "a different file (interrupted save or mixed checkpoints)",
        )
    return meta, read_npz(fn, npz_path, data)


def section(fn: str, path: str, meta: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``meta[key]``, which must be a JSON object."""
    v = meta.get(key)
    if not isinstance(v, dict):
        label = f"{os.path.join(path, CHECKPOINT_JSON)} field {key!r}"
        bad(fn, label, "a JSON object", type(v).__name__)
    return v
