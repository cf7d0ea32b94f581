"""Learner checkpoints: resume a crashed run without unpickling anything.

One file, ``learner.npz``, written with ``allow_pickle=False`` and replaced
atomically (write to a temporary name, then ``os.replace``), so a crash during
a save leaves the previous checkpoint intact. Arrays:

``params``
    the policy's flat parameter vector;
``adam_m``, ``adam_v``
    Adam's moments;
``meta``
    uint8 bytes of a UTF-8 JSON object: ``format`` (``"fastppo.actor_learner"``),
    ``format_version`` (1), ``updates``, ``env_steps``, ``episodes``,
    ``version``, ``adam`` (step count and scalars), ``rng`` (the learner's
    PCG64 state), ``incarnations`` and ``restarts`` per actor, ``config``.

Loading goes through :func:`fastppo._files.read_npz` (threat model in
docs/api.md): nothing is unpickled or imported, nothing is allocated beyond the
file's size, and every malformed or inconsistent file is one ``ValueError``
naming ``checkpoint.load``, the file and the problem.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from fastppo._files import bad, member, npz_bytes, parse_json, read_file, read_npz, write_atomic
from fastppo.actor_learner.learner import Learner

FILENAME = "learner.npz"
FORMAT = "fastppo.actor_learner"
FORMAT_VERSION = 1


def save(learner: Learner, directory: str) -> str:
    """Write ``directory/learner.npz``; returns its path."""
    os.makedirs(directory, exist_ok=True)
    opt = learner.optimizer.state_dict()
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "updates": learner.updates,
        "env_steps": learner.report.env_steps,
        "episodes": learner.report.episodes,
        "version": learner.version,
        "adam": {k: opt[k] for k in ("t", "lr", "beta1", "beta2", "eps")},
        "rng": learner.rng.bit_generator.state,
        "incarnations": [c.incarnation for c in learner.columns],
        "alive": [c.alive for c in learner.columns],
        "restarts": [a.restarts for a in learner.report.actors],
        "config": learner.cfg.to_dict(),
    }
    path = os.path.join(directory, FILENAME)
    arrays = {
        "params": np.asarray(learner.policy.params),
        "adam_m": opt["m"],
        "adam_v": opt["v"],
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
    }
    write_atomic(path, npz_bytes(arrays))
    return path


_FN = "checkpoint.load"
_ERRORS = (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError)


def load(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint file: ``(arrays, meta)``; never unpickles."""
    arrays = read_npz(_FN, path, read_file(_FN, path))
    raw = member(_FN, path, arrays, "meta", np.uint8)
    meta = parse_json(_FN, f"{path} array 'meta'", raw.tobytes())
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        bad(
            _FN,
            path,
            f"a {FORMAT} checkpoint version {FORMAT_VERSION}",
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
    path = os.path.join(directory or "", FILENAME)
    if not directory or not os.path.exists(path):
        return [0] * n
    arrays, meta = load(path)
    params = np.asarray(learner.policy.params)
    for k in ("params", "adam_m", "adam_v"):
        if arrays[k].shape != params.shape:
            bad(_FN, f"{path} array {k!r}", f"shape {params.shape} (this policy)", arrays[k].shape)
    try:
        return _restore(path, learner, arrays, meta)
    except _ERRORS as e:
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
