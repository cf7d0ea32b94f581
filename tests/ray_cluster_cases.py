"""Actor-learner ``ray`` backend on a two-node ``ray.cluster_utils.Cluster``.

Run in a child process by tests/test_actor_learner_ray.py (see there why).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_actor_learner_helpers import CountingEnv, RecordingUpdate, linear_policy_fn

from fastppo.actor_learner import ActorLearnerConfig, run
from fastppo.ppo.config import PPOConfig

# Ray start-up and node failures take seconds each: the full run only.
pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

HERE = Path(__file__).resolve().parent


# Loopback only: Ray rewrites 127.0.0.1 to the host's interface address, so the
# nodes (and the driver) take another loopback address.
IP = "127.0.0.2"


def _cluster(monkeypatch: pytest.MonkeyPatch, head_cpus: int, worker_cpus: int) -> Any:
    if ray.is_initialized():
        ray.shutdown()
    # node processes inherit the environment: workers import the test helpers
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parent)]))
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": head_cpus, "include_dashboard": False, "node_ip_address": IP},
    )
    cluster.add_node(num_cpus=worker_cpus, node_ip_address=IP)
    cluster.wait_for_nodes(timeout=120)
    # the driver joins on the head's loopback address; run() then uses this
    # connection and leaves it open
    ray.init(address=cluster.address, _node_ip_address=IP)
    addrs = [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]]
    assert len(addrs) == 2 and all(a.startswith("127.") for a in addrs), addrs
    return cluster


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc)."""
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                kids.append(int(d))
    return kids + [g for k in kids for g in _descendants(k)]


def _kill_node(cluster: Any, node: Any) -> None:
    """A machine dying: the node's raylet and every worker process it started are
    SIGKILLed (removing the node alone leaves its workers serving direct actor
    calls until they notice, which made the outcome timing-dependent)."""
    import signal

    from ray._private import ray_constants

    raylet = node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid
    workers = _descendants(raylet)
    cluster.remove_node(node, allow_graceful=False)
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _teardown(cluster: Any) -> None:
    if ray.is_initialized():
        ray.shutdown()
    cluster.shutdown()


def test_ray_actors_spread_over_two_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = _cluster(monkeypatch, 1, 1)
    try:
        upd = RecordingUpdate()
        _, rep = run(
            CountingEnv,
            ActorLearnerConfig(
                num_actors=2,
                num_steps=32,
                total_env_steps=32 * 2 * 4,
                ray_placement="STRICT_SPREAD",
            ),
            PPOConfig(batch_size=32, n_epochs=1),
            backend="ray",
            policy_fn=linear_policy_fn,
            _update_fn=upd,
        )
        assert rep.updates == 4
        nodes = {n for a in rep.actors for n in a.nodes}
        assert len(nodes) == 2  # one actor per node
    finally:
        _teardown(cluster)


def test_ray_weight_store_lives_on_the_driver_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store needs no CPU, so Ray could put it anywhere; pinned, a lost worker
    node never takes the weights with it."""
    from fastppo.actor_learner.actor import spec_for
    from fastppo.actor_learner.ray_backend import RayBackend

    # the driver's (head) node has no CPU: without the pin, nothing keeps the
    # store there rather than on the worker node
    cluster = _cluster(monkeypatch, 0, 2)
    try:
        env = CountingEnv()
        pol = linear_policy_fn(env.observation_space, env.action_space)
        cfg = ActorLearnerConfig(num_actors=1, num_steps=16, total_env_steps=16).validate()
        here = ray.get_runtime_context().get_node_id()
        for _ in range(3):
            be = RayBackend(cfg, CountingEnv, linear_policy_fn, spec_for(env, pol))
            try:
                assert ray.get(be.store.node.remote(), timeout=60) == here
            finally:
                be.shutdown()
    finally:
        _teardown(cluster)


def test_ray_losing_a_worker_node_without_spare_room_retires_its_actor_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's row: two 1-CPU nodes, the non-driver node dies mid-run. Its actor
    cannot come back (no room), so it is retired within restart_timeout_s of the
    learner seeing the failure, and the run goes on to its budget with the other."""
    import time

    cluster = _cluster(monkeypatch, 1, 1)
    worker = next(iter(cluster.worker_nodes))
    killed: list[float] = []

    def kill_worker_node(report: Any) -> None:
        if report.updates == 2 and not killed:
            killed.append(time.monotonic())
            _kill_node(cluster, worker)

    try:
        _, rep = run(
            CountingEnv,
            ActorLearnerConfig(
                num_actors=2,
                num_steps=32,
                # 2 updates of both actors, 2 more from what the lost one had
                # buffered (its lead of 2 * 32 steps), then 6 of the survivor alone
                total_env_steps=64 * 4 + 32 * 6,
                ray_placement="STRICT_SPREAD",
                restart_timeout_s=5.0,
                on_actor_failure="continue",
            ),
            PPOConfig(batch_size=32, n_epochs=1),
            backend="ray",
            policy_fn=linear_policy_fn,
            _update_fn=RecordingUpdate(),
            callback=kill_worker_node,
        )
        done = time.monotonic()
        assert killed
        lost = [a for a in rep.actors if not a.alive]
        assert len(lost) == 1, [(a.actor_id, a.last_error, a.steps_consumed) for a in rep.actors]
        assert "did not come back within restart_timeout_s=5 s" in lost[0].last_error
        assert rep.env_steps >= 64 * 4 + 32 * 6  # the budget, reached by the survivor
        # Ray's node-death detection plus the 5 s restart window, not minutes
        print(f"kill -> run end: {done - killed[0]:.1f} s")
        assert done - killed[0] < 60, done - killed[0]
    finally:
        _teardown(cluster)


def test_ray_losing_a_worker_node_with_spare_room_restarts_its_actor_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A third, idle node: the lost actor's placement bundle and the actor itself
    come back there, and both actors finish the run."""
    cluster = _cluster(monkeypatch, 1, 1)
    cluster.add_node(num_cpus=1, node_ip_address=IP)
    cluster.wait_for_nodes(timeout=120)
    assert all(n["NodeManagerAddress"].startswith("127.") for n in ray.nodes())
    state: dict[str, Any] = {}

    def kill_a_worker_node(report: Any) -> None:
        if report.updates == 2 and not state:
            # the node of an actor that is not on the driver's node
            here = ray.get_runtime_context().get_node_id()
            nodes = {n for a in report.actors for n in a.nodes} - {here}
            victim = next(w for w in cluster.worker_nodes if w.node_id in nodes)
            state["node"] = victim.node_id
            _kill_node(cluster, victim)

    try:
        _, rep = run(
            CountingEnv,
            ActorLearnerConfig(
                num_actors=2,
                num_steps=32,
                total_env_steps=64 * 10,
                ray_placement="STRICT_SPREAD",
                restart_timeout_s=30.0,
                on_actor_failure="fail",
            ),
            PPOConfig(batch_size=32, n_epochs=1),
            backend="ray",
            policy_fn=linear_policy_fn,
            _update_fn=RecordingUpdate(),
            callback=kill_a_worker_node,
        )
        assert state
        assert all(a.alive for a in rep.actors)
        moved = [a for a in rep.actors if state["node"] in a.nodes]
        assert len(moved) == 1 and moved[0].restarts == 1
        assert len(moved[0].nodes) == 2  # it ran on the lost node, then on the spare one
        assert rep.env_steps == 64 * 10
    finally:
        _teardown(cluster)
