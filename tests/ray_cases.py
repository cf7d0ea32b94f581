"""Actor-learner ``ray`` backend against a local ``ray.init(num_cpus=2)``.

Run in a child process by tests/test_actor_learner_ray.py (see there why).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from test_actor_learner_helpers import CountingEnv, RecordingUpdate, counting_env, linear_policy_fn

from fastppo.actor_learner import ActorLearnerConfig, run
from fastppo.ppo.config import PPOConfig

# Ray start-up and node failures take seconds each: the full run only.
pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")

PPO = PPOConfig(batch_size=32, n_epochs=2)
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    if ray.is_initialized():
        ray.shutdown()
    # workers import the test helpers (env and policy factories) by name
    path = os.pathsep.join([str(HERE), str(HERE.parent)])
    # loopback only: Ray rewrites 127.0.0.1 to the host's address, 127.0.0.2 it keeps
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.2",
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    assert all(n["NodeManagerAddress"] == "127.0.0.2" for n in ray.nodes())
    try:
        yield
    finally:
        ray.shutdown()


def _run(env_fn: object = CountingEnv, **kw: object) -> tuple[object, RecordingUpdate]:
    base = {"num_actors": 2, "num_steps": 64, "total_env_steps": 64 * 2 * 6}
    upd = RecordingUpdate()
    _, report = run(
        env_fn,
        ActorLearnerConfig(**{**base, **kw}),
        PPO,
        backend="ray",
        policy_fn=linear_policy_fn,
        _update_fn=upd,
    )
    return report, upd


def _resources_back() -> bool:
    # actors killed and the placement group removed: both CPUs are free again
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) >= 2:
            return True
        time.sleep(0.2)
    return False


def test_ray_rollouts_ordered_tagged_and_released(local_ray: None) -> None:
    rep, upd = _run(broadcast_every=2)
    assert rep.updates == 6 and rep.env_steps == 6 * 128
    for col in range(2):
        t = np.concatenate([b.obs.reshape(-1, 2, 2)[:, col, 0] for b in upd.batches])
        valid = np.concatenate([b.valid.reshape(-1, 2)[:, col] for b in upd.batches])
        np.testing.assert_array_equal(np.diff(t), valid[:-1].astype(float))
    assert max(rep.lag_histogram) <= 2 * 2
    assert all(len(a.nodes) == 1 for a in rep.actors)
    assert rep.backend == "ray"
    assert _resources_back()


@pytest.mark.parametrize("mode", ["raise", "exit", "sigkill"])
def test_ray_actor_failure_is_restarted(local_ray: None, mode: str, tmp_path: Path) -> None:
    env_fn = functools.partial(counting_env, 100, mode, str(tmp_path / "failed"))
    rep, _ = _run(env_fn)
    assert rep.updates == 6
    assert rep.actor_restarts == 1
    st = next(a for a in rep.actors if a.restarts)
    if mode == "raise":
        assert st.last_error == "raised RuntimeError: injected env failure"
    else:
        assert st.last_error.startswith("died: ")
    assert all(a.steps_consumed == 6 * 64 for a in rep.actors)
    assert _resources_back()


def test_ray_death_of_an_idle_actor_is_seen(local_ray: None) -> None:
    """An actor the valve holds has no call in flight; the heartbeat sees it die."""
    import signal

    from fastppo.actor_learner import encode_weights
    from fastppo.actor_learner.actor import Chunk, Failure, spec_for
    from fastppo.actor_learner.ray_backend import RayBackend

    env = CountingEnv()
    pol = linear_policy_fn(env.observation_space, env.action_space)
    cfg = ActorLearnerConfig(num_actors=1, num_steps=16, total_env_steps=16).validate()
    be = RayBackend(cfg, CountingEnv, linear_policy_fn, spec_for(env, pol))
    try:
        be.start(encode_weights(pol.params, 0), 0, 0, {0: 0})
        got: list[object] = []
        deadline = time.monotonic() + 120
        while sum(e.n for e in got if isinstance(e, Chunk)) < cfg.lead_steps:
            assert time.monotonic() < deadline
            got += be.poll(0.05)
        assert not be.slots[0].inflight  # the valve is closed: nothing in flight
        os.kill(ray.get(be.slots[0].handle.pid.remote(), timeout=60), signal.SIGKILL)
        failures: list[Failure] = []
        deadline = time.monotonic() + 60
        while not failures and time.monotonic() < deadline:
            failures = [e for e in be.poll(0.05) if isinstance(e, Failure)]
        assert failures and failures[0].reason.startswith("died: ")
    finally:
        be.shutdown()
    assert _resources_back()


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"num_actors": 3}, "they need 3 CPUs in bundles of 1"),  # 3 actors, 2 CPUs
        ({"ray_placement": "STRICT_SPREAD"}, "STRICT_SPREAD needs 2 nodes"),  # one node
    ],
)
def test_ray_placement_that_cannot_fit_is_refused_at_once(
    local_ray: None, kw: dict[str, object], why: str
) -> None:
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"cannot be placed: " + why) as e:
        _run(**kw)
    assert "the cluster has 1 alive node(s)" in str(e.value) and ": 2 CPU)" in str(e.value)
    assert time.monotonic() - t0 < 30  # seconds, not the 2-minute placement-group wait
    assert _resources_back()


_HEALTHY_RUN = """
import ray
from fastppo.actor_learner import ActorLearnerConfig, run
from fastppo.ppo.config import PPOConfig
if __name__ == "__main__":
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.2")
    assert all(n["NodeManagerAddress"] == "127.0.0.2" for n in ray.nodes())
    cfg = ActorLearnerConfig(num_actors=2, num_steps=64, total_env_steps=64 * 2 * 3)
    _, rep = run("CartPole-v1", cfg, PPOConfig(batch_size=64, n_epochs=1), backend="ray")
    print("updates", rep.updates)
    ray.shutdown()
"""


def test_ray_healthy_run_logs_no_error_and_no_traceback(tmp_path: Path) -> None:
    """Ray logged an error-level line for every actor (a constructor argument in
    its object store with max_restarts > 0), and shutdown printed SystemExit
    tracebacks from the killed workers. A healthy run is quiet now."""
    import re
    import subprocess
    import sys

    script = tmp_path / "healthy.py"
    script.write_text(_HEALTHY_RUN)
    # its own Ray on loopback (the module's local_ray fixture is not used)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "updates 3" in out.stdout
    log = out.stdout + out.stderr
    assert "Traceback" not in log and "Exception ignored" not in log, log[-3000:]
    # Ray's C++ error lines look like "[2026-12-04 14:13:58,688 E 17541 17541] ..."
    assert not re.search(r"\[[^\]]* E \d+ \d+\]", log), log[-3000:]
    assert "\tERROR " not in log and " ERROR " not in log, log[-3000:]
