"""What ``fastppo train ENV_ID --actors N`` does: the trainer's command, collected by actors.

Everything but the collection is the single-process command's
(:mod:`fastppo.ppo.run`): the per-env defaults and the ``--config``/``--set``
layers, the progress bar, ``metrics.jsonl``/``metrics.csv`` (one record per
update, the same CleanRL names plus the actor-learner's ``charts/policy_lag_mean``),
the checkpoint that ``fastppo eval`` reads, ``report.json``, the curve and the
final report. The updates run in :func:`fastppo.actor_learner.run` with ``N``
asynchronous actors on threads, processes or Ray.

The per-env defaults map onto the actors as follows. Each actor owns one env,
so an update's rollout is ``N x num_steps``; ``num_steps = ceil(n_envs * n_steps
/ N)`` keeps the samples per update of the single-process run (CartPole-v1:
8 x 32 = 256, so 2 actors take 128 steps each). Observation and reward
normalisation are off: the actor-learner has no shared running statistics, so
per-env defaults that turn them on are dropped (a line says so), and asking
for them with ``--set`` or ``--config`` is refused.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from fastppo.ppo.defaults import env_defaults
from fastppo.ppo.run import RunLog, build_config, finish

#: Per-env defaults the actor-learner cannot honour (no shared running statistics).
_DROPPED = ("normalize_obs", "normalize_reward")


def train_main(
    env_id: str,
    *,
    actors: int,
    backend: str = "threads",
    address: str | None = None,
    total_timesteps: int | None = None,
    seed: int | None = None,
    out: str | None = None,
    config_file: str | None = None,
    overrides: Sequence[str] = (),
    eval_episodes: int = 10,
    quiet: bool = False,
    tensorboard: bool = False,
) -> int:
    """Train ``env_id`` with ``actors`` asynchronous actors; log, save, evaluate, report."""
    from fastppo.actor_learner.config import ActorLearnerConfig
    from fastppo.actor_learner.learner import ActorFailedError, ActorLearnerReport
    from fastppo.actor_learner.run import run, write_failure_report
    from fastppo.ppo.trainer import PPOTrainer

    stream = sys.stdout
    config, steps = build_config(
        env_id,
        config_file=config_file,
        overrides=overrides,
        seed=seed,
        total_timesteps=total_timesteps,
        drop_defaults=_DROPPED,
    )
    dropped = [k for k in _DROPPED if env_defaults(env_id).get(k)]
    num_steps = math.ceil(config.n_envs * config.n_steps / actors)
    config = config.replace(n_envs=actors, n_steps=num_steps).validate()
    al = ActorLearnerConfig(
        num_actors=actors,
        num_steps=num_steps,
        total_env_steps=steps,
        seed=config.seed,
        backend=backend,
        ray_address=address,
    ).validate()
    out = out or os.path.join("runs", f"{env_id}-seed{config.seed}-actors{actors}")
    os.makedirs(out, exist_ok=True)
    # The trainer holds what the single-process command saves and evaluates:
    # the actor-learner's policy, its counters and its training episodes.
    trainer = PPOTrainer(env_id, config)
    if trainer.compiled_env:
        desc = f"{trainer.env_description()}; one per actor, a chunk per compiled call"
    else:
        desc = f"{env_id}, gymnasium.make, one per actor"
    print(f"env: {desc}", file=stream)
    print(
        f"fastppo train {env_id}: {steps} steps, {actors} actors ({backend}) x {num_steps} "
        f"steps per update, seed {config.seed} -> {out}",
        file=stream,
    )
    if dropped:
        print(
            f"(per-env defaults {', '.join(dropped)} dropped: the actor-learner has no shared "
            "running statistics)",
            file=stream,
        )
    print(
        "(kernels load from the cache pip install compiled; else the first run compiles them)",
        file=stream,
    )
    t0 = time.perf_counter()
    t_start = time.monotonic()
    seen = 0

    def on_update(report: ActorLearnerReport) -> None:
        nonlocal seen
        new = report.episode_returns[seen:]
        seen = len(report.episode_returns)
        # (step, return, length): the learner counts no episode lengths
        trainer.episodes.extend((report.env_steps, float(r), 0) for r in new)
        rec: dict[str, Any] = {
            "global_step": report.env_steps,
            "update": report.updates,
            **report.history[-1],
            "charts/SPS": report.env_steps / max(time.monotonic() - t_start, 1e-9),
            "charts/episodic_return": float(sum(new) / len(new)) if new else math.nan,
            "charts/episodes": len(new),
        }
        log.write(rec, trainer.recent_return())

    with RunLog(out, steps, 0, quiet, False, tensorboard) as log:
        try:
            policy, report = run(env_id, al, config, callback=on_update)
        except KeyboardInterrupt:
            print("\ninterrupted: an actor-learner run saves at its end only", file=stream)
            trainer.close()
            return 130
        except (ActorFailedError, TimeoutError) as e:
            # the partial report goes to the run directory before the error leaves
            path = write_failure_report(e, out)
            print(f"\nthe run failed; its partial report is in {path}", file=stream)
            trainer.close()
            raise
    trainer.policy.set_params(policy.get_params())
    trainer.num_timesteps = report.env_steps
    trainer.n_updates = report.updates
    extra = {
        "actor_learner": {
            "backend": report.backend,
            "actors": actors,
            "actor_restarts": report.actor_restarts,
            "policy_lag": report.lag_stats(),
            "steady_sps": report.steady_sps(),
        }
    }
    return finish(trainer, env_id, out, time.perf_counter() - t0, eval_episodes, stream, extra)
