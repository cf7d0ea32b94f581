"""Checkpoints without pickle: arrays in ``checkpoint.npz``, everything else in ``checkpoint.json``.

Both files are written to a temporary name, flushed to disk and renamed into
place (``os.replace`` is atomic on POSIX and Windows), the npz first. The JSON
records the npz's SHA-256, so a crash between the two renames, or a mismatched
pair copied by hand, is detected on load instead of silently mixing states.
Loading uses ``np.load(..., allow_pickle=False)``: a checkpoint can never run code.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from typing import Any

import numpy as np

from fastppo._checks import fail

FORMAT = "fastppo-ppo-checkpoint"
VERSION = 1
NPZ = "checkpoint.npz"
META = "checkpoint.json"


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _split_state(
    prefix: str, state: dict[str, Any], arrays: dict[str, np.ndarray]
) -> dict[str, Any]:
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


def _join_state(prefix: str, rest: dict[str, Any], arrays: Any) -> dict[str, Any]:
    d = dict(rest)
    p = f"{prefix}/"
    for name in arrays.files:
        if name.startswith(p):
            d[name[len(p) :]] = arrays[name]
    return d


def save_trainer(trainer: Any, path: str) -> None:
    """Write ``trainer``'s full state to the directory ``path`` (created if missing)."""
    if not isinstance(path, (str, os.PathLike)):
        fail("PPOTrainer.save", "path", "a directory path", repr(path), exc=TypeError)
    path = os.fspath(path)
    os.makedirs(path, exist_ok=True)
    arrays: dict[str, np.ndarray] = {"policy/params": trainer.policy.params}
    opt = _split_state("adam", trainer.optimizer.state_dict(), arrays)
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "env_id": trainer.env_id,
        "env_kwargs": trainer.env_kwargs,
        "config": trainer.config.to_dict(),
        "policy": trainer.policy.spec(),
        "adam": opt,
        "trainer": trainer.state_json(),
    }
    if trainer.obs_rms is not None:
        meta["obs_rms"] = _split_state("obs_rms", trainer.obs_rms.state_dict(), arrays)
    if trainer.ret_norm is not None:
        meta["ret_norm"] = _split_state("ret_norm", trainer.ret_norm.state_dict(), arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    data = buf.getvalue()
    meta["npz_sha256"] = hashlib.sha256(data).hexdigest()
    _write_atomic(os.path.join(path, NPZ), data)
    _write_atomic(os.path.join(path, META), json.dumps(meta, indent=1).encode())


def read_checkpoint(path: str) -> tuple[dict[str, Any], Any]:
    """Validated ``(meta, arrays)`` of a checkpoint directory."""
    fn = "PPOTrainer.load"
    if not isinstance(path, (str, os.PathLike)):
        fail(fn, "path", "a directory path", repr(path), exc=TypeError)
    path = os.fspath(path)
    meta_path = os.path.join(path, META)
    npz_path = os.path.join(path, NPZ)
    if not (os.path.isfile(meta_path) and os.path.isfile(npz_path)):
        fail(fn, "path", f"a directory holding {META} and {NPZ}", repr(path))
    with open(meta_path, "rb") as f:
        try:
            meta = json.loads(f.read())
        except ValueError as e:
            fail(fn, META, "valid JSON", str(e))
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fail(
            fn,
            META,
            f"a {FORMAT} file",
            repr(meta.get("format") if isinstance(meta, dict) else meta),
        )
    if meta.get("version") != VERSION:
        fail(fn, "version", str(VERSION), repr(meta.get("version")))
    with open(npz_path, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != meta.get("npz_sha256"):
        fail(
            fn,
            NPZ,
            "the file this checkpoint.json was written with (SHA-256 mismatch)",
            "a different file (interrupted save or mixed checkpoints)",
        )
    arrays = np.load(io.BytesIO(data), allow_pickle=False)
    return meta, arrays


def load_trainer(cls: Any, path: str, env: Any = None) -> Any:
    """Inverse of :func:`save_trainer`."""
    from fastppo.ppo.config import PPOConfig

    fn = "PPOTrainer.load"
    meta, arrays = read_checkpoint(path)
    config = PPOConfig.from_dict(meta["config"])
    if env is None:
        env = meta.get("env_id")
        if env is None:
            fail(fn, "env", "the env factory (the run was not made from an env id)", None)
    trainer = cls(env, config, env_kwargs=meta.get("env_kwargs") or {})
    spec = trainer.policy.spec()
    if spec != meta["policy"]:
        trainer.close()
        fail(fn, "env", f"spaces matching the checkpoint's policy {meta['policy']}", spec)
    trainer.policy.set_params(arrays["policy/params"])
    trainer.optimizer.load_state_dict(_join_state("adam", meta["adam"], arrays))
    if "obs_rms" in meta:
        from fastppo.stats import RunningMeanStd

        trainer.obs_rms = RunningMeanStd.from_state_dict(
            _join_state("obs_rms", meta["obs_rms"], arrays)
        )
        trainer.policy.obs_normalizer = trainer.obs_rms
    if "ret_norm" in meta:
        from fastppo.stats import ReturnNormalizer

        trainer.ret_norm = ReturnNormalizer.from_state_dict(
            _join_state("ret_norm", meta["ret_norm"], arrays)
        )
    st = meta["trainer"]
    trainer.num_timesteps = int(st["num_timesteps"])
    trainer.n_updates = int(st["n_updates"])
    trainer.counter = int(st["counter"])
    trainer._resets = int(st["resets"])
    trainer._train_time = float(st["train_time"])
    trainer.rng.bit_generator.state = st["rng"]
    trainer.episodes = [(int(a), float(b), int(c)) for a, b, c in st["episodes"]]
    return trainer
