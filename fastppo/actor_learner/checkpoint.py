"""Learner checkpoints: resume a crashed run without unpickling anything.

fastppo's one checkpoint format, as the trainer writes it
(:func:`fastppo._files.write_checkpoint`): a directory holding
``checkpoint.npz`` (``policy/params``, ``adam/m``, ``adam/v``) and
``checkpoint.json`` (``format`` ``"fastppo-actor-learner-checkpoint"``,
``version`` 2, the npz's SHA-256, ``policy`` (the network's spec), ``config``,
``adam`` (step count and scalars) and ``learner``: ``updates``,
``env_steps``, ``episodes``, ``version``, ``rng`` (the learner's PCG64
state), and ``incarnations``, ``alive`` and ``restarts`` per actor). Both
files are replaced atomically, so a crash during a save leaves the previous
checkpoint intact.

The previous release wrote one file, ``learner.npz`` (version 1: the same
arrays as ``params``, ``adam_m``, ``adam_v``, and the JSON as a uint8 array
``meta``); :func:`load` still reads it, and a resume picks it up when no
newer checkpoint is there.

Loading goes through :mod:`fastppo._files` (threat model in docs/api.md):
nothing is unpickled or imported, nothing is allocated beyond the files'
size, and every malformed or inconsistent file is one ``ValueError`` naming
``checkpoint.load``, the file and the problem.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from fastppo._checks import fail
from fastppo._files import (
    CHECKPOINT_JSON,
    CHECKPOINT_NPZ,
    RESTORE_ERRORS,
    bad,
    member,
    parse_json,
    read_checkpoint,
    read_file,
    read_npz,
    section,
    split_state,
    write_checkpoint,
)
from fastppo.actor_learner.learner import Learner
from fastppo.nn.optim import moment_dtypes
from fastppo.nn.policy import spec_dtype

FORMAT = "fastppo-actor-learner-checkpoint"
VERSION = 2
#: The previous release's single file (format version 1), still read.
LEGACY_FILE = "learner.npz"
LEGACY_FORMAT = "fastppo.actor_learner"
_FN = "checkpoint.load"


def save(learner: Learner, directory: str) -> str:
    """Write the checkpoint directory ``directory``; returns it."""
    arrays: dict[str, np.ndarray] = {"policy/params": np.asarray(learner.policy.params)}
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "policy": learner.policy.spec(),
        "config": learner.cfg.to_dict(),
        "adam": split_state("adam", learner.optimizer.state_dict(), arrays),
        "learner": {
            "updates": learner.updates,
            "env_steps": learner.report.env_steps,
            "episodes": learner.report.episodes,
            "version": learner.version,
            "rng": learner.rng.bit_generator.state,
            "incarnations": [c.incarnation for c in learner.columns],
            "alive": [c.alive for c in learner.columns],
            "restarts": [a.restarts for a in learner.report.actors],
        },
    }
    write_checkpoint(directory, meta, arrays)
    return directory


def load(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint: ``(arrays, meta)``; never unpickles.

    ``path`` is a checkpoint directory, or a previous release's
    ``learner.npz``. ``arrays`` holds ``params``, ``adam_m`` and ``adam_v``;
    ``meta`` the learner's counters, ``adam``, ``config`` and
    ``format_version`` (1 or 2).
    """
    if not isinstance(path, (str, os.PathLike)):
        fail(_FN, "path", "a checkpoint directory or learner.npz path", repr(path), exc=TypeError)
    path = os.fspath(path)
    if not os.path.isdir(path):
        return _load_legacy(path)
    meta, arrays = read_checkpoint(_FN, path, FORMAT, VERSION)
    npz_path = os.path.join(path, CHECKPOINT_NPZ)
    dt = spec_dtype(section(_FN, path, meta, "policy"))
    out = {
        new: member(_FN, npz_path, arrays, old, moment_dtypes(dt))
        for new, old in (("adam_m", "adam/m"), ("adam_v", "adam/v"))
    }
    out["params"] = member(_FN, npz_path, arrays, "policy/params", dt)
    flat = dict(section(_FN, path, meta, "learner"), format_version=VERSION)
    flat["adam"] = section(_FN, path, meta, "adam")
    flat["config"] = section(_FN, path, meta, "config")
    return out, flat


def _load_legacy(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    arrays = read_npz(_FN, path, read_file(_FN, path))
    raw = member(_FN, path, arrays, "meta", np.uint8)
    meta = parse_json(_FN, f"{path} array 'meta'", raw.tobytes())
    if meta.get("format") != LEGACY_FORMAT or meta.get("format_version") != 1:
        bad(
            _FN,
            path,
            f"a {LEGACY_FORMAT} checkpoint version 1",
            f"format {meta.get('format')!r} version {meta.get('format_version')!r}",
        )
    out = {k: member(_FN, path, arrays, k, np.float64) for k in ("params", "adam_m", "adam_v")}
    return out, meta


def maybe_resume(learner: Learner, directory: str | None) -> list[int]:
    """Load ``directory``'s checkpoint into ``learner`` when one exists.

    Returns the incarnation each actor starts with: one past the saved one,
    so a resumed actor never replays the random stream of its predecessor.
    """
    n = learner.cfg.num_actors
    if not directory:
        return [0] * n
    path = directory
    if not os.path.exists(os.path.join(directory, CHECKPOINT_JSON)):
        path = os.path.join(directory, LEGACY_FILE)
        if not os.path.exists(path):
            return [0] * n
    arrays, meta = load(path)
    params = np.asarray(learner.policy.params)
    for k in ("params", "adam_m", "adam_v"):
        if arrays[k].shape != params.shape:
            bad(_FN, f"{path} array {k!r}", f"shape {params.shape} (this policy)", arrays[k].shape)
    if arrays["params"].dtype != params.dtype:
        # no silent rounding of float64 weights into a float32 run (or the reverse)
        bad(
            _FN,
            f"{path} array 'params'",
            f"dtype {params.dtype} (this policy; resume with PPOConfig(dtype='"
            f"{arrays['params'].dtype}'))",
            f"dtype {arrays['params'].dtype}",
        )
    try:
        return _restore(path, learner, arrays, meta)
    except RESTORE_ERRORS as e:
        msg = str(e)
        if path in msg:
            raise  # already names the loader and the file
        bad(_FN, path, "a consistent learner checkpoint", msg or type(e).__name__)


def _restore(
    path: str, learner: Learner, arrays: dict[str, np.ndarray], meta: dict[str, Any]
) -> list[int]:
    n = learner.cfg.num_actors
    per_actor = [meta[k] for k in ("incarnations", "alive", "restarts")]
    if not all(isinstance(v, list) and len(v) == n for v in per_actor):
        saved = [len(v) if isinstance(v, list) else None for v in per_actor]
        bad(_FN, path, f"saved with num_actors = {n} like this run", f"per-actor lists of {saved}")
    counters = [meta[k] for k in ("updates", "env_steps", "episodes")] + per_actor[0]
    counters += per_actor[2]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counters):
        bad(_FN, path, "counters that are ints >= 0", counters)
    learner.policy.set_params(arrays["params"])
    opt = {"m": arrays["adam_m"], "v": arrays["adam_v"], **meta["adam"]}
    learner.optimizer.load_state_dict(opt)
    learner.rng.bit_generator.state = meta["rng"]
    learner.updates = int(meta["updates"])
    learner.report.updates = learner.updates
    learner.report.env_steps = int(meta["env_steps"])
    learner.report.episodes = int(meta["episodes"])
    incs = [int(i) + 1 for i in meta["incarnations"]]
    for col, inc, alive, restarts, st in zip(
        learner.columns, incs, meta["alive"], meta["restarts"], learner.report.actors
    ):
        col.incarnation = inc
        col.alive = bool(alive)
        st.alive = bool(alive)
        st.restarts = int(restarts)
    return incs
