"""The ``threads`` backend: actors are threads of the learner's process.

Cheapest start-up and no copies of the weights, but the actors share the GIL:
they overlap only where the environment and the policy release it (Numba
kernels do; pure-Python environments such as CartPole mostly do not).
Experience travels as chunk objects through a ``queue.Queue``; the newest
broadcast sits in a mailbox that an actor checks (one integer comparison)
before every step.
"""

from __future__ import annotations

import queue
import threading
import traceback
from typing import Any

from fastppo.actor_learner.actor import (
    ActorCore,
    Chunk,
    EnvFn,
    Failure,
    PolicyFn,
    ShutdownRequested,
    Spec,
    actor_loop,
)
from fastppo.actor_learner.config import ActorLearnerConfig

JOIN_TIMEOUT_S = 10.0


class _Mailbox:
    """The newest broadcast; older ones are overwritten, never queued."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.blob: bytes | None = None
        self.version = -1
        self.stop = threading.Event()

    def publish(self, blob: bytes, version: int) -> None:
        with self.cond:
            self.blob, self.version = blob, version
            self.cond.notify_all()


class _ThreadLink:
    def __init__(self, box: _Mailbox, out: queue.Queue[Any], cancel: threading.Event) -> None:
        self.box = box
        self.out = out
        self.cancel = cancel  # set when this incarnation is abandoned

    def newest(self, have: int) -> bytes | None:
        if self.box.version <= have:  # a plain int read: the common, lock-free path
            return None
        with self.box.cond:
            return self.box.blob

    def wait_newer(self, have: int, timeout: float) -> None:
        with self.box.cond:
            self.box.cond.wait_for(lambda: self.box.version > have or self.stopping(), timeout)

    def send(self, chunk: Chunk) -> None:
        if self.stopping():
            raise ShutdownRequested
        self.out.put(chunk)

    def stopping(self) -> bool:
        return self.box.stop.is_set() or self.cancel.is_set()


class ThreadsBackend:
    """Runs each actor in a daemon thread; see the module docstring."""

    name = "threads"

    def __init__(
        self, config: ActorLearnerConfig, env_fn: EnvFn, policy_fn: PolicyFn, spec: Spec
    ) -> None:
        self.cfg = config
        self.env_fn = env_fn
        self.policy_fn = policy_fn
        self.spec = spec
        self.box = _Mailbox()
        self.out: queue.Queue[Any] = queue.Queue()
        self.threads: dict[int, tuple[threading.Thread, threading.Event, int]] = {}
        self.retired: list[threading.Thread] = []
        self.chunk = config.chunk_for("threads")

    # ---------------------------------------------------------------- control
    def start(self, blob: bytes, version: int, start_sent: int, actors: dict[int, int]) -> None:
        """Publish ``blob`` and start ``actors`` (``{actor_id: incarnation}``)."""
        self.publish(blob, version)
        for aid, inc in actors.items():
            self._spawn(aid, inc, start_sent)

    def _spawn(self, aid: int, incarnation: int, start_sent: int) -> None:
        cancel = threading.Event()
        t = threading.Thread(
            target=self._main,
            args=(aid, incarnation, start_sent, cancel),
            name=f"fastppo-actor-{aid}.{incarnation}",
            daemon=True,  # a wedged env must not keep the interpreter alive
        )
        self.threads[aid] = (t, cancel, incarnation)
        t.start()

    def _main(self, aid: int, incarnation: int, start_sent: int, cancel: threading.Event) -> None:
        core = None
        try:
            core = ActorCore(
                aid, incarnation, self.env_fn, self.policy_fn, self.spec,
                self.cfg.seed, start_sent, self.chunk,
            )  # fmt: skip
            link = _ThreadLink(self.box, self.out, cancel)
            actor_loop(
                core, link, self.cfg.broadcast_every, self.cfg.num_steps, self.cfg.lead_steps
            )
        except ShutdownRequested:
            pass
        except BaseException as e:  # any actor death is reported, never lost
            if not (self.box.stop.is_set() or cancel.is_set()):
                tb = traceback.format_exception_only(type(e), e)[-1].strip()
                self.out.put(Failure(aid, incarnation, f"raised {tb}"))
        finally:
            if core is not None:
                core.close()

    def publish(self, blob: bytes, version: int) -> None:
        self.box.publish(blob, version)

    def poll(self, timeout: float) -> list[Chunk | Failure]:
        """Chunks and failures that arrived, waiting up to ``timeout`` for the first."""
        # look at liveness first: a thread posts its failure before it ends, so
        # the drain below already holds the report of any thread seen dead here
        dead = [
            (aid, inc, cancel)
            for aid, (t, cancel, inc) in self.threads.items()
            if not t.is_alive() and not cancel.is_set() and not self.box.stop.is_set()
        ]
        events: list[Chunk | Failure] = []
        try:
            events.append(self.out.get(timeout=timeout))
            while True:
                events.append(self.out.get_nowait())
        except queue.Empty:
            pass
        for aid, inc, cancel in dead:
            # ended without a report: killed by a BaseException the handler could
            # not post, or an interpreter-level exit of the thread
            if not any(isinstance(e, Failure) and e.actor_id == aid for e in events):
                events.append(Failure(aid, inc, "thread ended unexpectedly"))
            cancel.set()
        return events

    def restart(self, aid: int, incarnation: int, start_sent: int) -> None:
        self._abandon(aid)
        self._spawn(aid, incarnation, start_sent)

    def retire(self, aid: int) -> None:
        self._abandon(aid)
        self.threads.pop(aid, None)

    def _abandon(self, aid: int) -> None:
        old = self.threads.get(aid)
        if old is not None:
            old[1].set()
            self.retired.append(old[0])

    def shutdown(self) -> None:
        """Stop every actor and join it (bounded waits)."""
        self.box.stop.set()
        with self.box.cond:
            self.box.cond.notify_all()
        stuck = []
        for t in [*(v[0] for v in self.threads.values()), *self.retired]:
            t.join(JOIN_TIMEOUT_S)
            if t.is_alive():
                stuck.append(t.name)
        if stuck:
            # an env blocked in a C call cannot be interrupted; the threads are
            # daemons, so they do not keep the process alive
            raise RuntimeError(
                f"threads backend: actors did not stop within {JOIN_TIMEOUT_S} s: {stuck}"
            )
