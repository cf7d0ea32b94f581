"""Actor-learner ``processes`` backend: shared-memory transport, failures, cleanup."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest
from test_actor_learner_helpers import CountingEnv, RecordingUpdate, counting_env, linear_policy_fn

from fastppo.actor_learner import ActorLearnerConfig, encode_weights, run
from fastppo.actor_learner.actor import spec_for
from fastppo.actor_learner.processes import SHM_PREFIX, ProcessesBackend, _ProcLink
from fastppo.ppo.config import PPOConfig

PPO = PPOConfig(batch_size=32, n_epochs=2)


def _segments() -> set[str]:
    return {f for f in os.listdir("/dev/shm") if f.startswith(SHM_PREFIX + str(os.getpid()))}


def _run(env_fn: object = CountingEnv, upd: RecordingUpdate | None = None, **kw: object):
    base = {"num_actors": 2, "num_steps": 16, "total_env_steps": 16 * 2 * 6, "chunk_steps": 5}
    upd = upd or RecordingUpdate()
    policy, report = run(
        env_fn,
        ActorLearnerConfig(**{**base, **kw}),
        PPO,
        backend="processes",
        policy_fn=linear_policy_fn,
        _update_fn=upd,
    )
    return policy, report, upd


def _assert_clean() -> None:
    assert _segments() == set()
    assert mp.active_children() == []


def test_processes_ordered_rollouts_and_clean_shutdown() -> None:
    _, rep, upd = _run(broadcast_every=2)
    assert rep.updates == 6 and rep.env_steps == 6 * 32
    for col in range(2):
        t = np.concatenate([b.obs.reshape(-1, 2, 2)[:, col, 0] for b in upd.batches])
        valid = np.concatenate([b.valid.reshape(-1, 2)[:, col] for b in upd.batches])
        np.testing.assert_array_equal(np.diff(t), valid[:-1].astype(float))
    assert max(rep.lag_histogram) <= 4
    assert all(r == 10.0 for r in rep.episode_returns)
    _assert_clean()


@pytest.mark.parametrize("mode", ["raise", "exit", "sigkill"])
def test_processes_actor_failure_is_restarted(mode: str, tmp_path: Path) -> None:
    env_fn = functools.partial(counting_env, 30, mode, str(tmp_path / "failed"))
    _, rep, _ = _run(env_fn, failure_poll_s=0.05)
    assert rep.updates == 6
    assert rep.actor_restarts == 1
    st = next(a for a in rep.actors if a.restarts)
    expected = {
        "raise": "raised RuntimeError: injected env failure",
        "exit": "exited with code 3",
        "sigkill": "killed by signal 9 (SIGKILL)",
    }[mode]
    assert st.last_error == expected
    assert st.steps_consumed == 6 * 16
    _assert_clean()


def test_processes_learner_crash_leaves_nothing_behind() -> None:
    def exploding_update(*args: object) -> dict[str, float]:
        raise RuntimeError("learner bug")

    with pytest.raises(RuntimeError, match="learner bug"):
        run(
            CountingEnv,
            ActorLearnerConfig(num_actors=2, num_steps=8, total_env_steps=64),
            PPOConfig(batch_size=16),
            backend="processes",
            policy_fn=linear_policy_fn,
            _update_fn=exploding_update,
        )
    _assert_clean()


def test_seqlock_reader_gets_newest_and_rejects_torn_bytes() -> None:
    env = CountingEnv()
    pol = linear_policy_fn(env.observation_space, env.action_space)
    spec = spec_for(env, pol)
    cfg = ActorLearnerConfig(num_actors=1, num_steps=8, total_env_steps=8)
    be = ProcessesBackend(cfg, CountingEnv, linear_policy_fn, spec)
    try:
        link = _ProcLink(
            be.wshm.buf, be.wn, be.ring, bytearray(be.ring.nbytes), (None,) * 3, os.getpid()
        )
        assert link.newest(-1) is None  # nothing published yet
        for v in (0, 1, 2):  # only the newest is seen, skipped versions are not replayed
            be.publish(encode_weights(pol.params + v, v), v)
        blob = link.newest(0)
        assert blob == encode_weights(pol.params + 2, 2)
        assert link.newest(2) is None
        be.wctl[0] += 1  # a writer in the middle of an update: odd sequence
        assert link.newest(0) is None
        be.wctl[0] += 1
        be.wblob[40] ^= 0xFF  # bytes torn under an even sequence: the CRC rejects them
        assert link.newest(0) is None
        del link
    finally:
        be.shutdown()
    _assert_clean()


_CRASH_SCRIPT = """
import sys, time
sys.path[:0] = {paths!r}
from test_actor_learner_helpers import CountingEnv, linear_policy_fn
from fastppo.actor_learner import ActorLearnerConfig, run
from fastppo.ppo.config import PPOConfig

def slow_update(*args):
    time.sleep(600)  # the learner is killed while actors hold their rings

if __name__ == "__main__":
    run(CountingEnv, ActorLearnerConfig(num_actors=2, num_steps=8, total_env_steps=64),
        PPOConfig(batch_size=16), backend="processes", policy_fn=linear_policy_fn,
        _update_fn=slow_update)
"""


def test_processes_killed_learner_leaves_no_segments_or_actors(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "crash.py"
    script.write_text(_CRASH_SCRIPT.format(paths=[str(Path(__file__).parent), os.getcwd()]))
    proc = subprocess.Popen([sys.executable, str(script)])
    mine = f"{SHM_PREFIX}{proc.pid}_"

    def segs() -> list[str]:
        return [f for f in os.listdir("/dev/shm") if f.startswith(mine)]

    def children_of(pid: int) -> list[int]:
        out = subprocess.run(
            ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, timeout=10
        ).stdout
        return [int(x) for x in out.split()]

    def alive(pids: list[int]) -> list[int]:
        left = []
        for p in pids:
            try:
                # a zombie (exited, not yet reaped by a container's init) is gone too
                state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (FileNotFoundError, ProcessLookupError):
                continue
            if state != "Z":
                left.append(p)
        return left

    try:
        deadline = time.monotonic() + 60
        while len(segs()) < 3 and time.monotonic() < deadline:  # weights + two rings
            time.sleep(0.1)
        assert len(segs()) == 3
        time.sleep(0.5)  # the actors may still be starting: they must stop all the same
        actors = children_of(proc.pid)  # two actors and the resource tracker
        assert len(actors) == 3
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    deadline = time.monotonic() + 30
    while (segs() or alive(actors)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert segs() == []
    assert alive(actors) == []
