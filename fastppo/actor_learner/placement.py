"""Whether the Ray actors can be placed on a cluster at all, checked before asking.

A placement group that cannot be satisfied is not an error in Ray: it waits,
and the run would hang until a timeout with a bare ``GetTimeoutError``. So
:class:`~fastppo.actor_learner.ray_backend.RayBackend` first compares what
the config asks for with the alive nodes' total resources and refuses at once
with a ``ValueError`` saying both. Totals, not what is free now: a cluster
busy with other work is waited for (then a ``TimeoutError``), one too small
or too narrow is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def node_cpus(nodes: Sequence[dict[str, Any]]) -> list[tuple[str, float]]:
    """``(address, CPUs)`` of each alive node in ``ray.nodes()``'s records."""
    return [
        (str(n.get("NodeManagerAddress", "?")), float(n.get("Resources", {}).get("CPU", 0.0)))
        for n in nodes
        if n.get("Alive", False)
    ]


def placement_problem(
    num_actors: int, actor_cpus: float, strategy: str, cpus: Sequence[tuple[str, float]]
) -> str | None:
    """Why ``num_actors`` actors of ``actor_cpus`` CPUs each cannot be placed with
    ``strategy`` on nodes of ``cpus`` (``(address, CPUs)``), or None if they can.

    One bundle per actor, as :class:`RayBackend` reserves them: ``STRICT_SPREAD``
    needs a node per actor, ``STRICT_PACK`` one node for all, ``SPREAD``,
    ``PACK`` and ``"none"`` enough whole bundles over all nodes.
    """
    if actor_cpus <= 0:
        return None
    fits = [int(c // actor_cpus) for _, c in cpus]  # whole actors per node
    if strategy == "STRICT_SPREAD":
        if sum(f >= 1 for f in fits) < num_actors:
            return f"STRICT_SPREAD needs {num_actors} nodes of {actor_cpus:g} CPU or more"
    elif strategy == "STRICT_PACK":
        if not any(f >= num_actors for f in fits):
            return f"STRICT_PACK needs one node with {num_actors * actor_cpus:g} CPUs"
    elif sum(fits) < num_actors:
        return f"they need {num_actors * actor_cpus:g} CPUs in bundles of {actor_cpus:g}"
    return None


def check_placement(
    num_actors: int, actor_cpus: float, strategy: str, nodes: Sequence[dict[str, Any]]
) -> None:
    """Raise ``ValueError`` naming the request and the cluster when it cannot fit."""
    cpus = node_cpus(nodes)
    why = placement_problem(num_actors, actor_cpus, strategy, cpus)
    if why is None:
        return
    have = ", ".join(f"{addr}: {c:g} CPU" for addr, c in cpus) or "none"
    raise ValueError(
        f"run: {num_actors} Ray actors x {actor_cpus:g} CPU with placement {strategy!r} "
        f"cannot be placed: {why}; the cluster has {len(cpus)} alive node(s) ({have}). "
        "Use fewer actors, a smaller ActorLearnerConfig.ray_actor_cpus, another "
        "ray_placement, or more nodes"
    )
