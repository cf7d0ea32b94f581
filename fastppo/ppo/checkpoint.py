"""Trainer checkpoints: arrays in ``checkpoint.npz``, everything else in ``checkpoint.json``.

The pair is fastppo's one checkpoint format (:func:`fastppo._files.write_checkpoint`,
shared with the actor-learner): written atomically, npz first, the JSON
recording the npz's SHA-256 so a torn or mixed pair is detected on load.

Loading treats both files as untrusted data (threat model in docs/api.md):

* nothing is unpickled and no module is imported: an ``env_id`` with a module
  part (``"pkg.mod:Env-v0"``, which ``gymnasium.make`` would import) is refused
  unless the caller passes ``env=`` or ``trust_env_id=True``;
* no env is made: the policy is rebuilt from the spec in the JSON, and the
  trainer makes its envs when it first needs them (``learn``, ``evaluate``);
* nothing is allocated beyond the files' size: the npz is read by
  :func:`fastppo._files.read_npz`, the network's size is bounded by
  ``ActorCritic``'s size rule and believed only when the weights in the npz
  match it, and the rollout buffer is made on the first rollout;
* every malformed file is one ``ValueError`` naming ``PPOTrainer.load``, the
  file and the problem.
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
    join_state,
    member,
    read_checkpoint,
    section,
    split_state,
    write_checkpoint,
)

FORMAT = "fastppo-ppo-checkpoint"
VERSION = 1
_FN = "PPOTrainer.load"


def save_trainer(trainer: Any, path: str) -> None:
    """Write ``trainer``'s full state to the directory ``path`` (created if missing)."""
    if not isinstance(path, (str, os.PathLike)):
        fail("PPOTrainer.save", "path", "a directory path", repr(path), exc=TypeError)
    arrays: dict[str, np.ndarray] = {"policy/params": trainer.policy.params}
    meta: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "env_id": trainer.env_id,
        "env_kwargs": trainer.env_kwargs,
        "config": trainer.config.to_dict(),
        "policy": trainer.policy.spec(),
        "adam": split_state("adam", trainer.optimizer.state_dict(), arrays),
        "trainer": trainer.state_json(),
    }
    if trainer.obs_rms is not None:
        meta["obs_rms"] = split_state("obs_rms", trainer.obs_rms.state_dict(), arrays)
    if trainer.ret_norm is not None:
        meta["ret_norm"] = split_state("ret_norm", trainer.ret_norm.state_dict(), arrays)
    write_checkpoint(os.fspath(path), meta, arrays)


def _env_spec(meta_path: str, meta: dict[str, Any], env: Any, trust_env_id: bool) -> Any:
    """What the trainer will make its envs from: the caller's ``env``, else the file's id."""
    if env is not None:
        return env
    env_id = meta.get("env_id")
    if env_id is None:
        fail(_FN, "env", "the env factory (the run was not made from an env id)", None)
    if not isinstance(env_id, str):
        bad(_FN, f"{meta_path} field 'env_id'", "a string", type(env_id).__name__)
    if ":" in env_id and not trust_env_id:
        # gymnasium.make imports the module before the ':'; a file must not choose code to run
        bad(
            _FN,
            f"{meta_path} field 'env_id'",
            "a gymnasium id without a module part (the file must not choose a module to import; "
            "pass env=... or trust_env_id=True if you trust it)",
            repr(env_id),
        )
    return env_id


def load_trainer(cls: Any, path: str, env: Any = None, trust_env_id: bool = False) -> Any:
    """Inverse of :func:`save_trainer`; makes no env (see the module docstring)."""
    from fastppo.nn.optim import Adam, moment_dtypes
    from fastppo.nn.policy import ActorCritic, spec_dtype
    from fastppo.ppo.config import PPOConfig
    from fastppo.stats import ReturnNormalizer, RunningMeanStd

    if not isinstance(path, (str, os.PathLike)):
        fail(_FN, "path", "a directory path", repr(path), exc=TypeError)
    path = os.fspath(path)
    meta, arrays = read_checkpoint(_FN, path, FORMAT, VERSION)
    meta_path = os.path.join(path, CHECKPOINT_JSON)
    npz_path = os.path.join(path, CHECKPOINT_NPZ)
    env = _env_spec(meta_path, meta, env, trust_env_id)
    env_kwargs = meta.get("env_kwargs") or {}
    if not isinstance(env_kwargs, dict):
        bad(_FN, f"{meta_path} field 'env_kwargs'", "a JSON object", type(env_kwargs).__name__)
    try:
        # files written before float32 training name no dtype: they are float64
        saved = {"dtype": "float64", **section(_FN, path, meta, "config")}
        if saved.get("env_backend") == "fastppo":  # the compiled envs' name before 2026-12-05
            saved["env_backend"] = "compiled"
        config = PPOConfig.from_dict(saved)
        spec = section(_FN, path, meta, "policy")
        params = member(_FN, npz_path, arrays, "policy/params", spec_dtype(spec))
        policy = ActorCritic.from_spec(spec, params=params)
        shape = (policy.n_params,)
        adam = join_state("adam", section(_FN, path, meta, "adam"), arrays)
        for k in ("m", "v"):
            member(_FN, npz_path, arrays, f"adam/{k}", moment_dtypes(policy.dtype), shape)
        optimizer = Adam(
            policy.n_params, config.learning_rate, eps=config.adam_eps, dtype=policy.dtype
        )
        optimizer.load_state_dict(adam)
        obs_rms = ret_norm = None
        if "obs_rms" in meta:
            obs_rms = RunningMeanStd.from_state_dict(
                join_state("obs_rms", section(_FN, path, meta, "obs_rms"), arrays)
            )
        if "ret_norm" in meta:
            ret_norm = ReturnNormalizer.from_state_dict(
                join_state("ret_norm", section(_FN, path, meta, "ret_norm"), arrays)
            )
        trainer = cls._restore(env, config, policy, optimizer, env_kwargs, obs_rms, ret_norm)
        trainer.restore_state_json(section(_FN, path, meta, "trainer"))
        trainer.checkpoint_env_id = meta.get("env_id")
    except RESTORE_ERRORS as e:
        msg = str(e)
        if meta_path in msg or npz_path in msg:
            raise  # already names the loader and the file
        msg = msg.removeprefix(f"{_FN}: ")
        bad(_FN, meta_path, "a consistent checkpoint", msg or type(e).__name__)
    return trainer
