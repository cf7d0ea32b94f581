"""Configuration of an asynchronous actor-learner run, and the staleness valve.

The valve is plain arithmetic shared by every backend, so it lives here and is
tested on its own: the learner publishes policy version ``v`` only after
``v * broadcast_every`` updates, each of which consumed ``num_steps`` steps from
every actor. Holding version ``v`` therefore proves that
``v * broadcast_every * num_steps`` of an actor's steps have been consumed, and
an actor may run at most ``max_lead_steps`` past that proof before it pauses
until a newer policy arrives.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fastppo._checks import check_range, fail

BACKENDS = ("threads", "processes", "ray")
ON_FAILURE = ("continue", "fail")
RAY_STRATEGIES = ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK", "none")

_FN = "ActorLearnerConfig"


@dataclass
class ActorLearnerConfig:
    """Settings of :func:`fastppo.actor_learner.run`.

    Parameters
    ----------
    num_actors : int
        Number of actors; each owns one environment and is one column of the
        ``[num_steps, num_actors]`` rollout.
    num_steps : int
        Steps taken from every actor per update.
    total_env_steps : int
        Budget of environment steps consumed by updates; the run stops at the
        first update that reaches it. Must allow at least one update.
    broadcast_every : int
        Publish the learner's weights every this many updates.
    max_lead_steps : int
        How far an actor may run past the steps its policy version proves were
        consumed. 0 means ``2 * broadcast_every * num_steps``. It must be at
        least ``broadcast_every * num_steps``: a tighter valve would pause the
        actors before the learner can finish the updates that produce the next
        broadcast (a deadlock). Exactly ``broadcast_every * num_steps`` with
        ``broadcast_every = 1`` makes every update on-policy.
    gamma, gae_lambda : float, optional
        Discount and lambda in [0, 1] of the advantage estimator (GAE, or the
        lambda of V-trace's trace coefficient). None (the default) takes the
        ``PPOConfig``'s; a value that contradicts one set in the ``PPOConfig``
        raises ``ValueError`` in ``run`` (nothing is overwritten silently).
    use_vtrace : bool
        Estimate advantages with V-trace, re-evaluating the target log-probs
        and values under the learner's current policy, instead of GAE on the
        actors' behaviour values.
    rho_bar, c_bar, pg_rho_bar : float
        V-trace clip thresholds (> 0).
    seed : int
        Root seed. Actor ``i`` in its ``r``-th incarnation draws from the
        stream ``SeedSequence([seed, i, r])``.
    backend : str
        ``"threads"``, ``"processes"`` or ``"ray"``.
    chunk_steps : int
        Steps per message from an actor to the learner. 0 picks
        ``min(num_steps, 256)`` for threads and processes and
        ``max(num_steps, 2048)`` for Ray, where a call costs milliseconds.
    max_actor_restarts : int
        Restarts allowed per actor after it raises or dies.
    on_actor_failure : str
        When an actor has used up its restarts: ``"continue"`` with the
        remaining actors, or ``"fail"`` the run with an error.
    failure_poll_s : float
        Interval of the liveness checks; a dead actor is seen within about
        this time (at most 5 s).
    restart_timeout_s : float
        How long a restarted actor may take to come back before it is retired
        as ``on_actor_failure`` says, whatever its restarts left (Ray: its node
        was lost and no other node has room for it). Counted from the failure
        the learner saw.
    stall_timeout_s : float
        The run fails with ``TimeoutError`` when no update completes in this
        many seconds (a hung environment, a lost cluster node).
    checkpoint_every : int
        Write a learner checkpoint every this many updates (0: never).
    checkpoint_dir : str or None
        Directory of the checkpoint; required when ``checkpoint_every > 0``.
    resume : bool
        Continue from the checkpoint in ``checkpoint_dir`` when one exists.
    ray_address : str or None
        Address of an existing Ray cluster (``"auto"``, ``"ray://host:10001"``,
        ``"host:6379"``). None starts a local Ray unless one is running.
    ray_placement : str
        Placement-group strategy for the actors (``"SPREAD"`` puts them on
        different nodes where it can); ``"none"`` disables placement groups.
    ray_actor_cpus : float
        CPUs each Ray actor reserves.
    """

    num_actors: int = 2
    num_steps: int = 128
    total_env_steps: int = 100_000
    broadcast_every: int = 1
    max_lead_steps: int = 0
    gamma: float | None = None
    gae_lambda: float | None = None
    use_vtrace: bool = False
    rho_bar: float = 1.0
    c_bar: float = 1.0
    pg_rho_bar: float = 1.0
    seed: int = 0
    backend: str = "threads"
    chunk_steps: int = 0
    max_actor_restarts: int = 3
    on_actor_failure: str = "continue"
    failure_poll_s: float = 0.05
    restart_timeout_s: float = 30.0
    stall_timeout_s: float = 300.0
    checkpoint_every: int = 0
    checkpoint_dir: str | None = None
    resume: bool = False
    ray_address: str | None = None
    ray_placement: str = "SPREAD"
    ray_actor_cpus: float = 1.0

    # ------------------------------------------------------------------ derived
    @property
    def lead_steps(self) -> int:
        """The effective ``max_lead_steps`` (0 resolved to its default)."""
        if self.max_lead_steps == 0:
            return 2 * self.broadcast_every * self.num_steps
        return self.max_lead_steps

    @property
    def steps_per_update(self) -> int:
        """Environment steps one update consumes with every actor alive."""
        return self.num_steps * self.num_actors

    def chunk_for(self, backend: str) -> int:
        """Steps per actor message on ``backend`` (``chunk_steps`` resolved)."""
        if self.chunk_steps:
            return self.chunk_steps
        if backend == "ray":
            return max(self.num_steps, 2048)
        return min(self.num_steps, 256)

    # --------------------------------------------------------------- validation
    def validate(self) -> ActorLearnerConfig:
        """Check every field; raise ``TypeError``/``ValueError`` saying why.

        Returns ``self`` so calls chain.
        """
        for name in (
            "num_actors",
            "num_steps",
            "total_env_steps",
            "broadcast_every",
            "max_lead_steps",
            "seed",
            "chunk_steps",
            "max_actor_restarts",
            "checkpoint_every",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                fail(_FN, name, "an int", repr(v), exc=TypeError)
        for name in ("num_actors", "num_steps", "broadcast_every"):
            if getattr(self, name) < 1:
                fail(
                    _FN,
                    name,
                    ">= 1 (a zero count means no experience or no update)",
                    getattr(self, name),
                )
        for name in ("max_lead_steps", "chunk_steps", "max_actor_restarts", "checkpoint_every"):
            if getattr(self, name) < 0:
                fail(_FN, name, ">= 0", getattr(self, name))
        if self.seed < 0:
            fail(_FN, "seed", ">= 0", self.seed)
        if self.total_env_steps < self.steps_per_update:
            fail(
                _FN,
                "total_env_steps",
                f">= num_steps * num_actors = {self.steps_per_update} (one update's worth)",
                self.total_env_steps,
            )
        for name in ("gamma", "gae_lambda"):
            if getattr(self, name) is not None:  # the range of PPOConfig and gae
                check_range(_FN, name, getattr(self, name), 0.0, 1.0)
        for name in (
            "rho_bar",
            "c_bar",
            "pg_rho_bar",
            "failure_poll_s",
            "restart_timeout_s",
            "stall_timeout_s",
            "ray_actor_cpus",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                fail(_FN, name, "a real number", repr(v), exc=TypeError)
            if not v == v:  # NaN compares unequal to itself
                fail(_FN, name, "a number", repr(v))
        for name in ("rho_bar", "c_bar", "pg_rho_bar"):
            if getattr(self, name) <= 0:
                fail(
                    _FN,
                    name,
                    "> 0 (a clip threshold of 0 zeroes every correction)",
                    repr(getattr(self, name)),
                )
        cycle = self.broadcast_every * self.num_steps
        if self.max_lead_steps and self.max_lead_steps < cycle:
            fail(
                _FN,
                "max_lead_steps",
                f"0 or >= broadcast_every * num_steps = {cycle}: a tighter valve pauses "
                "the actors before the learner can reach the next broadcast (deadlock)",
                self.max_lead_steps,
            )
        if not 0 < self.failure_poll_s <= 5.0:
            fail(
                _FN,
                "failure_poll_s",
                "in (0, 5] so a dead actor is seen within 5 s",
                repr(self.failure_poll_s),
            )
        for name in ("restart_timeout_s", "stall_timeout_s"):
            if getattr(self, name) <= 0:
                fail(_FN, name, "> 0", repr(getattr(self, name)))
        if self.ray_actor_cpus < 0:
            fail(_FN, "ray_actor_cpus", ">= 0", repr(self.ray_actor_cpus))
        for name in ("use_vtrace", "resume"):
            if not isinstance(getattr(self, name), bool):
                fail(_FN, name, "a bool", repr(getattr(self, name)), exc=TypeError)
        _choice("backend", self.backend, BACKENDS)
        _choice("on_actor_failure", self.on_actor_failure, ON_FAILURE)
        _choice("ray_placement", self.ray_placement, RAY_STRATEGIES)
        if self.checkpoint_dir is not None and not isinstance(self.checkpoint_dir, str):
            fail(_FN, "checkpoint_dir", "a str or None", repr(self.checkpoint_dir), exc=TypeError)
        if self.checkpoint_every and not self.checkpoint_dir:
            fail(_FN, "checkpoint_dir", "set when checkpoint_every > 0", repr(self.checkpoint_dir))
        if self.resume and not self.checkpoint_dir:
            fail(_FN, "checkpoint_dir", "set when resume=True", repr(self.checkpoint_dir))
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            fail(_FN, "ray_address", "a str or None", repr(self.ray_address), exc=TypeError)
        return self

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the fields (for checkpoints and reports)."""
        return dataclasses.asdict(self)


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if not isinstance(value, str):
        fail(_FN, name, f"one of {allowed}", repr(value), exc=TypeError)
    if value not in allowed:
        fail(_FN, name, f"one of {allowed}", repr(value))


# ---------------------------------------------------------------- the valve
def proven_steps(version: int, broadcast_every: int, num_steps: int) -> int:
    """Steps per actor that policy ``version`` proves the learner consumed."""
    return version * broadcast_every * num_steps


def step_allowance(
    sent: int, version: int, broadcast_every: int, num_steps: int, lead_steps: int
) -> int:
    """How many more steps an actor holding ``version`` may send (>= 0).

    The actor pauses when ``sent >= proven_steps(version) + lead_steps``.
    """
    return max(0, proven_steps(version, broadcast_every, num_steps) + lead_steps - sent)
