"""What ``fastppo train`` and ``fastppo eval`` do: config merging, progress, logs, report.

Config precedence, lowest to highest: ``PPOConfig`` defaults, the per-env
defaults (:mod:`fastppo.ppo.defaults`), the ``--config`` file (TOML or JSON),
``--set key=value`` overrides, then the explicit flags (``--seed``,
``--total-timesteps``, ``--n-envs``).
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from fastppo._checks import fail
from fastppo.ppo.config import PPOConfig
from fastppo.ppo.defaults import DEFAULT_TIMESTEPS, ENV_DEFAULTS, env_defaults

_FN = "fastppo train"


def load_config_file(path: str) -> dict[str, Any]:
    """Read a TOML (Python >= 3.11) or JSON mapping of PPOConfig fields (plus ``total_timesteps``).

    A TOML file may put the fields at top level or under a ``[ppo]`` table.
    """
    if not os.path.isfile(path):
        fail(_FN, "--config", "an existing file", repr(path))
    with open(path, "rb") as f:
        raw = f.read()
    if path.endswith(".toml"):
        try:
            import tomllib
        except ImportError:  # Python 3.10
            fail(
                _FN,
                "--config",
                "a JSON file on Python 3.10 (tomllib is stdlib from 3.11)",
                repr(path),
                "convert it to JSON or use Python >= 3.11",
            )
        try:
            data = tomllib.loads(raw.decode())
        except tomllib.TOMLDecodeError as e:
            fail(_FN, "--config", "valid TOML", f"{path}: {e}")
        if isinstance(data.get("ppo"), dict):
            data = {**{k: v for k, v in data.items() if k != "ppo"}, **data["ppo"]}
    else:
        try:
            data = json.loads(raw)
        except ValueError as e:
            fail(_FN, "--config", "valid JSON (or a .toml file)", f"{path}: {e}")
    if not isinstance(data, dict):
        fail(_FN, "--config", "a mapping of config fields", type(data).__name__)
    return data


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``["lr=1e-3", "hidden_sizes=[32,32]"]`` -> dict; values parsed as JSON, else kept as text."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            fail(_FN, "--set", "KEY=VALUE", repr(item))
        try:
            v: Any = json.loads(value)
        except ValueError:
            v = {"true": True, "false": False, "none": None, "null": None}.get(value.lower(), value)
        out[key.strip()] = v
    return out


def build_config(
    env_id: str,
    *,
    config_file: str | None = None,
    overrides: Sequence[str] = (),
    seed: int | None = None,
    total_timesteps: int | None = None,
    n_envs: int | None = None,
    drop_defaults: Sequence[str] = (),
) -> tuple[PPOConfig, int]:
    """Merge the layers into a validated config and the step budget
    (``drop_defaults``: per-env default fields left out)."""
    merged: dict[str, Any] = env_defaults(env_id)
    for k in drop_defaults:
        merged.pop(k, None)
    if config_file:
        merged.update(load_config_file(config_file))
    merged.update(parse_overrides(overrides))
    if seed is not None:
        merged["seed"] = seed
    if n_envs is not None:
        merged["n_envs"] = n_envs
    steps = merged.pop("total_timesteps", DEFAULT_TIMESTEPS)
    if total_timesteps is not None:
        steps = total_timesteps
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        fail(_FN, "total_timesteps", "a positive int", repr(steps))
    if "hidden_sizes" in merged and isinstance(merged["hidden_sizes"], list):
        merged["hidden_sizes"] = tuple(merged["hidden_sizes"])
    return PPOConfig.from_dict(merged), int(steps)


def _jsonable(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def train_main(
    env_id: str,
    *,
    total_timesteps: int | None = None,
    seed: int | None = None,
    out: str | None = None,
    config_file: str | None = None,
    overrides: Sequence[str] = (),
    n_envs: int | None = None,
    eval_episodes: int = 10,
    resume: bool = False,
    quiet: bool = False,
    tensorboard: bool = False,
) -> int:
    """Train, log metrics (JSONL + CSV, and TensorBoard with ``tensorboard``), save a
    checkpoint, plot the curve, print a report."""
    from fastppo.ppo.trainer import PPOTrainer

    stream = sys.stdout
    if resume:
        if out is None:
            fail(_FN, "--resume", "used together with --out DIR", None)
        # ENV_ID comes from the command line, so the caller chose it; the
        # checkpoint's own id must agree before anything is made from it.
        trainer = PPOTrainer.load(out, env=env_id)
        steps = int(total_timesteps or trainer.num_timesteps + DEFAULT_TIMESTEPS)
        if env_id != trainer.checkpoint_env_id:
            fail(_FN, "ENV_ID", f"the checkpoint's env {trainer.checkpoint_env_id!r}", repr(env_id))
        config = trainer.config
    else:
        config, steps = build_config(
            env_id,
            config_file=config_file,
            overrides=overrides,
            seed=seed,
            total_timesteps=total_timesteps,
            n_envs=n_envs,
        )
        out = out or os.path.join("runs", f"{env_id}-seed{config.seed}")
        trainer = PPOTrainer(env_id, config)
    os.makedirs(out, exist_ok=True)
    print(f"env: {trainer.env_description()}", file=stream)
    print(
        f"fastppo train {env_id}: {steps} steps, {config.n_envs} envs x {config.n_steps} steps, "
        f"seed {config.seed} -> {out}",
        file=stream,
    )
    if not env_defaults(env_id):
        print(
            f"(no per-env defaults for {env_id}: the generic PPOConfig defaults, "
            f"{DEFAULT_TIMESTEPS} steps unless given; tuned entries: {', '.join(ENV_DEFAULTS)})",
            file=stream,
        )
    print(
        "(kernels load from the cache pip install compiled; else the first run compiles them)",
        file=stream,
    )
    t0 = time.perf_counter()
    with RunLog(out, steps, trainer.num_timesteps, quiet, resume, tensorboard) as log:
        try:
            trainer.learn(steps, callback=lambda rec: log.write(rec, trainer.recent_return()))
        except KeyboardInterrupt:
            print("\ninterrupted: saving what was trained so far", file=stream)
    return finish(trainer, env_id, out, time.perf_counter() - t0, eval_episodes, stream)


#: What ``--tensorboard`` needs, said by its ImportError.
TENSORBOARD_HINT = 'pip install "fastppo[tensorboard]" (tensorboardX)'


class RunLog:
    """One run's metrics.jsonl and metrics.csv (a record per update), its tqdm
    progress bar on stderr (``quiet``: none) and, with ``tensorboard``,
    TensorBoard event files in ``out`` holding the same records (each numeric
    metric a scalar under its CSV name, at ``global_step``); ``append``
    continues the files of a resumed run."""

    def __init__(
        self, out: str, steps: int, initial: int, quiet: bool, append: bool, tensorboard: bool
    ) -> None:
        from tqdm import tqdm

        self.tb: Any = None
        if tensorboard:  # before anything is trained: a missing extra fails at once
            try:
                from tensorboardX import SummaryWriter
            except ImportError as e:
                raise ImportError(
                    f"{_FN} --tensorboard: event files need tensorboardX; {TENSORBOARD_HINT}"
                ) from e
            self.tb = SummaryWriter(logdir=out)
        mode = "a" if append else "w"
        self.steps = steps
        self.progress = tqdm(
            total=steps,
            initial=initial,
            unit="step",
            unit_scale=True,
            file=sys.stderr,
            disable=quiet,
            dynamic_ncols=True,
            mininterval=0.5 if sys.stderr.isatty() else 5.0,
        )
        # closed in __exit__
        self.jf = open(os.path.join(out, "metrics.jsonl"), mode)
        self.cf = open(os.path.join(out, "metrics.csv"), mode, newline="")
        self.writer: csv.DictWriter[str] | None = None

    def write(self, rec: dict[str, Any], recent_return: float) -> None:
        """Log one update's record; ``global_step`` moves the bar."""
        self.jf.write(json.dumps({k: _jsonable(v) for k, v in rec.items()}) + "\n")
        if self.writer is None:
            # the first record's columns; a metric that appears later (say a
            # V-trace statistic) is in the JSONL only
            self.writer = csv.DictWriter(self.cf, fieldnames=list(rec), extrasaction="ignore")
            if self.cf.tell() == 0:
                self.writer.writeheader()
        self.writer.writerow(rec)
        if self.tb is not None:
            step = int(rec["global_step"])
            for k, v in rec.items():
                if k != "global_step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    self.tb.add_scalar(k, v, step)
        self.progress.set_postfix({"return(last 20)": f"{recent_return:.1f}"}, refresh=False)
        # the last rollout may overshoot the target: the bar stops at it
        self.progress.update(min(rec["global_step"], self.steps) - self.progress.n)

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.tb is not None:
            self.tb.close()
        self.progress.close()
        self.jf.close()
        self.cf.close()


def finish(
    trainer: Any,
    env_id: str,
    out: str,
    wall: float,
    eval_episodes: int,
    stream: TextIO,
    extra: dict[str, Any] | None = None,
) -> int:
    """Save the checkpoint, evaluate, draw the curve, write report.json
    (``extra`` added to it) and print the final report."""
    config = trainer.config
    trainer.save(out)
    report = trainer.evaluate(n_episodes=eval_episodes)
    trainer.close()
    curve = _write_curve(trainer, env_id, out, stream)
    summary = {
        "env_id": env_id,
        "timesteps": trainer.num_timesteps,
        "updates": trainer.n_updates,
        "wall_s": wall,
        "sps": trainer.num_timesteps / max(wall, 1e-9),
        "train_episodes": len(trainer.episodes),
        "recent_train_return": _jsonable(trainer.recent_return()),
        "eval": report,
        "config": config.to_dict(),
        **(extra or {}),
    }
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(
        f"\n== {env_id} seed {config.seed}: {trainer.num_timesteps} steps in {wall:.1f} s "
        f"({summary['sps']:.0f} SPS incl. compile) ==\n"
        f"eval over {eval_episodes} episodes (deterministic): mean return "
        f"{report['mean_return']:.1f} +- {report['std_return']:.1f} "
        f"(min {report['min_return']:.1f}, max {report['max_return']:.1f}, "
        f"mean length {report['mean_length']:.0f})\n"
        f"last 20 training episodes: mean return {trainer.recent_return():.1f}\n"
        f"files: {out}/checkpoint.npz + checkpoint.json, metrics.jsonl, metrics.csv, "
        f"report.json{', ' + curve if curve else ''}\n"
        f"evaluate again: fastppo eval {out} --episodes 20",
        file=stream,
    )
    return 0


def _write_curve(trainer: Any, env_id: str, out: str, stream: TextIO) -> str | None:
    """``curve.png`` of the training returns, or None (no episodes, or no matplotlib)."""
    from fastppo import plots

    eps = trainer.episodes
    if not eps:
        return None
    if not plots.available():
        print(f"learning curve: skipped; for curve.png, {plots.INSTALL_HINT}", file=stream)
        return None
    xs = [float(e[0]) for e in eps]
    ys = [e[1] for e in eps]
    # A trailing mean over 20 episodes shows the trend through per-episode noise.
    k = 20
    smooth = [
        sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1])
        for i in range(len(ys))
    ]
    plots.line_chart(
        os.path.join(out, "curve.png"),
        f"{env_id} (fastppo PPO)",
        "env steps",
        "episode return",
        {"episode": (xs, ys), "mean of last 20": (xs, smooth)},
    )
    return "curve.png"


def eval_main(
    path: str,
    *,
    episodes: int = 10,
    stochastic: bool = False,
    seed: int | None = None,
    env_id: str | None = None,
    trust_env_id: bool = False,
) -> int:
    """Load a checkpoint directory and print evaluation statistics."""
    from fastppo.ppo.trainer import PPOTrainer

    trainer = PPOTrainer.load(path, env=env_id, trust_env_id=trust_env_id)
    try:
        r = trainer.evaluate(n_episodes=episodes, deterministic=not stochastic, seed=seed)
    finally:
        trainer.close()
    mode = "stochastic" if stochastic else "deterministic"
    print(
        f"{trainer.env_id} from {path} ({trainer.num_timesteps} training steps), "
        f"{episodes} episodes, {mode}: mean return {r['mean_return']:.1f} +- "
        f"{r['std_return']:.1f} (min {r['min_return']:.1f}, max {r['max_return']:.1f}, "
        f"mean length {r['mean_length']:.0f})"
    )
    return 0
