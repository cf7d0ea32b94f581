"""``fastppo train ENV --actors N``: the actor-learner behind the trainer's command."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

pytest.importorskip("gymnasium")

from fastppo.actor_learner.train import train_main
from fastppo.cli import main
from fastppo.ppo.trainer import PPOTrainer

FILES = ("checkpoint.npz", "checkpoint.json", "metrics.jsonl", "metrics.csv", "report.json")


def test_actors_train_writes_what_the_trainer_writes_and_eval_reads_it(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "CartPole-v1", "--actors", "2", "--total-timesteps", "1024", "--seed", "3"]
    assert main([*args, "--out", str(out), "--quiet", "--eval-episodes", "2"]) == 0
    text = capsys.readouterr().out
    # CartPole's defaults: 8 envs x 32 steps per update -> 2 actors x 128 steps
    assert "2 actors (threads) x 128 steps per update" in text
    assert text.splitlines()[0] == (
        "env: CartPole-v1, fastppo compiled, gymnasium-identical dynamics; "
        "one per actor, a chunk per compiled call"
    )
    assert "mean return" in text and f"fastppo eval {out}" in text
    for name in FILES:
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert report["timesteps"] == 1024 and report["updates"] == 4
    assert report["eval"]["episodes"] == 2
    assert report["actor_learner"]["backend"] == "threads"
    assert report["actor_learner"]["actors"] == 2
    assert report["config"]["n_envs"] == 2 and report["config"]["n_steps"] == 128
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in recs] == [256, 512, 768, 1024]
    for key in ("losses/policy_loss", "losses/approx_kl", "charts/SPS", "charts/policy_lag_mean"):
        assert key in recs[0]
    assert (out / "metrics.csv").read_text().count("\n") == 5  # header + 4 rows

    # the checkpoint is the trainer's format: fastppo eval and PPOTrainer.load read it
    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "(1024 training steps), 2 episodes" in capsys.readouterr().out
    t = PPOTrainer.load(str(out))
    assert t.num_timesteps == 1024 and t.n_updates == 4
    t.close()


def test_actors_learn_cartpole(tmp_path, capsys):
    """The same policy quality as the single-process run at a small budget."""
    out = tmp_path / "run"
    rc = train_main("CartPole-v1", actors=2, total_timesteps=30_000, out=str(out), quiet=True)
    assert rc == 0
    assert json.loads((out / "report.json").read_text())["eval"]["mean_return"] >= 400


@pytest.mark.slow
def test_actors_on_processes(tmp_path):
    out = tmp_path / "run"
    args = ["train", "CartPole-v1", "--actors", "2", "--backend", "processes"]
    args += ["--total-timesteps", "512", "--out", str(out), "--quiet", "--eval-episodes", "1"]
    assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["actor_learner"]["backend"] == "processes" and report["timesteps"] == 512


def test_actors_drop_normalisation_defaults_and_refuse_it_when_asked(tmp_path, capsys):
    out = tmp_path / "run"
    # Pendulum's defaults normalise rewards: dropped, with a line saying so
    rc = train_main(
        "Pendulum-v1", actors=4, total_timesteps=4096, out=str(out), quiet=True, eval_episodes=1
    )
    assert rc == 0
    assert "normalize_reward dropped" in capsys.readouterr().out
    assert json.loads((out / "report.json").read_text())["config"]["normalize_reward"] is False
    with pytest.raises(ValueError, match=r"normalize_obs must be False"):
        train_main("CartPole-v1", actors=2, overrides=["normalize_obs=true"], out=str(out))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "ray"], "--backend needs --actors N"),
        (["--address", "auto"], "--address needs --actors N"),
        (["--actors", "0"], "--actors must be >= 1, got 0"),
        (["--actors", "2", "--resume"], "--resume is not available with --actors"),
        (["--actors", "2", "--n-envs", "4"], "--n-envs is not available with --actors"),
        (["--actors", "2", "--address", "auto"], "--address needs --backend ray"),
        (["--actors", "2", "--backend", "gpu"], "invalid choice: 'gpu'"),
    ],
)
def test_actor_flags_refused(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "CartPole-v1", *args])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def _scalars(logdir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in ``logdir``'s event files, read back by TensorBoard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.parametrize("actors", [None, "2"])
def test_tensorboard_holds_the_csv_metrics(tmp_path, actors):
    """--tensorboard: one scalar per numeric metrics.csv column, at each update's global_step."""
    pytest.importorskip("tensorboardX")
    pytest.importorskip("tensorboard")
    import csv

    out = tmp_path / "run"
    args = ["train", "CartPole-v1", "--total-timesteps", "512", "--out", str(out), "--quiet"]
    args += ["--eval-episodes", "1", "--tensorboard"] + (["--actors", actors] if actors else [])
    assert main(args) == 0
    assert list(out.glob("events.out.tfevents.*"))
    with (out / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    tb = _scalars(out)
    for key in ("losses/policy_loss", "losses/value_loss", "losses/approx_kl", "charts/SPS"):
        assert [s for s, _ in tb[key]] == [int(r["global_step"]) for r in rows]
        # float32 in the event file
        np.testing.assert_allclose(
            [v for _, v in tb[key]], [float(r[key]) for r in rows], rtol=1e-6
        )
    numeric = {k for k in rows[0] if k != "global_step"}
    assert numeric <= set(tb), numeric - set(tb)


def test_tensorboard_without_its_extra_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    out = tmp_path / "run"
    with pytest.raises(ImportError, match=r'pip install "fastppo\[tensorboard\]"'):
        main(
            ["train", "CartPole-v1", "--total-timesteps", "256", "--out", str(out), "--tensorboard"]
        )
    assert not (out / "checkpoint.npz").exists()


def test_actors_failure_writes_the_partial_report_to_the_run_directory(tmp_path, monkeypatch):
    from fastppo.actor_learner import learner as L

    def boom(*a, **k):
        raise L.ActorFailedError("actor 1 failed after 3 restarts: injected")

    # the run fails at its first update, after the actors started
    monkeypatch.setattr(L.Learner, "update", boom)
    out = tmp_path / "run"
    with pytest.raises(L.ActorFailedError, match="injected"):
        train_main("CartPole-v1", actors=2, total_timesteps=1024, out=str(out), quiet=True)
    rep = json.loads((out / "failure_report.json").read_text())
    assert rep["error"] == "ActorFailedError: actor 1 failed after 3 restarts: injected"
    assert rep["backend"] == "threads" and len(rep["actors"]) == 2
    assert not (out / "checkpoint.npz").exists()
