"""``fastppo train`` / ``fastppo eval``: parsing, config precedence, files written, resume."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("gymnasium")

from fastppo.cli import build_parser, main
from fastppo.ppo.defaults import ENV_DEFAULTS
from fastppo.ppo.run import build_config, parse_overrides


def test_train_parses_with_only_the_env_id():
    ns = build_parser().parse_args(["train", "CartPole-v1"])
    assert ns.env_id == "CartPole-v1"
    assert ns.total_timesteps is None and ns.seed is None and ns.out is None
    ns = build_parser().parse_args(["eval", "runs/x", "--episodes", "3"])
    assert ns.dir == "runs/x" and ns.episodes == 3


def test_config_precedence(tmp_path):
    cfg, steps = build_config("CartPole-v1")
    assert (cfg.n_envs, cfg.n_steps, cfg.n_epochs, steps) == (8, 32, 20, 100_000)
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"n_epochs": 5, "learning_rate": 5e-4, "total_timesteps": 2048}))
    cfg, steps = build_config(
        "CartPole-v1", config_file=str(f), overrides=["n_epochs=7", "hidden_sizes=[32, 16]"], seed=9
    )
    assert cfg.n_epochs == 7  # --set beats the file
    assert cfg.learning_rate == 5e-4 and steps == 2048  # the file beats the env defaults
    assert cfg.hidden_sizes == (32, 16) and cfg.seed == 9
    assert build_config("CartPole-v1", config_file=str(f), total_timesteps=99)[1] == 99
    cfg, steps = build_config("SomeUnknownEnv-v0")
    assert cfg.n_envs == 8 and steps == 100_000


def test_toml_config_with_ppo_table(tmp_path):
    pytest.importorskip("tomllib")
    f = tmp_path / "c.toml"
    f.write_text("total_timesteps = 4096\n[ppo]\nn_steps = 64\nnormalize_obs = true\n")
    cfg, steps = build_config("CartPole-v1", config_file=str(f))
    assert cfg.n_steps == 64 and cfg.normalize_obs is True and steps == 4096


def test_config_errors(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"learning_rat": 1e-3}))
    with pytest.raises(ValueError, match=r"PPOConfig: keys must be PPOConfig field names"):
        build_config("CartPole-v1", config_file=str(f))
    with pytest.raises(ValueError, match=r"fastppo train: --set must be KEY=VALUE, got 'n_epochs'"):
        parse_overrides(["n_epochs"])
    with pytest.raises(ValueError, match=r"fastppo train: --config must be an existing file"):
        build_config("CartPole-v1", config_file=str(tmp_path / "nope.json"))
    with pytest.raises(ValueError, match=r"PPOConfig: gamma must be in \[0, 1\], got 2"):
        build_config("CartPole-v1", overrides=["gamma=2"])
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"fastppo train: --config must be valid JSON"):
        build_config("CartPole-v1", config_file=str(bad))
    with pytest.raises(ValueError, match=r"fastppo train: total_timesteps must be a positive int"):
        build_config("CartPole-v1", total_timesteps=0)


def test_train_eval_resume_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "CartPole-v1", "--total-timesteps", "512", "--seed", "2"]
    rc = main([*args, "--out", str(out), "--quiet", "--eval-episodes", "2"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "mean return" in text and "fastppo eval" in text
    files = ("checkpoint.npz", "checkpoint.json", "metrics.jsonl", "metrics.csv", "report.json")
    for name in files:
        assert (out / name).is_file(), name
    assert (out / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "report.json").read_text())
    assert report["timesteps"] == 512 and report["eval"]["episodes"] == 2
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2
    rec = json.loads(lines[0])
    for key in ("losses/policy_loss", "losses/value_loss", "losses/approx_kl", "charts/SPS"):
        assert key in rec
    assert (out / "metrics.csv").read_text().count("\n") == 3  # header + 2 rows

    assert main(["eval", str(out), "--episodes", "2"]) == 0
    assert "2 episodes, deterministic: mean return" in capsys.readouterr().out

    rc = main(["train", "CartPole-v1", "--out", str(out), "--resume", "--total-timesteps", "1024"])
    assert rc == 0
    assert json.loads((out / "report.json").read_text())["timesteps"] == 1024
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 4
    assert (out / "metrics.csv").read_text().count("\n") == 5  # one header only
    with pytest.raises(ValueError, match=r"fastppo train: ENV_ID must be the checkpoint's env"):
        main(["train", "Acrobot-v1", "--out", str(out), "--resume"])


@pytest.mark.parametrize("env_id", sorted(ENV_DEFAULTS))
def test_every_per_env_default_builds_its_config(env_id):
    config, steps = build_config(env_id)
    want = dict(ENV_DEFAULTS[env_id])
    assert steps == want.pop("total_timesteps")
    for key, value in want.items():
        assert getattr(config, key) == value, key


def test_a_run_without_per_env_defaults_says_so_first(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "MountainCar-v0", "--total-timesteps", "64", "--n-envs", "2"]
    rc = main([*args, "--set", "n_steps=32", "--out", str(out), "--quiet", "--eval-episodes", "1"])
    assert rc == 0
    first = capsys.readouterr().out.splitlines()[:3]
    assert any("no per-env defaults for MountainCar-v0" in line for line in first), first
    main(["train", "CartPole-v1", "--total-timesteps", "64", "--n-envs", "2", "--set",
          "n_steps=32", "--set", "batch_size=32", "--out", str(tmp_path / "cp"), "--quiet",
          "--eval-episodes", "1"])  # fmt: skip
    assert "no per-env defaults" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flag", "first_line"),
    [
        ([], "env: CartPole-v1, fastppo compiled, gymnasium-identical dynamics"),
        (["--env-backend", "gymnasium"], "env: CartPole-v1, gymnasium SyncVectorEnv"),
    ],
)
def test_the_first_line_names_the_env_backend(tmp_path, capsys, flag, first_line):
    rc = main(["train", "CartPole-v1", "--total-timesteps", "64", "--n-envs", "2", "--set",
               "n_steps=32", "--set", "batch_size=32", "--out", str(tmp_path / "r"), "--quiet",
               "--eval-episodes", "1", *flag])  # fmt: skip
    assert rc == 0
    assert capsys.readouterr().out.splitlines()[0] == first_line
    saved = json.loads((tmp_path / "r" / "checkpoint.json").read_text())
    assert saved["config"]["env_backend"] == (flag[1] if flag else "compiled")
