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

Loading checks the format tag, version and array shapes, and reads with
``allow_pickle=False``: a tampered file can fail to load, never run code.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

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
    tmp = os.path.join(directory, f".{FILENAME}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        np.savez(
            fh,
            params=np.asarray(learner.policy.params),
            adam_m=opt["m"],
            adam_v=opt["v"],
            meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
        )
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


def load(path: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Read a checkpoint file: ``(arrays, meta)``; never unpickles."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in ("params", "adam_m", "adam_v", "meta")}
    meta = json.loads(arrays.pop("meta").tobytes().decode())
    if meta.get("format") != FORMAT or meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"checkpoint: {path} must be a {FORMAT} checkpoint version {FORMAT_VERSION}, "
            f"got format {meta.get('format')!r} version {meta.get('format_version')!r}"
        )
    return arrays, meta


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
    if arrays["params"].shape != params.shape or arrays["params"].dtype != params.dtype:
        raise ValueError(
            f"checkpoint: params must be {params.dtype} of shape {params.shape} (this policy), "
            f"got {arrays['params'].dtype} of shape {arrays['params'].shape}"
        )
    if len(meta["incarnations"]) != n:
        raise ValueError(
            f"checkpoint: num_actors must be {len(meta['incarnations'])} as when it was saved, "
            f"got {n}"
        )
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
