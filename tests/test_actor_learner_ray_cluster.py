"""Actor-learner ``ray`` backend on a two-node ``ray.cluster_utils.Cluster``."""

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
