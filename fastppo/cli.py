"""``fastppo`` command line: argument parsing -> config -> trainer/runner. No logic here.

Sections: ``train``/``eval`` (owned with fastppo.ppo) and ``bench`` (owned with
fastppo_bench). Each ``_add_*`` function declares its arguments and sets
``func`` to the entry point that does the work.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark the kernels against numpy and installed peers")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small, fast subset (under 60 s)")
    size.add_argument("--full", action="store_true", help="every size and every installed peer")
    p.add_argument(
        "--out", default="bench_out", help="directory for JSON and PNG (default: bench_out)"
    )
    p.add_argument("--only", default=None, help="run only groups whose name contains this text")
    p.add_argument(
        "--no-startup",
        dest="startup",
        action="store_false",
        help="skip the import / first-call / warmup() latency measurement (2 fresh processes)",
    )

    def run(ns: argparse.Namespace) -> int:
        from fastppo_bench.runner import main as bench_main

        return bench_main(
            quick=ns.quick, full=ns.full, out=ns.out, only=ns.only, startup=ns.startup
        )

    p.set_defaults(func=run)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train PPO (torch-free MLP actor-critic) on a gymnasium env",
        description="Train PPO on ENV_ID with per-env defaults; flags and --config override them.",
    )
    p.add_argument("env_id", metavar="ENV_ID", help="gymnasium env id, e.g. CartPole-v1")
    p.add_argument("--total-timesteps", type=int, default=None, help="env steps (default: per env)")
    p.add_argument("--seed", type=int, default=None, help="seed (default 0)")
    p.add_argument("--out", default=None, help="run directory (default: runs/ENV_ID-seedS)")
    p.add_argument("--n-envs", type=int, default=None, help="parallel envs (default: per env)")
    p.add_argument(
        "--config", default=None, help="TOML (Python >= 3.11) or JSON file of PPOConfig fields"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one PPOConfig field, e.g. --set learning_rate=1e-3 (repeatable)",
    )
    p.add_argument(
        "--env-backend",
        choices=("compiled", "gymnasium"),
        default=None,
        help="compiled (default): fastppo's compiled, gymnasium-identical env where one exists "
        "(classic control), else gymnasium; gymnasium: always gymnasium's envs",
    )
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes in the final report")
    p.add_argument("--resume", action="store_true", help="continue the checkpoint in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard event files to the run directory "
        '(pip install "fastppo[tensorboard]")',
    )
    al = p.add_argument_group(
        "actor-learner", "collect with N asynchronous actors (IMPALA-style) instead of one process"
    )
    al.add_argument("--actors", type=int, default=None, metavar="N", help="number of actors")
    al.add_argument(
        "--backend",
        choices=("threads", "processes", "ray"),
        default=None,
        help="where the actors run (default threads; needs --actors)",
    )
    al.add_argument(
        "--address", default=None, metavar="ADDR", help="Ray cluster to join (with --backend ray)"
    )

    def run(ns: argparse.Namespace) -> int:
        # what both engines take, from the flags they share
        common = {
            "total_timesteps": ns.total_timesteps,
            "seed": ns.seed,
            "out": ns.out,
            "config_file": ns.config,
            "overrides": [*ns.set]
            + ([f"env_backend={ns.env_backend}"] if ns.env_backend is not None else []),
            "eval_episodes": ns.eval_episodes,
            "quiet": ns.quiet,
            "tensorboard": ns.tensorboard,
        }
        if ns.actors is None:
            for flag, value in (("--backend", ns.backend), ("--address", ns.address)):
                if value is not None:
                    p.error(f"{flag} needs --actors N")
            from fastppo.ppo.run import train_main

            return train_main(ns.env_id, n_envs=ns.n_envs, resume=ns.resume, **common)
        if ns.actors < 1:
            p.error(f"--actors must be >= 1, got {ns.actors}")
        if ns.resume or ns.n_envs is not None:
            p.error(
                f"{'--resume' if ns.resume else '--n-envs'} is not available with --actors "
                "(each actor owns one env; an actor-learner run saves at its end)"
            )
        if ns.address is not None and ns.backend != "ray":
            p.error("--address needs --backend ray")
        from fastppo.actor_learner.train import train_main as actors_main

        backend, address = ns.backend or "threads", ns.address
        return actors_main(ns.env_id, actors=ns.actors, backend=backend, address=address, **common)

    p.set_defaults(func=run)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint written by fastppo train")
    p.add_argument("dir", metavar="DIR", help="run directory holding checkpoint.npz/.json")
    p.add_argument("--episodes", type=int, default=10, help="number of episodes (default 10)")
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    p.add_argument("--seed", type=int, default=None, help="first episode seed")
    p.add_argument(
        "--env",
        default=None,
        metavar="ENV_ID",
        help="evaluate on this env id instead of the checkpoint's (spaces must match)",
    )
    p.add_argument(
        "--trust-env-id",
        action="store_true",
        help="accept a checkpoint env id with a module part ('pkg.mod:Env-v0'), which "
        "gymnasium imports; refused by default, as a file must not choose code to run",
    )

    def run(ns: argparse.Namespace) -> int:
        from fastppo.ppo.run import eval_main

        return eval_main(
            ns.dir,
            episodes=ns.episodes,
            stochastic=ns.stochastic,
            seed=ns.seed,
            env_id=ns.env,
            trust_env_id=ns.trust_env_id,
        )

    p.set_defaults(func=run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastppo", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_bench(sub)
    _add_train(sub)
    _add_eval(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(argv)
    return int(ns.func(ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
