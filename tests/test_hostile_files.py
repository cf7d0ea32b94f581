"""Checkpoints are data: loading one runs no code, makes no env, allocates no more than it holds.

Each class of hostile file (issue: "Hostile files and bad input") has tests
here, for the trainer's loader (``PPOTrainer.load``, ``fastppo eval``) and the
actor-learner's (``checkpoint.load``); the previous release's files still load.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fastppo import PPOConfig, PPOTrainer
from fastppo._files import CHECKPOINT_JSON as META
from fastppo._files import CHECKPOINT_NPZ as NPZ
from fastppo._files import npz_bytes, read_npz
from fastppo.actor_learner import checkpoint as al_checkpoint

DATA = Path(__file__).parent / "data" / "checkpoints_v1"
SMALL = PPOConfig(n_envs=2, n_steps=16, batch_size=16, n_epochs=1, hidden_sizes=(8,), seed=1)
LOADER = r"PPOTrainer\.load: "


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("ck") / "run"
    cfg = SMALL.replace(normalize_obs=True, normalize_reward=True)
    with PPOTrainer("CartPole-v1", cfg) as tr:
        tr.learn(32)
        tr.save(str(d))
    return d


def _copy(saved: Path, tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(saved, d)
    return d


def _npz_raw(d: Path) -> bytes:
    return (d / NPZ).read_bytes()


def _rewrite(
    d: Path,
    meta_fn: Callable[[dict[str, Any]], Any] | None = None,
    npz: bytes | None = None,
    meta_raw: bytes | None = None,
) -> None:
    """Tamper with a checkpoint and keep the pair consistent (as an attacker would)."""
    if npz is not None:
        (d / NPZ).write_bytes(npz)
    meta = json.loads((d / META).read_text())
    meta["npz_sha256"] = hashlib.sha256(_npz_raw(d)).hexdigest()
    if meta_fn is not None:
        meta_fn(meta)
    (d / META).write_bytes(meta_raw if meta_raw is not None else json.dumps(meta).encode())


def _arrays(d: Path) -> dict[str, np.ndarray]:
    with np.load(d / NPZ, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _npy_header_only(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        f, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return f.getvalue()


def _zip(members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _npy(a: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array(f, a, allow_pickle=True)
    return f.getvalue()


def _load_peak(fn: Callable[[], Any]) -> tuple[BaseException | None, int]:
    """Run ``fn``; its exception (if any) and its peak traced allocation in bytes."""
    tracemalloc.start()
    try:
        fn()
        err = None
    except BaseException as e:
        err = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return err, peak


# --------------------------------------------------- 1. code execution
EVIL = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"


def _evil_run(tmp_path: Path, saved: Path) -> tuple[Path, Path]:
    """A 'downloaded run' directory shipping helper.py and naming it in env_id."""
    parent = tmp_path / "downloads"
    run = parent / "downloaded_run"
    shutil.copytree(saved, run)
    marker = tmp_path / "marker"
    (run / "__init__.py").write_text("")
    (run / "helper.py").write_text(EVIL.format(marker=str(marker)))
    _rewrite(run, lambda m: m.update(env_id="downloaded_run.helper:CartPole-v1"))
    return run, marker


def test_env_id_with_a_module_part_is_refused(tmp_path, saved, monkeypatch):
    run, marker = _evil_run(tmp_path, saved)
    monkeypatch.chdir(run.parent)
    monkeypatch.syspath_prepend(str(run.parent))
    with pytest.raises(ValueError, match=LOADER + r".*env_id' must be a gymnasium id without"):
        PPOTrainer.load("downloaded_run")
    assert not marker.exists()
    assert "downloaded_run.helper" not in sys.modules


def test_fastppo_eval_refuses_the_module_and_runs_nothing(tmp_path, saved):
    run, marker = _evil_run(tmp_path, saved)
    r = subprocess.run(
        [sys.executable, "-m", "fastppo.cli", "eval", "downloaded_run", "--episodes", "1"],
        cwd=run.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
    assert "without a module part" in r.stderr
    assert not marker.exists()


def test_env_id_module_imports_only_when_trusted_and_needed(tmp_path, saved, monkeypatch):
    run, marker = _evil_run(tmp_path, saved)
    monkeypatch.chdir(run.parent)
    monkeypatch.syspath_prepend(str(run.parent))
    tr = PPOTrainer.load("downloaded_run", trust_env_id=True)
    assert not marker.exists()  # loading still makes no env
    try:
        assert tr.envs is not None  # the caller asks for the env: now gymnasium imports the module
        assert marker.exists()
    finally:
        tr.close()
        sys.modules.pop("downloaded_run.helper", None)
        sys.modules.pop("downloaded_run", None)


def test_load_makes_no_env_until_asked(saved):
    made = []

    def factory() -> Any:
        import gymnasium as gym

        made.append(1)
        return gym.make("CartPole-v1")

    tr = PPOTrainer.load(str(saved), env=factory)
    assert made == [] and tr.buffer is None
    assert tr.policy.act(np.zeros((3, 4), np.float32), deterministic=True).shape == (3,)
    assert made == []
    tr.learn(tr.num_timesteps + 32)
    assert len(made) == SMALL.n_envs
    tr.close()


def test_env_with_other_spaces_is_refused_when_made(saved):
    tr = PPOTrainer.load(str(saved), env="Acrobot-v1")
    with pytest.raises(ValueError, match="spaces matching the checkpoint's policy"):
        _ = tr.envs
    tr.close()


# --------------------------------------------------- 3. memory bombs
def _both(meta: dict[str, Any], **kw: Any) -> None:
    meta["config"].update(kw)
    meta["policy"].update({k: v for k, v in kw.items() if k in meta["policy"]})


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda m: _both(m, hidden_sizes=[30000, 30000]), id="hidden-30000x30000"),
        pytest.param(lambda m: _both(m, hidden_sizes=[4096] * 4), id="hidden-under-cap-no-weights"),
        pytest.param(lambda m: m["policy"].update(obs_shape=[2**40]), id="obs-2**40"),
        pytest.param(lambda m: m["obs_rms"].update(shape=[2**20, 2**20]), id="obs-rms-shape-2**40"),
        pytest.param(lambda m: m["ret_norm"].update(n_envs=10**10), id="ret-norm-1e10-envs"),
    ],
)
def test_json_sizes_allocate_nothing_unjustified(tmp_path, saved, edit):
    d = _copy(saved, tmp_path)
    _rewrite(d, edit)
    err, peak = _load_peak(lambda: PPOTrainer.load(str(d)))
    assert isinstance(err, ValueError) and str(err).startswith("PPOTrainer.load: "), err
    assert peak < 32 * 2**20, peak


def test_huge_rollout_in_the_config_loads_without_allocating_it(tmp_path, saved):
    d = _copy(saved, tmp_path)
    _rewrite(d, lambda m: m["config"].update(n_steps=10**10))
    err, peak = _load_peak(lambda: PPOTrainer.load(str(d)).close())
    assert err is None and peak < 32 * 2**20


def test_npz_header_claiming_2_40_elements_is_refused(tmp_path, saved):
    d = _copy(saved, tmp_path)
    members = {f"{k}.npy": _npy(v) for k, v in _arrays(d).items()}
    members["policy/params.npy"] = _npy_header_only((2**40,))
    _rewrite(d, npz=_zip(members))
    err, peak = _load_peak(lambda: PPOTrainer.load(str(d)))
    assert isinstance(err, ValueError), err
    assert "'policy/params.npy' must be" in str(err) and "bytes for shape (1099511627776,)" in str(
        err
    )
    assert peak < 32 * 2**20


def test_zip_bomb_member_is_refused_before_inflating(tmp_path, saved):
    d = _copy(saved, tmp_path)
    members = {f"{k}.npy": _npy(v) for k, v in _arrays(d).items()}
    members["policy/params.npy"] = _npy(np.zeros(2**23))  # 64 MiB of zeros
    bomb = _zip(members, zipfile.ZIP_DEFLATED)
    assert len(bomb) < 2**20
    _rewrite(d, npz=bomb)
    err, peak = _load_peak(lambda: PPOTrainer.load(str(d)))
    assert isinstance(err, ValueError) and "stored uncompressed" in str(err), err
    assert peak < 16 * 2**20


# --------------------------------------------------- 4. every malformed file is one ValueError
def _object_member(d: Path) -> bytes:
    members = {f"{k}.npy": _npy(v) for k, v in _arrays(d).items()}
    members["policy/params.npy"] = _npy(np.array([{"a": 1}], dtype=object))
    return _zip(members)


def _members_without(d: Path, name: str) -> bytes:
    return npz_bytes({k: v for k, v in _arrays(d).items() if k != name})


def _members_with(d: Path, name: str, value: np.ndarray) -> bytes:
    return npz_bytes({**_arrays(d), name: value})


NPZ_CASES: dict[str, tuple[Callable[[Path], bytes], str]] = {
    "empty": (lambda d: b"", "must be a .npz"),
    "not-zip": (lambda d: b"PK\x03\x04 not really a zip" * 10, "must be a .npz"),
    "truncated": (lambda d: _npz_raw(d)[: len(_npz_raw(d)) // 2], "must be a .npz"),
    "truncated-tail": (lambda d: _npz_raw(d)[:-30], "must be a .npz"),
    "missing-member": (lambda d: _members_without(d, "policy/params"), "must be present"),
    "missing-adam": (lambda d: _members_without(d, "adam/m"), "must be present"),
    # the spec says float32 (the trainer's default): float64 weights do not belong
    "params-float64": (
        lambda d: _members_with(d, "policy/params", _arrays(d)["policy/params"].astype("f8")),
        "must be dtype float32",
    ),
    # Adam's moments: the parameters' dtype, or float64 (files before 2026-12-05)
    "adam-float16": (
        lambda d: _members_with(d, "adam/m", _arrays(d)["adam/m"].astype("f2")),
        "must be dtype float32 or float64",
    ),
    "params-short": (
        lambda d: _members_with(d, "policy/params", _arrays(d)["policy/params"][:-1]),
        "params must be shape",
    ),
    "params-nan": (
        lambda d: _members_with(
            d, "policy/params", np.full_like(_arrays(d)["policy/params"], np.nan)
        ),
        "must be finite",
    ),
    "adam-wrong-shape": (
        lambda d: _members_with(d, "adam/m", np.zeros(3)),
        "must be shape",
    ),
    "object-pickle": (_object_member, "no objects"),
    "compressed": (
        lambda d: _zip({f"{k}.npy": _npy(v) for k, v in _arrays(d).items()}, zipfile.ZIP_DEFLATED),
        "stored uncompressed",
    ),
}


@pytest.mark.parametrize("case", sorted(NPZ_CASES))
def test_malformed_npz_is_one_value_error(tmp_path, saved, case):
    d = _copy(saved, tmp_path)
    make, expected = NPZ_CASES[case]
    _rewrite(d, npz=make(d))
    with pytest.raises(ValueError, match=LOADER) as e:
        PPOTrainer.load(str(d))
    assert str(d) in str(e.value) and expected in str(e.value)


def _deep(m: dict[str, Any]) -> None:
    m["config"] = json.loads("[" * 30 + "]" * 30)


META_CASES: dict[str, tuple[Callable[[dict[str, Any]], Any] | bytes, str]] = {
    "invalid-json": (b"{not json", "must be valid JSON"),
    "bad-utf8": (b'{"a": "\xff"}', "must be UTF-8 JSON"),
    "not-object": (b"[1, 2]", "must be a JSON object"),
    "too-deep": (b"[" * 100_000 + b"]" * 100_000, "nested at most"),
    "wrong-format": (lambda m: m.update(format="other"), "must be a fastppo-ppo-checkpoint"),
    "future-version": (lambda m: m.update(version=99), "format version 1"),
    "config-list": (lambda m: m.update(config=[]), "'config' must be a JSON object"),
    "config-nested-list": (_deep, "must be a JSON object"),
    "config-unknown-key": (lambda m: m["config"].update(evil=1), "PPOConfig field names"),
    "config-bad-range": (lambda m: m["config"].update(gamma=7), "gamma must be in"),
    "policy-missing": (lambda m: m.pop("policy"), "'policy' must be a JSON object"),
    "policy-bad-kind": (lambda m: m["policy"].update(kind="evil"), "kind must be one of"),
    "policy-bad-dtype": (
        lambda m: m["policy"].update(dtype="float16"),
        "dtype must be one of ('float32', 'float64'), got 'float16'",
    ),
    "adam-missing-key": (lambda m: m["adam"].pop("t"), "with key 't'"),
    "trainer-missing": (lambda m: m["trainer"].pop("rng"), "rng"),
    "trainer-bad-rng": (lambda m: m["trainer"].update(rng={"bit_generator": "MT"}), "consistent"),
    "trainer-negative": (lambda m: m["trainer"].update(counter=-5), "ints >= 0"),
    "episodes-garbage": (lambda m: m["trainer"].update(episodes=[[1]]), "consistent"),
    "obs-rms-bad": (lambda m: m["obs_rms"].update(mean="x"), "consistent"),
    "env-id-number": (lambda m: m.update(env_id=3), "'env_id' must be a string"),
    "env-kwargs-list": (lambda m: m.update(env_kwargs=[1]), "'env_kwargs' must be a JSON object"),
}


@pytest.mark.parametrize("case", sorted(META_CASES))
def test_malformed_json_is_one_value_error(tmp_path, saved, case):
    d = _copy(saved, tmp_path)
    edit, expected = META_CASES[case]
    if isinstance(edit, bytes):
        _rewrite(d, meta_raw=edit)
    else:
        _rewrite(d, edit)
    with pytest.raises(ValueError, match=LOADER) as e:
        PPOTrainer.load(str(d))
    assert str(d) in str(e.value), e.value
    assert expected in str(e.value), e.value


def test_a_checkpoint_that_is_a_directory_or_unreadable(tmp_path, saved):
    d = _copy(saved, tmp_path)
    os.remove(d / NPZ)
    os.mkdir(d / NPZ)
    with pytest.raises(ValueError, match=LOADER + "path must be a directory holding"):
        PPOTrainer.load(str(d))


# --------------------------------------------------- the actor-learner's checkpoint
def _learner_file(tmp_path: Path) -> Path:
    p = tmp_path / "learner.npz"
    shutil.copy(DATA / "learner" / "learner.npz", p)
    return p


def _learner_arrays(p: Path) -> dict[str, np.ndarray]:
    with np.load(p, allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


AL_CASES: dict[str, tuple[Callable[[Path], bytes], str]] = {
    "empty": (lambda p: b"", "must be a .npz"),
    "truncated": (lambda p: p.read_bytes()[:200], "must be a .npz"),
    "missing-meta": (
        lambda p: npz_bytes({k: v for k, v in _learner_arrays(p).items() if k != "meta"}),
        "'meta' must be present",
    ),
    "meta-not-json": (
        lambda p: npz_bytes({**_learner_arrays(p), "meta": np.frombuffer(b"{x", np.uint8)}),
        "must be valid JSON",
    ),
    "params-int": (
        lambda p: npz_bytes({**_learner_arrays(p), "params": np.zeros(3, np.int64)}),
        "dtype float64",
    ),
    "header-2**40": (
        lambda p: _zip(
            {
                **{f"{k}.npy": _npy(v) for k, v in _learner_arrays(p).items()},
                "params.npy": _npy_header_only((2**40,)),
            }
        ),
        "bytes for shape",
    ),
    "zip-bomb": (
        lambda p: _zip(
            {
                **{f"{k}.npy": _npy(v) for k, v in _learner_arrays(p).items()},
                "params.npy": _npy(np.zeros(2**22)),
            },
            zipfile.ZIP_DEFLATED,
        ),
        "stored uncompressed",
    ),
}


@pytest.mark.parametrize("case", sorted(AL_CASES))
def test_malformed_learner_checkpoint_is_one_value_error(tmp_path, case):
    p = _learner_file(tmp_path)
    make, expected = AL_CASES[case]
    p.write_bytes(make(p))
    err, peak = _load_peak(lambda: al_checkpoint.load(str(p)))
    assert isinstance(err, ValueError), err
    assert str(err).startswith(f"checkpoint.load: {p}") and expected in str(err), err
    assert peak < 16 * 2**20


# --------------------------------------------------- the previous release's files
def test_float64_moments_of_earlier_float32_runs_load_cast(tmp_path, saved):
    """Before 2026-12-05 a float32 run saved float64 Adam moments: they load, cast."""
    d = _copy(saved, tmp_path)
    arrays = _arrays(d)
    assert arrays["adam/m"].dtype == np.float32  # what the trainer writes now
    wide = {k: v.astype(np.float64) if k.startswith("adam/") else v for k, v in arrays.items()}
    _rewrite(d, npz=npz_bytes(wide))
    tr = PPOTrainer.load(str(d))
    try:
        assert tr.optimizer.dtype == np.float32 and tr.optimizer.m.dtype == np.float32
        assert np.array_equal(tr.optimizer.m, arrays["adam/m"])
        assert np.array_equal(tr.optimizer.v, arrays["adam/v"])
        tr.learn(64)  # and it trains on
    finally:
        tr.close()


@pytest.mark.parametrize("name", ["ppo_cartpole", "ppo_pendulum"])
def test_previous_release_trainer_checkpoints_load_and_evaluate(name):
    tr = PPOTrainer.load(str(DATA / name))
    try:
        assert tr.num_timesteps > 0 and tr.n_updates > 0
        r = tr.evaluate(n_episodes=1)
        assert np.isfinite(r["mean_return"])
    finally:
        tr.close()


def test_previous_release_cli_eval(capsys):
    from fastppo.cli import main

    assert main(["eval", str(DATA / "ppo_cartpole"), "--episodes", "1"]) == 0
    assert "CartPole-v1" in capsys.readouterr().out


def test_previous_release_learner_checkpoint_loads():
    arrays, meta = al_checkpoint.load(str(DATA / "learner" / "learner.npz"))
    assert meta["format_version"] == 1 and meta["updates"] >= 1
    assert arrays["params"].dtype == np.float64 and arrays["params"].shape == arrays["adam_m"].shape


def test_current_writer_round_trips_through_the_reader():
    a = {"x": np.arange(5.0), "y/z": np.ones((2, 3), np.int32), "b": np.array([True, False])}
    back = read_npz("t", "mem", npz_bytes(a))
    assert back.keys() == a.keys()
    for k in a:
        assert back[k].dtype == a[k].dtype and np.array_equal(back[k], a[k])
        assert back[k].flags.writeable


@pytest.mark.parametrize("loader", ["trainer", "learner"])
def test_an_encrypted_member_is_refused_in_the_house_format(loader, tmp_path) -> None:
    """Found by the fuzz suite: zipfile's own RuntimeError ("password required")."""
    from fastppo.actor_learner import checkpoint as al_checkpoint

    src = DATA / ("ppo_cartpole" if loader == "trainer" else "learner")
    for f in src.iterdir():
        shutil.copy(f, tmp_path / f.name)
    npz = tmp_path / ("checkpoint.npz" if loader == "trainer" else "learner.npz")
    raw = bytearray(npz.read_bytes())
    raw[raw.find(b"PK\x03\x04") + 6] |= 1  # the local header's "encrypted" flag
    raw[raw.find(b"PK\x01\x02") + 8] |= 1  # and the central directory's
    npz.write_bytes(bytes(raw))
    # the trainer's JSON pins the archive's SHA-256, which catches it first
    want = r"SHA-256 mismatch" if loader == "trainer" else r"must be not encrypted \(as fastppo"
    with pytest.raises(ValueError, match=want):
        if loader == "trainer":
            PPOTrainer.load(str(tmp_path), env="CartPole-v1")
        else:
            al_checkpoint.load(str(npz))


def test_a_zip_directory_claiming_an_unknown_version_is_refused(tmp_path) -> None:
    """Found by the fuzz suite: zipfile's NotImplementedError ("zip file version")."""
    npz = tmp_path / "learner.npz"
    raw = bytearray((DATA / "learner" / "learner.npz").read_bytes())
    i = raw.find(b"PK\x01\x02")  # central directory: "version made by" at +4
    raw[i + 4] = 109  # 10.9
    raw[i + 6] = 109  # "version needed to extract"
    npz.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"^checkpoint.load: .* must be"):
        al_checkpoint.load(str(npz))


def test_one_checkpoint_format_each_loader_refuses_the_others_content(tmp_path) -> None:
    # trainer and actor-learner write the same pair of files; the JSON's
    # "format" says which state it holds, and each loader takes only its own
    from fastppo.actor_learner import checkpoint as al_checkpoint

    with pytest.raises(ValueError, match=r"^checkpoint.load: .* must be a fastppo-actor-learner"):
        al_checkpoint.load(str(DATA / "ppo_cartpole"))
    learner = DATA.parent / "checkpoints_v2" / "learner"
    with pytest.raises(ValueError, match=r"^PPOTrainer.load: .* must be a fastppo-ppo-checkpoint"):
        PPOTrainer.load(str(learner), env="CartPole-v1")
    d = tmp_path / "ck"
    shutil.copytree(learner, d)
    meta = json.loads((d / META).read_text())
    meta["learner"] = [1, 2]
    (d / META).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"field 'learner' must be a JSON object, got list"):
        al_checkpoint.load(str(d))
