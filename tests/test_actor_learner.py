"""Actor-learner: config, valve, broadcast format, rollout assembly, threads backend."""

from __future__ import annotations

import functools
import shutil
import struct
import sys
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_actor_learner_helpers import (
    CountingEnv,
    LinearPolicy,
    RecordingUpdate,
    counting_env,
    linear_policy_fn,
)

from fastppo.actor_learner import (
    ActorFailedError,
    ActorLearnerConfig,
    Chunk,
    Failure,
    decode_weights,
    encode_weights,
    proven_steps,
    run,
    step_allowance,
)
from fastppo.actor_learner.actor import ActorCore, actor_seeds, spec_for
from fastppo.actor_learner.learner import Learner
from fastppo.ppo.config import PPOConfig

PPO = PPOConfig(batch_size=32, n_epochs=2)


# ------------------------------------------------------------------ config
def test_config_defaults_validate_and_derive() -> None:
    cfg = ActorLearnerConfig(num_actors=3, num_steps=64, broadcast_every=2).validate()
    assert cfg.lead_steps == 2 * 2 * 64
    assert cfg.steps_per_update == 192
    assert ActorLearnerConfig(max_lead_steps=500).lead_steps == 500
    assert cfg.chunk_for("threads") == 64
    assert cfg.chunk_for("ray") == 2048
    assert ActorLearnerConfig(chunk_steps=10).chunk_for("ray") == 10


@pytest.mark.parametrize(
    ("changes", "exc", "match"),
    [
        ({"num_actors": 0}, ValueError, "num_actors must be >= 1"),
        ({"num_steps": 0}, ValueError, "num_steps must be >= 1"),
        ({"broadcast_every": 0}, ValueError, "broadcast_every must be >= 1"),
        ({"num_actors": 2.0}, TypeError, "num_actors must be an int"),
        ({"num_steps": True}, TypeError, "num_steps must be an int"),
        ({"total_env_steps": 255}, ValueError, "one update's worth"),
        ({"gamma": -0.1}, ValueError, r"gamma must be in \[0, 1\]"),
        ({"gamma": 1.01}, ValueError, r"gamma must be in \[0, 1\]"),
        ({"gae_lambda": 1.5}, ValueError, r"gae_lambda must be in \[0, 1\]"),
        ({"gamma": float("nan")}, ValueError, r"gamma must be in \[0, 1\]"),
        ({"rho_bar": 0.0}, ValueError, "rho_bar must be > 0"),
        ({"c_bar": -1.0}, ValueError, "c_bar must be > 0"),
        ({"pg_rho_bar": 0}, ValueError, "pg_rho_bar must be > 0"),
        ({"max_lead_steps": 127}, ValueError, "deadlock"),
        ({"max_lead_steps": -1}, ValueError, "max_lead_steps must be >= 0"),
        ({"backend": "mpi"}, ValueError, "backend must be one of"),
        ({"on_actor_failure": "ignore"}, ValueError, "on_actor_failure must be one of"),
        ({"max_actor_restarts": -1}, ValueError, "max_actor_restarts must be >= 0"),
        ({"failure_poll_s": 6.0}, ValueError, "within 5 s"),
        ({"restart_timeout_s": 0.0}, ValueError, "restart_timeout_s must be > 0, got 0.0"),
        ({"stall_timeout_s": -1.0}, ValueError, "stall_timeout_s must be > 0, got -1.0"),
        ({"restart_timeout_s": "30"}, TypeError, "restart_timeout_s must be a real number"),
        ({"checkpoint_every": 2}, ValueError, "checkpoint_dir must be set"),
        ({"use_vtrace": 1}, TypeError, "use_vtrace must be a bool"),
        ({"ray_placement": "spread"}, ValueError, "ray_placement must be one of"),
    ],
)
def test_config_rejects(changes: dict, exc: type, match: str) -> None:
    base = {"num_actors": 2, "num_steps": 128, "total_env_steps": 256}
    with pytest.raises(exc, match=match):
        ActorLearnerConfig(**{**base, **changes}).validate()


def test_config_message_format() -> None:
    with pytest.raises(ValueError) as e:
        ActorLearnerConfig(num_steps=10, broadcast_every=3, max_lead_steps=29).validate()
    assert str(e.value).startswith("ActorLearnerConfig: max_lead_steps must be")
    assert "got 29" in str(e.value)


# ------------------------------------------------------------------- valve
def test_valve_arithmetic_hand_worked() -> None:
    # version 3 with 2 updates per broadcast and 16 steps: 3 * 2 * 16 = 96 consumed
    assert proven_steps(3, 2, 16) == 96
    assert step_allowance(sent=100, version=3, broadcast_every=2, num_steps=16, lead_steps=32) == 28
    assert step_allowance(128, 3, 2, 16, 32) == 0
    assert step_allowance(500, 3, 2, 16, 32) == 0  # never negative
    assert step_allowance(0, 0, 1, 8, 8) == 8


@pytest.mark.parametrize("b", [1, 2, 3])
@pytest.mark.parametrize("extra", [0, 5])
def test_valve_minimal_lead_never_deadlocks_and_is_tight(b: int, extra: int) -> None:
    """Simulate lock-step actors: with lead = b*S (+extra) the learner always
    reaches the next broadcast; with lead = b*S - 1 it stalls."""
    s = 4

    def simulate(lead: int, target: int) -> int:
        sent = updates = 0
        while updates < target:
            version = updates // b  # a broadcast after every b updates
            sent += step_allowance(sent, version, b, s, lead)
            done = sent // s  # the learner takes s steps per update
            if done == updates:
                return updates  # nobody can move: deadlock
            updates = done
        return updates

    assert simulate(b * s + extra, 10 * b) >= 10 * b
    assert simulate(b * s - 1, 10 * b) < b


# --------------------------------------------------------------- broadcast
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_broadcast_round_trip_bit_exact(dtype: type) -> None:
    rng = np.random.default_rng(0)
    p = rng.standard_normal(1001).astype(dtype)
    p[:4] = [-0.0, np.finfo(dtype).tiny / 2, np.finfo(dtype).max, -np.finfo(dtype).eps]
    blob = encode_weights(p, 7)
    assert len(blob) == 32 + p.nbytes
    v, q = decode_weights(blob, p.size, dtype)
    assert v == 7
    assert q.dtype == p.dtype
    assert q.tobytes() == p.tobytes()  # bit-exact, signed zero and subnormals included
    assert not q.flags.writeable
    # zero-copy from any buffer: bytearray, memoryview
    v2, q2 = decode_weights(memoryview(bytearray(blob)))
    assert v2 == 7 and q2.tobytes() == p.tobytes()


@settings(max_examples=60, deadline=None)
@given(
    raw=st.binary(min_size=0, max_size=64),
    wide=st.booleans(),
    version=st.integers(0, 2**64 - 1),
)
def test_broadcast_round_trip_any_bit_pattern(raw: bytes, wide: bool, version: int) -> None:
    dt = np.dtype(np.float64 if wide else np.float32)
    raw = raw[: len(raw) // dt.itemsize * dt.itemsize]
    p = np.frombuffer(raw, dt)  # NaN payloads, infinities, subnormals: whatever the bits say
    v, q = decode_weights(encode_weights(p, version))
    assert v == version and q.dtype == dt and q.tobytes() == raw


def test_broadcast_header_is_as_documented() -> None:
    p = np.arange(3, dtype=np.float64)
    blob = encode_weights(p, 2**40 + 5)
    magic, fmt, code, r0, version, n, crc, r1 = struct.unpack_from("<4sHBBQQII", blob)
    assert (magic, fmt, code, r0, version, n, r1) == (b"FPPW", 2, 2, 0, 2**40 + 5, 3, 0)
    # the CRC covers the whole frame, read with its own four bytes as zeros
    assert crc == zlib.crc32(blob[:24] + bytes(4) + blob[28:])
    assert blob[32:] == p.astype("<f8").tobytes()


def test_broadcast_rejects_bad_bytes() -> None:
    p = np.ones(8, np.float32)
    blob = encode_weights(p, 1)
    with pytest.raises(ValueError, match="magic"):
        decode_weights(b"XXXX" + blob[4:])
    with pytest.raises(ValueError, match="bytes for 8 float32"):
        decode_weights(blob[:-1])
    with pytest.raises(ValueError, match="at least 32 bytes"):
        decode_weights(blob[:10])
    torn = bytearray(blob)
    torn[40] ^= 1
    with pytest.raises(ValueError, match="CRC"):
        decode_weights(bytes(torn))
    with pytest.raises(ValueError, match="9 parameters"):
        decode_weights(blob, n_params=9)
    with pytest.raises(TypeError, match="float64"):
        decode_weights(blob, dtype=np.float64)
    bad_fmt = bytearray(blob)
    bad_fmt[4] = 9
    with pytest.raises(ValueError, match="format version 2"):
        decode_weights(bytes(bad_fmt))
    with pytest.raises(TypeError, match="decode_weights: buf must be a bytes-like object"):
        decode_weights("FPPW")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="float32 or float64"):
        encode_weights(np.ones(3, np.int32), 0)
    with pytest.raises(ValueError, match=r"version must be an int in \[0, 2\*\*64\)"):
        encode_weights(p, -1)


def test_broadcast_every_header_bit_is_covered() -> None:
    # A flipped bit anywhere in the frame (the policy version the staleness
    # valve trusts, the reserved bytes, the CRC itself) is refused.
    blob = encode_weights(np.arange(4, dtype=np.float32), 12345)
    for byte in range(len(blob)):
        for bit in range(8):
            flipped = bytearray(blob)
            flipped[byte] ^= 1 << bit
            with pytest.raises(ValueError, match=r"^decode_weights: buf must be "):
                decode_weights(bytes(flipped))


@pytest.mark.parametrize("offset", [7, 28, 29, 31])
def test_broadcast_reserved_fields_must_be_zero(offset: int) -> None:
    # even with a CRC recomputed over the tampered header
    frame = bytearray(encode_weights(np.ones(2, np.float64), 3))
    frame[offset] = 1
    frame[24:28] = bytes(4)
    struct.pack_into("<I", frame, 24, zlib.crc32(bytes(frame)))
    with pytest.raises(ValueError, match="reserved fields are 0"):
        decode_weights(bytes(frame))


# ------------------------------------------------------- actor core tagging
def _core(incarnation: int = 0, capacity: int = 64) -> ActorCore:
    env = CountingEnv()
    spec = spec_for(env, linear_policy_fn(env.observation_space, env.action_space))
    return ActorCore(0, incarnation, CountingEnv, linear_policy_fn, spec, 5, 0, capacity)


def test_actor_core_tags_and_next_step_reset_rows() -> None:
    core = _core()
    core.load(encode_weights(core.policy.params, 4))
    for _ in range(25):
        core.step()
    ch = core.take_chunk()
    d = ch.data
    assert (ch.actor_id, ch.incarnation, ch.first_step, ch.n) == (0, 0, 0, 25)
    assert (d["versions"] == 4).all()
    # a 10-step episode ends at row 9; row 10 is the reset row holding the final obs
    assert d["terminated"][9] and d["valid"][9]
    assert not d["valid"][10] and d["rewards"][10] == 0 and d["obs"][10][1] == 10
    assert d["valid"].sum() == 23  # reset rows 10 and 21
    assert d["obs"][11][1] == 0  # fresh episode after the reset row
    # behaviour log-probs are those of the policy that acted
    lp, _, _ = core.policy.evaluate(d["obs"], d["actions"])
    np.testing.assert_allclose(d["logp"], lp, rtol=1e-6)
    # the next chunk continues the numbering; next_obs is its first obs
    core.step()
    ch2 = core.take_chunk()
    assert ch2.first_step == 25
    np.testing.assert_array_equal(ch.next_obs, ch2.data["obs"][0])


def test_actor_streams_differ_by_id_and_restart() -> None:
    seeds = {actor_seeds(0, i, r) for i in range(3) for r in range(3)}
    assert len(seeds) == 9
    assert actor_seeds(0, 1, 2) == actor_seeds(0, 1, 2)
    a, b = _core(0), _core(1)
    for c in (a, b):
        c.load(encode_weights(c.policy.params, 0))
        for _ in range(40):
            c.step()
    assert not np.array_equal(a.take_chunk().data["actions"], b.take_chunk().data["actions"])


# ------------------------------------------------------------ learner unit
def _learner(
    num_actors: int = 2, num_steps: int = 5, ppo_kw: dict | None = None, **kw: object
) -> tuple[Learner, RecordingUpdate]:
    kw = {"total_env_steps": 10**6, **kw}
    cfg = ActorLearnerConfig(num_actors=num_actors, num_steps=num_steps, **kw).validate()
    env = CountingEnv()
    pol = LinearPolicy(2, 2)
    spec = spec_for(env, pol)
    upd = RecordingUpdate()
    ppo = PPOConfig(n_envs=num_actors, n_steps=num_steps, batch_size=num_steps, **(ppo_kw or {}))
    return Learner(cfg, ppo, pol, spec, "threads", upd), upd


def _chunk(aid: int, first: int, n: int, inc: int = 0, version: int = 0) -> Chunk:
    obs = np.stack([np.arange(first, first + n), np.full(n, aid)], 1).astype(np.float64)
    data = {
        "obs": obs,
        "actions": np.zeros(n, np.int64),
        "logp": np.full(n, -0.5, np.float32),
        "values": np.zeros(n),
        "rewards": np.ones(n),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "valid": np.ones(n, bool),
        "versions": np.full(n, version, np.int64),
    }
    return Chunk(aid, inc, first, data, np.array([first + n, aid], np.float64))


def test_learner_fills_columns_in_order_and_carries_the_excess() -> None:
    ln, upd = _learner()
    ln.broadcast()
    # actor 0 in chunks of 3, actor 1 in one chunk of 7: quota 5 per update
    for first in (0, 3, 6, 9):
        ln.receive(_chunk(0, first, 3))
    ln.receive(_chunk(1, 0, 7))
    assert ln.ready()
    ln.update()
    b = upd.batches[-1]
    obs = b.obs.reshape(5, 2, 2)
    np.testing.assert_array_equal(obs[:, 0, 0], [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(obs[:, 1, 0], [0, 1, 2, 3, 4])
    assert (obs[:, 1, 1] == 1).all()  # column = actor
    assert not ln.ready()  # actor 1 has only 2 left
    ln.receive(_chunk(1, 7, 3))
    ln.update()
    obs = upd.batches[-1].obs.reshape(5, 2, 2)
    np.testing.assert_array_equal(obs[:, 0, 0], [5, 6, 7, 8, 9])
    np.testing.assert_array_equal(obs[:, 1, 0], [5, 6, 7, 8, 9])
    assert ln.columns[0].buffered == 2 and ln.columns[1].buffered == 0
    assert ln.report.env_steps == 20 and ln.report.actors[0].steps_consumed == 10


@pytest.mark.parametrize("anneal_clip", [False, True])
def test_learner_anneals_the_clip_range_on_the_learning_rate_s_schedule(anneal_clip) -> None:
    ln, upd = _learner(
        num_actors=1, num_steps=5, total_env_steps=20, ppo_kw={"anneal_clip": anneal_clip}
    )
    ln.broadcast()
    for first in range(0, 20, 5):
        ln.receive(_chunk(0, first, 5))
        ln.update()
    fracs = [1.0, 0.75, 0.5, 0.25]  # 1 - updates done / 4 planned
    assert [lr for lr, _ in upd.schedule] == pytest.approx([3e-4 * f for f in fracs])
    clips = [c for _, c in upd.schedule]
    assert clips == pytest.approx([0.2 * f for f in fracs] if anneal_clip else [0.2] * 4)
    assert ln.ppo.clip_range == 0.2  # the given config is left as it was


def test_learner_bootstrap_obs_mid_chunk_and_at_chunk_end() -> None:
    ln, _ = _learner(num_actors=1, num_steps=4)
    ln.receive(_chunk(0, 0, 6))
    out = {name: np.empty((4, 1, *shape), dt) for name, shape, dt in ln.spec.field_specs()}
    boot = ln.columns[0].take(4, out, 0)
    np.testing.assert_array_equal(boot, [4, 0])  # the next queued step's obs
    ln.receive(_chunk(0, 6, 2))
    boot = ln.columns[0].take(4, out, 0)
    np.testing.assert_array_equal(boot, [8, 0])  # the chunk's next_obs


def test_learner_rejects_gaps_and_drops_stale_incarnations() -> None:
    ln, _ = _learner()
    ln.receive(_chunk(0, 0, 3))
    with pytest.raises(RuntimeError, match="dropped or reordered"):
        ln.receive(_chunk(0, 4, 3))
    ln.receive(_chunk(1, 0, 3, inc=5))
    assert ln.columns[1].buffered == 0 and ln.stale_chunks == 1


def test_learner_failure_discards_partial_rollout_then_restarts_or_fails() -> None:
    ln, _ = _learner(max_actor_restarts=1, on_actor_failure="fail")
    ln.receive(_chunk(0, 0, 3))
    assert ln.fail(Failure(0, 0, "boom")) == ("restart", 1, 0)
    st = ln.report.actors[0]
    assert (st.steps_discarded, st.restarts, ln.columns[0].buffered) == (3, 1, 0)
    assert ln.fail(Failure(0, 0, "late report")) == ("ignore", 0, 0)
    ln.receive(_chunk(0, 0, 2, inc=1))  # the new incarnation counts from 0
    with pytest.raises(ActorFailedError, match=r"actor 0 failed after 1 restarts.*boom2"):
        ln.fail(Failure(0, 1, "boom2"))


def test_learner_retires_an_actor_that_cannot_come_back() -> None:
    """A final failure (not back within restart_timeout_s) retires the actor at
    once, whatever restarts it has left."""
    ln, _ = _learner(max_actor_restarts=3, on_actor_failure="continue")
    assert ln.fail(Failure(1, 0, "not back", final=True)) == ("retire", 0, 0)
    assert not ln.report.actors[1].alive and ln.report.actors[1].restarts == 0
    ln, _ = _learner(max_actor_restarts=3, on_actor_failure="fail")
    with pytest.raises(ActorFailedError, match=r"actor 1 was retired: not back"):
        ln.fail(Failure(1, 0, "not back", final=True))


def test_learner_continues_with_fewer_actors() -> None:
    ln, upd = _learner(max_actor_restarts=0, on_actor_failure="continue")
    ln.broadcast()
    assert ln.fail(Failure(1, 0, "gone"))[0] == "retire"
    ln.receive(_chunk(0, 0, 5))
    assert ln.ready()
    ln.update()
    assert upd.batches[-1].obs.shape == (5, 2)  # one column
    with pytest.raises(ActorFailedError, match="no actor is left"):
        ln.fail(Failure(0, 0, "also gone"))


def test_learner_lag_histogram_counts_updates_behind() -> None:
    ln, _ = _learner(num_actors=1, num_steps=4, broadcast_every=2, max_lead_steps=100)
    ln.broadcast()
    ln.receive(_chunk(0, 0, 4, version=0))
    ln.update()  # updates 0 -> lag 0
    ln.receive(_chunk(0, 4, 4, version=0))
    ln.update()  # 1 update behind
    ln.receive(_chunk(0, 8, 4, version=1))
    ln.update()  # version 1 = weights after 2 updates; now at 2 -> lag 0
    assert ln.report.lag_histogram == {0: 8, 1: 4}
    assert ln.version == 1 and ln.report.broadcasts == 2


# -------------------------------------------------------- threads backend
def _run_threads(env_fn: object = CountingEnv, upd: RecordingUpdate | None = None, **kw: object):
    base = {"num_actors": 2, "num_steps": 16, "total_env_steps": 16 * 2 * 6, "chunk_steps": 5}
    cfg = ActorLearnerConfig(**{**base, **kw})
    upd = upd or RecordingUpdate()
    policy, report = run(
        env_fn, cfg, PPO, backend="threads", policy_fn=linear_policy_fn, _update_fn=upd
    )
    return policy, report, upd


def _column_stream(upd: RecordingUpdate, n_cols: int, col: int) -> np.ndarray:
    return np.concatenate([b.obs.reshape(-1, n_cols, 2)[:, col, 0] for b in upd.batches])


def test_threads_rollouts_are_complete_and_ordered() -> None:
    before = set(threading.enumerate())
    _, rep, upd = _run_threads(broadcast_every=2)
    assert rep.updates == 6 and rep.env_steps == 6 * 32
    for col in range(2):
        # env step counter per column: +1 after a valid row, +0 after a reset row
        valid = np.concatenate([b.valid.reshape(-1, 2)[:, col] for b in upd.batches])
        t = _column_stream(upd, 2, col)
        np.testing.assert_array_equal(np.diff(t), valid[:-1].astype(float))
        assert t[0] == 0
    assert sum(a.steps_consumed for a in rep.actors) == rep.env_steps
    assert rep.broadcasts == 1 + 6 // 2 and rep.last_version == 3
    assert sum(rep.lag_histogram.values()) == rep.env_steps
    assert max(rep.lag_histogram) <= 2 * 2  # the valve bounds the lag
    assert rep.episodes == len(rep.episode_returns) > 0
    assert all(r == 10.0 for r in rep.episode_returns)
    assert set(threading.enumerate()) == before  # every actor thread joined


def test_threads_restart_after_exception(tmp_path: object) -> None:
    env_fn = functools.partial(counting_env, 20, "raise", str(tmp_path) + "/m")
    _, rep, upd = _run_threads(env_fn)
    assert rep.updates == 6
    assert rep.actor_restarts == 1
    failed = [a for a in rep.actors if a.restarts]
    assert len(failed) == 1 and "injected env failure" in failed[0].last_error
    assert failed[0].steps_discarded > 0
    assert failed[0].steps_consumed == 6 * 16  # training completed with both columns


def test_threads_failure_exhausts_restarts() -> None:
    env_fn = functools.partial(counting_env, 3, "raise")  # every incarnation fails
    with pytest.raises(ActorFailedError, match="max_actor_restarts=1"):
        _run_threads(env_fn, max_actor_restarts=1, on_actor_failure="fail")
    with pytest.raises(ActorFailedError, match="no actor is left"):
        _run_threads(env_fn, max_actor_restarts=0, on_actor_failure="continue")


def test_run_failure_carries_and_writes_the_partial_report(tmp_path: object) -> None:
    import json
    from pathlib import Path

    env_fn = functools.partial(counting_env, 3, "raise")  # every incarnation fails
    d = Path(str(tmp_path)) / "ckpt"
    with pytest.raises(ActorFailedError) as e:
        _run_threads(env_fn, max_actor_restarts=1, on_actor_failure="fail", checkpoint_dir=str(d))
    rep = e.value.report
    assert rep is not None and rep.actor_restarts >= 1
    assert any("injected env failure" in a.last_error for a in rep.actors)
    written = json.loads((d / "failure_report.json").read_text())
    assert written["error"].startswith("ActorFailedError: actor ")
    assert written["actor_restarts"] == rep.actor_restarts
    assert [a["last_error"] for a in written["actors"]] == [a.last_error for a in rep.actors]


def test_run_argument_errors() -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        run(CountingEnv, ActorLearnerConfig(), PPO, backend="gpu")
    with pytest.raises(TypeError, match="config must be an ActorLearnerConfig"):
        run(CountingEnv, {"num_actors": 2}, PPO)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="normalize_obs must be False"):
        run(CountingEnv, ActorLearnerConfig(), PPOConfig(normalize_obs=True))
    with pytest.raises(TypeError, match="env_fn must be a callable"):
        run(42, ActorLearnerConfig(), PPO)
    with pytest.raises(ValueError, match="batch_size"):
        run(CountingEnv, ActorLearnerConfig(num_actors=1, num_steps=8, total_env_steps=8), PPO)


def test_ray_backend_without_ray_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    from fastppo.actor_learner import ray_backend

    with pytest.raises(ImportError, match=r'pip install "fastppo\[ray\]"'):
        ray_backend.require_ray()


# ------------------------------------------- with the real policy and update
def _cartpole_run(tmp: str | None = None, **kw: object):
    base = {"num_actors": 2, "num_steps": 32, "total_env_steps": 32 * 2 * 3, "seed": 3}
    ppo = PPOConfig(batch_size=32, n_epochs=2, hidden_sizes=(16,), learning_rate=1e-3, seed=1)
    update = kw.pop("_update_fn", None)
    return run("CartPole-v1", ActorLearnerConfig(**{**base, **kw}), ppo, "threads",
               _update_fn=update)  # fmt: skip


def test_on_policy_vtrace_through_the_learner_equals_gae_lambda_1() -> None:
    # lead = num_steps with a broadcast every update: every step is on-policy
    common = {"gae_lambda": 1.0, "broadcast_every": 1, "max_lead_steps": 32}
    _, rep_v = _cartpole_run(use_vtrace=True, **common)
    _, rep_g = _cartpole_run(use_vtrace=False, **common)
    assert rep_v.lag_histogram == {0: rep_v.env_steps}
    assert all(h["vtrace/max_abs_log_rho"] < 1e-5 for h in rep_v.history)
    keys = ["losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl",
            "losses/clipfrac", "losses/explained_variance"]  # fmt: skip
    for hv, hg in zip(rep_v.history, rep_g.history, strict=True):
        for k in keys:
            assert hv[k] == pytest.approx(hg[k], rel=1e-4, abs=1e-7), k
    # the same trajectories (arrival order across the two actors may differ)
    assert sorted(rep_v.episode_returns) == sorted(rep_g.episode_returns)


def test_stale_vtrace_stays_finite_and_corrects_real_lag() -> None:
    _, rep = _cartpole_run(
        use_vtrace=True, broadcast_every=2, max_lead_steps=4 * 2 * 32, total_env_steps=32 * 2 * 6
    )
    assert max(rep.lag_histogram) >= 2
    stale = [h for h in rep.history if h["charts/policy_lag_mean"] > 0]
    # target log-probs (current learner policy) differ from the behaviour ones
    assert max(h["vtrace/max_abs_log_rho"] for h in stale) > 1e-4
    assert all(np.isfinite(v) for h in rep.history for v in h.values())


def test_checkpoint_resumes_a_crashed_run(tmp_path: object) -> None:
    from fastppo.actor_learner import checkpoint
    from fastppo.ppo.update import ppo_update

    calls = []

    def crashes_on_third(*args: object, **kw: object) -> dict[str, float]:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("learner crashed")
        return ppo_update(*args, **kw)  # type: ignore[arg-type]

    d = str(tmp_path)
    ck = {"checkpoint_every": 2, "checkpoint_dir": d, "total_env_steps": 32 * 2 * 4}
    with pytest.raises(RuntimeError, match="learner crashed"):
        _cartpole_run(_update_fn=crashes_on_third, **ck)
    arrays, meta = checkpoint.load(d)
    assert meta["updates"] == 2 and meta["env_steps"] == 128 and meta["format_version"] == 2
    policy, rep = _cartpole_run(resume=True, **ck)
    assert rep.updates == 4 and rep.env_steps == 4 * 64
    assert len(rep.history) == 2  # only the updates after the checkpoint ran
    assert rep.last_version == 4  # version 2 (from 2 updates) published first, then 3, 4
    _, meta2 = checkpoint.load(d)
    assert meta2["updates"] == 4 and meta2["incarnations"] == [1, 1]  # fresh RNG streams
    assert not np.array_equal(arrays["params"], policy.params)


def test_a_previous_release_learner_file_is_resumed(tmp_path: Path) -> None:
    # version 1: one learner.npz; the run resumes from it, then writes the
    # current format (checkpoint.json + .npz) next to it
    from fastppo.actor_learner import checkpoint
    from fastppo.ppo.update import ppo_update

    v1 = Path(__file__).parent / "data" / "checkpoints_v1" / "learner" / "learner.npz"
    shutil.copy(v1, tmp_path / "learner.npz")
    seen = []

    def recording(policy, *args: object, **kw: object) -> dict[str, float]:
        seen.append(policy.params.copy())
        return ppo_update(policy, *args, **kw)  # type: ignore[arg-type]

    cfg = {"num_actors": 2, "num_steps": 32, "total_env_steps": 256, "seed": 3}
    ck = {"checkpoint_every": 2, "checkpoint_dir": str(tmp_path), "resume": True}
    # the file was written by a float64 learner (before float32 training)
    ppo = PPOConfig(
        batch_size=32, n_epochs=2, hidden_sizes=(8,), learning_rate=3e-4, seed=1, dtype="float64"
    )
    _, rep = run("CartPole-v1", ActorLearnerConfig(**cfg, **ck), ppo, "threads",
                 _update_fn=recording)  # fmt: skip
    old, _ = checkpoint.load(str(v1))
    assert np.array_equal(seen[0], old["params"])  # the first update starts from the file
    assert rep.updates == 4 and len(seen) == 2
    _, meta = checkpoint.load(str(tmp_path))
    assert meta["format_version"] == 2 and meta["updates"] == 4
    # its float64 weights are not rounded into a float32 run without a word
    with pytest.raises(ValueError, match=r"params' must be dtype float32 \(this policy; resume "
                       r"with PPOConfig\(dtype='float64'\)\), got dtype float64"):  # fmt: skip
        run("CartPole-v1", ActorLearnerConfig(**cfg, **ck), ppo.replace(dtype="float32"), "threads")


def test_checkpoint_rejects_foreign_files(tmp_path: object) -> None:
    from fastppo.actor_learner import checkpoint

    path = f"{tmp_path}/learner.npz"
    meta = np.frombuffer(b'{"format": "other", "format_version": 1}', np.uint8)
    np.savez(path, params=np.zeros(3), adam_m=np.zeros(3), adam_v=np.zeros(3), meta=meta)
    with pytest.raises(ValueError, match=r"must be a fastppo\.actor_learner checkpoint"):
        checkpoint.load(path)
    obj = np.empty(1, dtype=object)
    np.savez(path, params=obj, adam_m=np.zeros(3), adam_v=np.zeros(3), meta=meta)
    with pytest.raises(
        ValueError, match=r"checkpoint.load: .*'params.npy' must be an array of numbers"
    ):
        checkpoint.load(path)  # an object array is refused, never unpickled


def test_report_rates_and_lag_statistics() -> None:
    from fastppo.actor_learner import ActorLearnerReport

    rep = ActorLearnerReport(env_steps=300, elapsed_s=10.0)
    rep.history = [
        {"charts/env_steps": 100.0, "charts/elapsed_s": 8.0},
        {"charts/env_steps": 200.0, "charts/elapsed_s": 9.0},
        {"charts/env_steps": 300.0, "charts/elapsed_s": 10.0},
    ]
    assert rep.sps == 30.0
    assert rep.steady_sps(skip=1) == 100.0  # (300 - 100) / (10 - 8): start-up left out
    rep.lag_histogram = {0: 10, 1: 85, 3: 5}
    assert rep.lag_stats() == {"mean": pytest.approx(1.0), "max": 3.0, "p95": 1.0}
    rep.lag_histogram = {0: 10, 1: 84, 3: 6}
    assert rep.lag_stats()["p95"] == 3.0


def test_run_takes_shared_fields_from_one_config_and_refuses_conflicts() -> None:
    from fastppo.actor_learner.run import _ppo_for

    al = ActorLearnerConfig(num_actors=2, num_steps=32, total_env_steps=64)
    # unset in the actor-learner config: the PPOConfig's discounting is used
    cfg, ppo = _ppo_for(al, PPOConfig(gamma=0.9, gae_lambda=0.5, batch_size=32))
    assert (cfg.gamma, cfg.gae_lambda, ppo.gamma, ppo.gae_lambda) == (0.9, 0.5, 0.9, 0.5)
    assert (ppo.n_envs, ppo.n_steps) == (2, 32)
    # set in the actor-learner config only: it wins, both agree
    cfg, ppo = _ppo_for(
        ActorLearnerConfig(**{**al.to_dict(), "gamma": 0.8}), PPOConfig(batch_size=32)
    )
    assert cfg.gamma == ppo.gamma == 0.8
    # set in both, differently: no silent overwrite
    with pytest.raises(ValueError, match=r"run: ppo_config.gamma must equal config.gamma \(0.8\)"):
        _ppo_for(ActorLearnerConfig(**{**al.to_dict(), "gamma": 0.8}), PPOConfig(gamma=0.9))
    with pytest.raises(ValueError, match=r"run: ppo_config.n_envs must equal config.num_actors"):
        _ppo_for(al, PPOConfig(n_envs=4, batch_size=32))
    with pytest.raises(ValueError, match=r"run: ppo_config.n_steps must equal config.num_steps"):
        _ppo_for(al, PPOConfig(n_steps=64, batch_size=32))
