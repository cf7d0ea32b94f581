"""Actor-learner ``ray`` backend on a two-node ``ray.cluster_utils.Cluster``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_actor_learner_helpers import CountingEnv, RecordingUpdate, linear_policy_fn

from fastppo.actor_learner import ActorLearnerConfig, run
from fastppo.ppo.config import PPOConfig

# Ray start-up and node failures take seconds each: the full run only.
pytestmark = pytest.mark.slow

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

HERE = Path(__file__).resolve().parent


def test_ray_actors_spread_over_two_nodes_joined_by_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if ray.is_initialized():
        ray.shutdown()
    # node processes inherit the environment: workers import the test helpers
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(HERE.parent)]))
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes(timeout=120)
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
            address=cluster.address,  # joins the cluster; run() disconnects at the end
            policy_fn=linear_policy_fn,
            _update_fn=upd,
        )
        assert rep.updates == 4
        nodes = {n for a in rep.actors for n in a.nodes}
        assert len(nodes) == 2  # one actor per node
        assert not ray.is_initialized()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
