"""``run()``: wire a learner to a backend and drive the loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastppo.actor_learner.actor import (
    Chunk,
    DefaultPolicyFn,
    Failure,
    PolicyFn,
    make_env_fn,
    spaces,
    spec_for,
)
from fastppo.actor_learner.config import BACKENDS, ActorLearnerConfig
from fastppo.actor_learner.learner import ActorFailedError, ActorLearnerReport, Learner


def _backend(name: str, cfg: ActorLearnerConfig, env_fn: Any, policy_fn: Any, spec: Any) -> Any:
    if name == "threads":
        from fastppo.actor_learner.threads import ThreadsBackend

        return ThreadsBackend(cfg, env_fn, policy_fn, spec)
    if name == "processes":
        from fastppo.actor_learner.processes import ProcessesBackend

        return ProcessesBackend(cfg, env_fn, policy_fn, spec)
    from fastppo.actor_learner.ray_backend import RayBackend

    return RayBackend(cfg, env_fn, policy_fn, spec)


def run(
    env_fn: Any,
    config: ActorLearnerConfig | None = None,
    ppo_config: Any = None,
    backend: str | None = None,
    *,
    policy_fn: PolicyFn | None = None,
    address: str | None = None,
    callback: Callable[[ActorLearnerReport], Any] | None = None,
    _update_fn: Any = None,
    _batch_fn: Any = None,
) -> tuple[Any, ActorLearnerReport]:
    """Train with asynchronous actors and one learner.

    Parameters
    ----------
    env_fn : callable or str
        ``env_fn() -> gymnasium.Env`` (one environment per actor), or a
        gymnasium id. For ``processes`` and ``ray`` it must pickle (a
        module-level function or ``functools.partial``). An id that
        :mod:`fastppo.envs` compiles (with ``ppo_config.env_backend`` at its
        default ``"compiled"``) gives each actor that compiled env, and the
        actors collect each chunk with one compiled call (the trainer's fused
        rollout); ``env_fn`` may also return ``fastppo.envs.make_vec(id, 1)``.
    config : ActorLearnerConfig, optional
        Defaults to ``ActorLearnerConfig()``.
    ppo_config : PPOConfig, optional
        Update hyperparameters and network shape; defaults to ``PPOConfig()``.
    backend : {"threads", "processes", "ray"}, optional
        Overrides ``config.backend``.
    policy_fn : callable, optional
        ``policy_fn(observation_space, action_space) -> policy`` with the
        ``ActorCritic`` interface (``params``, ``set_params``, ``step``,
        ``value``, ``evaluate``). Default: ``ActorCritic.from_spaces`` with
        ``ppo_config``'s ``hidden_sizes``, ``activation`` and ``seed``. It
        must pickle for ``processes`` and ``ray``.
    address : str, optional
        Ray cluster to join; overrides ``config.ray_address``.
    callback : callable, optional
        ``callback(report)`` after every update, with the run's
        :class:`ActorLearnerReport` so far (``report.history[-1]`` holds the
        update's metrics); returning ``False`` ends the run after that update
        (``fastppo train --actors`` draws its progress bar and logs from it).
    _update_fn, _batch_fn : callable, optional
        Test hooks replacing ``ppo_update`` and ``RolloutBatch`` (not public API).

    Returns
    -------
    policy
        The learner's trained policy.
    report : ActorLearnerReport

    Raises
    ------
    ActorFailedError
        An actor failed more than ``max_actor_restarts`` times, or did not
        come back within ``restart_timeout_s``, and ``on_actor_failure ==
        "fail"`` (or no actor is left); or the Ray backend failed (any other
        Ray exception, chained as the cause).
    TimeoutError
        No update completed within ``config.stall_timeout_s``, or a Ray call
        timed out.
    ImportError
        ``backend="ray"`` without Ray installed.
    ValueError
        A Ray placement the cluster cannot hold (checked before asking Ray).

    ``ActorFailedError`` and ``TimeoutError`` carry the run's partial report as
    ``e.report`` (steps, updates, restarts, each actor's last error), also
    written as JSON to ``checkpoint_dir/failure_report.json`` when
    ``checkpoint_dir`` is set.
    """
    cfg = ActorLearnerConfig() if config is None else config
    if not isinstance(cfg, ActorLearnerConfig):
        raise TypeError(f"run: config must be an ActorLearnerConfig, got {type(cfg).__name__}")
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"run: backend must be one of {BACKENDS}, got {backend!r}")
        cfg = _replace(cfg, backend=backend)
    if address is not None:
        cfg = _replace(cfg, ray_address=address)
    cfg.validate()
    if ppo_config is None:
        from fastppo.ppo.config import PPOConfig

        ppo_config = PPOConfig()
    cfg, ppo_config = _ppo_for(cfg, ppo_config)
    env_fn = make_env_fn(env_fn, ppo_config.env_backend)
    if policy_fn is None:
        policy_fn = DefaultPolicyFn(
            hidden_sizes=tuple(ppo_config.hidden_sizes),
            activation=ppo_config.activation,
            seed=int(ppo_config.seed),
            dtype=ppo_config.dtype,
            options={
                "log_std_init": ppo_config.log_std_init,
                "log_std_min": ppo_config.log_std_min,
                "log_std_max": ppo_config.log_std_max,
                "squash": ppo_config.squash,
            },
        )
    probe = env_fn()
    try:
        policy = policy_fn(*spaces(probe))
        spec = spec_for(probe, policy)
    finally:
        probe.close()

    learner = Learner(cfg, ppo_config, policy, spec, cfg.backend, _update_fn, _batch_fn)
    incarnations = [0] * cfg.num_actors
    if cfg.resume or cfg.checkpoint_every:
        from fastppo.actor_learner import checkpoint

        if cfg.resume:
            incarnations = checkpoint.maybe_resume(learner, cfg.checkpoint_dir)
    t0 = learner.t0 = time.monotonic()
    be = _backend(cfg.backend, cfg, env_fn, policy_fn, spec)
    try:
        blob = learner.broadcast_resumed()
        actors = {i: incarnations[i] for i in learner.live_ids()}
        be.start(blob, learner.version, learner.updates * cfg.num_steps, actors)
        _loop(cfg, learner, be, callback)
    except Exception as e:
        if type(e).__module__.startswith("ray."):
            # no raw Ray exception leaves run(): a timeout is a TimeoutError,
            # anything else a failure of the backend
            err: BaseException = (
                TimeoutError(f"run: a Ray call timed out: {e}")
                if isinstance(e, TimeoutError)
                else ActorFailedError(f"run: the Ray backend failed: {type(e).__name__}: {e}")
            )
            raise _with_report(err, learner, cfg) from e
        if isinstance(e, (ActorFailedError, TimeoutError)):
            _with_report(e, learner, cfg)
        raise
    finally:
        learner.report.elapsed_s = time.monotonic() - t0
        be.shutdown()
    return policy, learner.report


def _with_report(e: BaseException, learner: Learner, cfg: ActorLearnerConfig) -> BaseException:
    """``e`` with the run's partial report attached (``e.report``), also written to
    ``checkpoint_dir`` when the run has a checkpoint directory."""
    report = learner.report
    report.elapsed_s = time.monotonic() - learner.t0
    e.report = report  # type: ignore[attr-defined]
    if cfg.checkpoint_dir:
        write_failure_report(e, cfg.checkpoint_dir)
    return e


def write_failure_report(e: BaseException, directory: str) -> str:
    """Write ``directory/failure_report.json``: the error and its partial report
    (``e.report``, when attached); returns the path."""
    import json
    import os

    report = getattr(e, "report", None)
    partial = report.summary() if report is not None else {}
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "failure_report.json")
    with open(path, "w") as f:
        json.dump({"error": f"{type(e).__name__}: {e}", **partial}, f, indent=1)
    return path


def _loop(cfg: ActorLearnerConfig, learner: Learner, be: Any, callback: Any) -> None:
    last_progress = time.monotonic()
    while not learner.done():
        for ev in be.poll(cfg.failure_poll_s):
            if isinstance(ev, Chunk):
                learner.receive(ev)
            elif isinstance(ev, Failure):
                action, inc, start_sent = learner.fail(ev)
                if action == "restart":
                    be.restart(ev.actor_id, inc, start_sent)
                elif action == "retire":
                    be.retire(ev.actor_id)
        while learner.ready() and not learner.done():
            blob = learner.update()
            last_progress = time.monotonic()
            if blob is not None:
                be.publish(blob, learner.version)
            if cfg.checkpoint_every and learner.updates % cfg.checkpoint_every == 0:
                from fastppo.actor_learner import checkpoint

                checkpoint.save(learner, cfg.checkpoint_dir)  # type: ignore[arg-type]
            if callback is not None and callback(learner.report) is False:
                return
        if time.monotonic() - last_progress > cfg.stall_timeout_s:
            raise TimeoutError(
                f"run: no update completed in {cfg.stall_timeout_s} s "
                f"(buffered steps per actor: {[c.buffered for c in learner.columns]}); "
                "an environment may hang, or a node was lost"
            )


def _ppo_for(cfg: ActorLearnerConfig, ppo_config: Any) -> tuple[ActorLearnerConfig, Any]:
    """The configs the run uses: one value for each field the two configs share.

    The rollout shape is the actor-learner's (``n_envs``/``n_steps`` are
    ``num_actors``/``num_steps``, so ``batch_size`` is checked against the
    real rollout); ``gamma``/``gae_lambda`` come from whichever config sets
    them. A PPOConfig field set away from its default that disagrees with the
    actor-learner's raises ``ValueError``: nothing is overwritten silently.
    """
    from fastppo.ppo.config import PPOConfig

    if not isinstance(ppo_config, PPOConfig):
        raise TypeError(f"run: ppo_config must be a PPOConfig, got {type(ppo_config).__name__}")
    for name in ("normalize_obs", "normalize_reward"):
        if getattr(ppo_config, name):
            raise ValueError(
                f"run: ppo_config.{name} must be False, got True; the actor-learner has no "
                "shared running statistics (normalise inside env_fn with a gymnasium wrapper)"
            )
    default = PPOConfig()
    shared = {
        "n_envs": ("num_actors", cfg.num_actors),
        "n_steps": ("num_steps", cfg.num_steps),
        "gamma": ("gamma", cfg.gamma),
        "gae_lambda": ("gae_lambda", cfg.gae_lambda),
    }
    values = {}
    for name, (al_name, al_value) in shared.items():
        mine = getattr(ppo_config, name)
        if al_value is None:
            values[name] = mine
            continue
        if mine != getattr(default, name) and mine != al_value:
            raise ValueError(
                f"run: ppo_config.{name} must equal config.{al_name} ({al_value!r}) or be left "
                f"at its default, got {mine!r}"
            )
        values[name] = al_value
    cfg = _replace(cfg, gamma=values["gamma"], gae_lambda=values["gae_lambda"])
    return cfg, ppo_config.replace(**values).validate()


def _replace(cfg: ActorLearnerConfig, **kw: Any) -> ActorLearnerConfig:
    import dataclasses

    return dataclasses.replace(cfg, **kw)


__all__ = ["run"]
