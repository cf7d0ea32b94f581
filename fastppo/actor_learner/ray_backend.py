"""The ``ray`` backend: actors as Ray actors, on one machine or a cluster.

Needs the optional extra: ``pip install "fastppo[ray]"``.

* Each actor is a Ray actor created with ``max_restarts=max_actor_restarts``,
  so Ray brings a dead worker process back; the learner tells it its new
  incarnation, and the actor rebuilds its environment and RNG stream from
  ``(seed, actor id, incarnation)``.
* Experience comes back as call results: ``collect(n)`` runs ``n`` steps (up
  to ``chunk_steps``, thousands by default, since a call costs milliseconds)
  and returns the chunk. The learner keeps two calls in flight per actor so an
  actor never idles while the learner handles the previous chunk; a Ray actor
  runs its calls in submission order, and the learner checks the step indices.
* Weights live in a weight-store actor as broadcast bytes (the documented
  ``wire`` format, not pickled objects), pinned to the driver's node: losing
  any other node never loses the weights. An actor pulls from it at the start
  of every call, and every ``PULL_EVERY`` steps inside one, when the store
  holds a newer version.
* The staleness valve is applied by the learner when it sizes each call: it
  asks for at most the steps the newest version allows, and the actor first
  loads at least that version.
* Every ``ray.get``/``ray.wait`` has a timeout. A call that fails because its
  actor raised or died is reported as a failure at once.
* Placement groups (``ray_placement``, default ``"SPREAD"``) put the actors on
  different nodes where the cluster allows; ``ray_address`` (or ``run(...,
  address=...)``) joins an existing cluster.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from typing import Any

from fastppo.actor_learner.actor import ActorCore, Chunk, EnvFn, Failure, PolicyFn, Spec
from fastppo.actor_learner.config import ActorLearnerConfig, step_allowance
from fastppo.actor_learner.placement import check_placement

GET_TIMEOUT_S = 60.0
PG_TIMEOUT_S = 120.0
IN_FLIGHT = 2
PULL_EVERY = 64
HEARTBEAT_S = 0.5
STOP_GRACE_S = 5.0


def require_ray() -> Any:
    """Import Ray or raise an ``ImportError`` that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(
            'the actor-learner "ray" backend needs Ray; install it with '
            'pip install "fastppo[ray]" (or pip install "ray[default]")'
        ) from e
    return ray


class WeightStore:
    """Holds the newest broadcast (bytes) for actors to pull."""

    def __init__(self) -> None:
        self.blob: bytes | None = None
        self.version = -1

    def put(self, blob: bytes, version: int) -> int:
        if version > self.version:
            self.blob, self.version = blob, version
        return self.version

    def get_if_newer(self, have: int) -> tuple[int, bytes] | None:
        if self.version > have and self.blob is not None:
            return self.version, self.blob
        return None

    def node(self) -> str:
        return _node_id()


def _node_id() -> str:
    """The id of the Ray node this process runs on."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


class RayActor:
    """One actor's environment and policy, living in a Ray worker."""

    def __init__(
        self,
        actor_id: int,
        env_fn: EnvFn,
        policy_fn: PolicyFn,
        spec: Spec,
        seed: int,
        capacity: int,
        store_name: str,
    ) -> None:
        import ray

        self.actor_id = actor_id
        self.env_fn, self.policy_fn, self.spec = env_fn, policy_fn, spec
        self.seed, self.capacity = seed, capacity
        # looked up by name, not passed: Ray keeps an actor handle argument in
        # its object store, where a restart may not find it (Ray logs an error
        # for every such actor created with max_restarts > 0)
        self.store: Any = ray.get_actor(store_name)
        self.core: ActorCore | None = None

    def pid(self) -> int:
        return os.getpid()

    def node(self) -> str:
        return _node_id()

    def _pull(self, core: ActorCore, min_version: int) -> None:
        import ray

        deadline = time.monotonic() + GET_TIMEOUT_S
        while True:
            got = ray.get(self.store.get_if_newer.remote(core.version), timeout=GET_TIMEOUT_S)
            if got is not None:
                core.load(got[1])
            if core.version >= min_version:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"actor {self.actor_id}: version {min_version} never arrived")
            time.sleep(0.01)

    def collect(
        self, incarnation: int, start_sent: int, n_steps: int, min_version: int
    ) -> dict[str, Any]:
        """Run ``n_steps`` steps with at least policy ``min_version``; return the chunk."""
        import ray

        if self.core is None or self.core.incarnation != incarnation:
            if self.core is not None:
                self.core.close()
            self.core = None
            self.core = ActorCore(
                self.actor_id, incarnation, self.env_fn, self.policy_fn, self.spec,
                self.seed, start_sent, max(self.capacity, n_steps),
            )  # fmt: skip
        core = self.core
        try:
            self._pull(core, min_version)
            pending = None
            i = 0
            while i < n_steps:
                if i and i % PULL_EVERY == 0:
                    # a non-blocking look for a newer policy inside a long call
                    if pending is not None:
                        ready, _ = ray.wait([pending], timeout=0)
                        if ready:
                            got = ray.get(pending, timeout=GET_TIMEOUT_S)
                            if got is not None:
                                core.load(got[1])
                            pending = None
                    if pending is None:
                        pending = self.store.get_if_newer.remote(core.version)
                # a fused core takes the steps up to the next look in one call
                m = min(PULL_EVERY - i % PULL_EVERY, n_steps - i) if core.fused else 1
                core.collect(m)
                i += m
            chunk = core.take_chunk()
        except BaseException:
            self.core = None  # a broken env is never stepped again
            core.close()
            raise
        return {
            "actor_id": chunk.actor_id,
            "incarnation": chunk.incarnation,
            "first_step": chunk.first_step,
            "data": chunk.data,
            "next_obs": chunk.next_obs,
            "node": self.node(),
        }

    def close(self) -> None:
        if self.core is not None:
            self.core.close()
            self.core = None


class _Slot:
    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.incarnation = 0
        self.requested = 0  # valve units: start_sent + steps asked for so far
        self.inflight: list[Any] = []
        # after a failure, a ping must succeed before calls are sent again: a
        # worker Ray is restarting answers ActorUnavailableError meanwhile, which
        # is not a new failure
        self.probe: Any = None
        self.probe_since = 0.0
        self.probe_next = 0.0
        # an actor the valve holds has no call in flight to fail: a heartbeat
        # ping notices its death instead
        self.beat: Any = None
        self.beat_next = 0.0


class RayBackend:
    """Ray actors and a weight store; see the module docstring."""

    name = "ray"

    def __init__(
        self, config: ActorLearnerConfig, env_fn: EnvFn, policy_fn: PolicyFn, spec: Spec
    ) -> None:
        ray = require_ray()
        self.ray = ray
        self.cfg = config
        self.env_fn, self.policy_fn, self.spec = env_fn, policy_fn, spec
        self.chunk = config.chunk_for("ray")
        self.owns_ray = False
        if not ray.is_initialized():
            self.owns_ray = True
            if config.ray_address:
                ray.init(address=config.ray_address)
            else:
                # a local Ray: workers must import fastppo the way this process does
                paths = [p for p in sys.path if p and os.path.isdir(p)]
                ray.init(
                    include_dashboard=False,
                    runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}},
                )
        self.version = -1
        self.slots: dict[int, _Slot] = {}
        self.owner: dict[Any, tuple[int, int, int]] = {}  # ref -> (actor, incarnation, seq)
        self.seq = 0
        self.pg: Any = None
        # The store lives on the driver's node (hard node affinity): the
        # learner is the one process a run cannot lose, so the store shares
        # its fate instead of adding a node whose loss would end the run.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = _node_id()
        self.store_name = f"fastppo-weights-{uuid.uuid4().hex}"
        self.store = (
            ray.remote(num_cpus=0)(WeightStore)
            .options(
                name=self.store_name,
                scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
            )
            .remote()
        )
        self._remote_actor = ray.remote(RayActor)

    def _options(self, aid: int) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "num_cpus": self.cfg.ray_actor_cpus,
            "max_restarts": self.cfg.max_actor_restarts,
            "max_task_retries": 0,  # a failed call is a failure the learner handles
        }
        if self.pg is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            opts["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                self.pg, placement_group_bundle_index=aid
            )
        return opts

    def start(self, blob: bytes, version: int, start_sent: int, actors: dict[int, int]) -> None:
        """Publish ``blob``, reserve the placement group, create ``actors``."""
        ray = self.ray
        c = self.cfg
        # refuse at once what the cluster can never hold (Ray would wait)
        check_placement(c.num_actors, c.ray_actor_cpus, c.ray_placement, ray.nodes())
        self.publish(blob, version)
        if c.ray_placement != "none" and c.ray_actor_cpus > 0:
            from ray.util.placement_group import placement_group

            bundles = [{"CPU": float(c.ray_actor_cpus)}] * c.num_actors
            self.pg = placement_group(bundles, strategy=c.ray_placement)
            try:
                ray.get(self.pg.ready(), timeout=PG_TIMEOUT_S)
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError(
                    f"run: the placement group of {c.num_actors} actors x "
                    f"{c.ray_actor_cpus:g} CPU ({c.ray_placement}) was not ready in "
                    f"{PG_TIMEOUT_S:g} s: the cluster's CPUs are taken by other work "
                    f"(available now: {ray.available_resources().get('CPU', 0.0):g} CPU)"
                ) from None
        for aid, inc in actors.items():
            h = self._remote_actor.options(**self._options(aid)).remote(
                aid, self.env_fn, self.policy_fn, self.spec, c.seed, self.chunk, self.store_name
            )
            s = _Slot(h)
            s.incarnation, s.requested = inc, start_sent
            self.slots[aid] = s

    def publish(self, blob: bytes, version: int) -> None:
        # synchronous, so that every call sized for `version` can load it
        self.ray.get(self.store.put.remote(blob, version), timeout=GET_TIMEOUT_S)
        self.version = version

    def _issue(self) -> None:
        c = self.cfg
        now = time.monotonic()
        for aid, s in self.slots.items():
            if s.probe is not None or s.probe_since:
                if s.probe is None and now >= s.probe_next:
                    s.probe = s.handle.node.remote()
                continue
            while len(s.inflight) < IN_FLIGHT:
                room = step_allowance(
                    s.requested, self.version, c.broadcast_every, c.num_steps, c.lead_steps
                )
                n = min(self.chunk, room)
                if n <= 0:
                    break
                ref = s.handle.collect.remote(s.incarnation, s.requested, n, self.version)
                self.owner[ref] = (aid, s.incarnation, self.seq)
                self.seq += 1
                s.inflight.append(ref)
                s.requested += n

    def _probes(self, events: list[Chunk | Failure]) -> None:
        ray = self.ray
        now = time.monotonic()
        for aid, s in self.slots.items():
            if s.probe is None:
                wait = self.cfg.restart_timeout_s
                if s.probe_since and now - s.probe_since > wait:
                    s.probe_since = 0.0
                    events.append(
                        Failure(
                            aid,
                            s.incarnation,
                            f"did not come back within restart_timeout_s={wait:g} s of its "
                            "restart (its node lost, and no room for it on the cluster?)",
                            final=True,
                        )
                    )
                continue
            ready, _ = ray.wait([s.probe], timeout=0)
            if not ready:
                continue
            try:
                ray.get(s.probe, timeout=GET_TIMEOUT_S)
                s.probe_since = 0.0  # back: calls resume on the next poll
            except ray.exceptions.ActorUnavailableError:
                s.probe_next = now + 0.2
            except ray.exceptions.RayActorError as e:
                s.probe_since = 0.0
                events.append(Failure(aid, s.incarnation, f"died: {type(e).__name__}"))
            s.probe = None

    def _heartbeats(self, events: list[Chunk | Failure]) -> None:
        ray = self.ray
        now = time.monotonic()
        for aid, s in self.slots.items():
            if s.beat is not None:
                ready, _ = ray.wait([s.beat], timeout=0)
                if not ready:
                    continue
                beat, s.beat = s.beat, None
                try:
                    ray.get(beat, timeout=GET_TIMEOUT_S)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                    if not s.probe_since:
                        events.append(Failure(aid, s.incarnation, f"died: {type(e).__name__}"))
                    continue
                s.beat_next = now + HEARTBEAT_S
            elif not s.inflight and not s.probe_since and now >= s.beat_next:
                s.beat = s.handle.node.remote()

    def poll(self, timeout: float) -> list[Chunk | Failure]:
        """Issue calls the valve allows, then collect finished ones."""
        ray = self.ray
        events: list[Chunk | Failure] = []
        self._probes(events)
        self._heartbeats(events)
        self._issue()
        refs = [r for s in self.slots.values() for r in s.inflight]
        probes = [s.probe for s in self.slots.values() if s.probe is not None]
        probes += [s.beat for s in self.slots.values() if s.beat is not None]
        if not refs:
            if probes:
                ray.wait(probes, num_returns=1, timeout=timeout)
            else:
                time.sleep(timeout)
            return events
        ready, _ = ray.wait(refs + probes, num_returns=1, timeout=timeout)
        if not ready:
            return events
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        failed: set[int] = set()
        for ref in sorted(ready, key=lambda r: self.owner[r][2]):  # submission order
            aid, inc, _ = self.owner.pop(ref)
            s = self.slots.get(aid)
            if s is None or ref not in s.inflight:
                continue
            s.inflight.remove(ref)
            if aid in failed:
                continue
            try:
                res = ray.get(ref, timeout=GET_TIMEOUT_S)
            except ray.exceptions.RayTaskError as e:
                failed.add(aid)
                cause = e.cause if getattr(e, "cause", None) is not None else e
                events.append(Failure(aid, inc, f"raised {type(cause).__name__}: {cause}"))
                continue
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                failed.add(aid)
                events.append(Failure(aid, inc, f"died: {type(e).__name__}"))
                continue
            events.append(
                Chunk(aid, res["incarnation"], res["first_step"], res["data"], res["next_obs"],
                      res["node"])
            )  # fmt: skip
        return events

    def _forget(self, aid: int) -> None:
        s = self.slots.get(aid)
        if s is not None:
            for r in s.inflight:
                self.owner.pop(r, None)
            s.inflight.clear()

    def restart(self, aid: int, incarnation: int, start_sent: int) -> None:
        # Ray restarts a dead worker itself (max_restarts); a live one that
        # raised is reused. Either way the next call carries the new
        # incarnation, and the actor rebuilds its env and RNG stream.
        self._forget(aid)
        s = self.slots[aid]
        s.incarnation, s.requested = incarnation, start_sent
        s.beat = None
        s.probe_since = time.monotonic()
        s.probe_next = 0.0

    def retire(self, aid: int) -> None:
        self._forget(aid)
        s = self.slots.pop(aid, None)
        if s is not None:
            self.ray.kill(s.handle, no_restart=True)

    def shutdown(self) -> None:
        """End the actors and the store, free the placement group.

        Gracefully first (``__ray_terminate__`` runs after the calls in flight
        and exits the worker without a signal), then ``ray.kill`` for any
        still there after ``STOP_GRACE_S``: a SIGTERM that lands while a worker
        drops an actor handle makes Ray print a ``SystemExit`` traceback.
        """
        ray = self.ray
        try:
            handles = [s.handle for s in self.slots.values()] + [self.store]
            for aid in list(self.slots):
                self._forget(aid)
            self.slots.clear()
            done = [h.__ray_terminate__.remote() for h in handles]
            ray.wait(done, num_returns=len(done), timeout=STOP_GRACE_S)
            for h in handles:
                ray.kill(h, no_restart=True)
            if self.pg is not None:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(self.pg)
                self.pg = None
        finally:
            if self.owns_ray:
                ray.shutdown()
