"""The ``processes`` backend: spawned actor processes over shared memory.

Every actor process (``spawn`` start method: no forked locks or Numba state)
owns one environment and a policy copy. Nothing the actors send is pickled:

* **Experience** goes through a per-incarnation ring of ``slots`` fixed-size
  chunk slots in a ``SharedMemory`` segment. Two semaphores per ring count the
  free and the filled slots; a semaphore operation is a full memory barrier,
  so a slot the learner acquired is completely written. A third semaphore,
  shared by all rings, only wakes an idle learner.
* **Weights** sit in one segment behind a sequence lock: the learner bumps the
  sequence to odd, writes the broadcast (the documented ``wire`` format), sets
  the version, bumps it to even. A reader copies the bytes, accepts them only
  if the sequence was even and unchanged, and the format's CRC-32 rejects any
  torn copy the lock could miss. Readers never block the learner.

Liveness: the learner looks at every actor's exit code on each poll, so a
process that raised (its message is left in the ring's error area) or died
(``os._exit``, SIGKILL, OOM) is seen within ``failure_poll_s``. Its ring is
unlinked; a restart gets a new ring. Every segment this backend creates is
unlinked in ``shutdown`` (also on errors); if the learner itself is killed,
``multiprocessing``'s resource tracker unlinks them.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import secrets
import signal
import time
from multiprocessing import shared_memory
from typing import Any

import numpy as np

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
from fastppo.actor_learner.wire import decode_weights, encoded_size

SHM_PREFIX = "fppo_"
SLOTS = 4
ERR_BYTES = 2048
JOIN_TIMEOUT_S = 10.0
_ALIGN = 64

# weights segment control words
_SEQ, _VER, _LEN, _STOP = 0, 1, 2, 3
# ring control words
_ERRLEN = 0


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class RingLayout:
    """Byte layout of a ring: control, error area, then ``slots`` chunk slots.

    A slot is an int64 header ``[first_step, n, incarnation, 0]``, each field
    as ``[capacity, *shape]``, then ``next_obs``.
    """

    def __init__(self, spec: Spec, capacity: int, slots: int = SLOTS) -> None:
        self.spec, self.capacity, self.slots = spec, capacity, slots
        off = 32
        self.fields: list[tuple[str, tuple[int, ...], np.dtype, int]] = []
        for name, shape, dt in spec.field_specs():
            self.fields.append((name, shape, dt, off))
            off = _align(off + capacity * math.prod(shape) * dt.itemsize)
        self.next_obs_off = off
        off = _align(off + math.prod(spec.obs_shape) * np.dtype(spec.fdtype).itemsize)
        self.slot_bytes = off
        self.base = _align(64 + ERR_BYTES)
        self.nbytes = self.base + slots * self.slot_bytes

    def views(self, buf: Any) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """``(control int64[8], error bytes, per-slot views)`` over ``buf``."""
        ctl = np.ndarray((8,), np.int64, buf, 0)
        err = np.ndarray((ERR_BYTES,), np.uint8, buf, 64)
        slots = []
        for k in range(self.slots):
            o = self.base + k * self.slot_bytes
            v: dict[str, Any] = {"head": np.ndarray((4,), np.int64, buf, o)}
            for name, shape, dt, fo in self.fields:
                v[name] = np.ndarray((self.capacity, *shape), dt, buf, o + fo)
            v["next_obs"] = np.ndarray(
                self.spec.obs_shape, np.dtype(self.spec.fdtype), buf, o + self.next_obs_off
            )
            slots.append(v)
        return ctl, err, slots


def _new_segment(nbytes: int, tag: str) -> shared_memory.SharedMemory:
    name = f"{SHM_PREFIX}{os.getpid()}_{secrets.token_hex(4)}_{tag}"
    return shared_memory.SharedMemory(name=name, create=True, size=nbytes)


def _drop_segment(shm: shared_memory.SharedMemory) -> None:
    try:
        shm.close()
    except BufferError:
        pass  # a view still exists; unlinking below still frees the name
    try:
        shm.unlink()
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------- actor side
class _ProcLink:
    def __init__(
        self, wbuf: Any, wn: int, ring: RingLayout, rbuf: Any, sems: tuple, parent: int
    ) -> None:
        self.wctl = np.ndarray((4,), np.int64, wbuf, 0)
        self.wblob = np.ndarray((wn,), np.uint8, wbuf, 32)
        self.ctl, self.err, self.slots = ring.views(rbuf)
        self.free, self.filled, self.any = sems
        self.k = 0
        self.parent = parent  # the learner's pid, not getppid(): it may be dead already
        self.calls = 0
        self.orphan = False

    def stopping(self) -> bool:
        if self.orphan or self.wctl[_STOP]:
            return True
        self.calls += 1
        # a learner killed by SIGKILL cannot set the stop flag: an orphaned
        # actor sees its parent change and stops, and once every actor is gone
        # the resource tracker unlinks the segments
        if self.calls % 64 == 0 and os.getppid() != self.parent:
            self.orphan = True
        return self.orphan

    def newest(self, have: int) -> bytes | None:
        if self.wctl[_VER] <= have:
            return None
        for _ in range(100):
            s1 = int(self.wctl[_SEQ])
            if s1 & 1:
                time.sleep(0)
                continue
            n = int(self.wctl[_LEN])
            data = self.wblob[:n].tobytes()
            if int(self.wctl[_SEQ]) != s1:
                continue
            try:
                decode_weights(data)
            except ValueError:
                continue  # torn despite the lock (weak memory order): read again
            return data
        return None  # the learner is mid-write: take it before the next step

    def wait_newer(self, have: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while self.wctl[_VER] <= have and not self.stopping() and time.monotonic() < end:
            time.sleep(0.001)

    def send(self, chunk: Chunk) -> None:
        while not self.free.acquire(timeout=0.1):
            if self.stopping():
                raise ShutdownRequested
        s = self.slots[self.k % len(self.slots)]
        n = chunk.n
        s["head"][:] = (chunk.first_step, n, chunk.incarnation, 0)
        for name, arr in chunk.data.items():
            s[name][:n] = arr
        s["next_obs"][...] = chunk.next_obs
        self.k += 1
        self.filled.release()
        self.any.release()

    def report_error(self, msg: str) -> None:
        b = msg.encode("utf-8", "replace")[:ERR_BYTES]
        self.err[: len(b)] = np.frombuffer(b, np.uint8)
        self.ctl[_ERRLEN] = len(b)


def _actor_main(
    aid: int,
    incarnation: int,
    start_sent: int,
    env_fn: EnvFn,
    policy_fn: PolicyFn,
    spec: Spec,
    valve: tuple[int, int, int, int, int],
    wname: str,
    wn: int,
    rname: str,
    sems: tuple,
    parent: int,
) -> None:
    """Entry point of an actor process."""
    # Ctrl-C goes to the whole process group; the learner stops actors in order
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seed, broadcast_every, num_steps, lead, capacity = valve
    ring = RingLayout(spec, capacity)
    wshm = shared_memory.SharedMemory(name=wname)
    rshm = shared_memory.SharedMemory(name=rname)
    link = _ProcLink(wshm.buf, wn, ring, rshm.buf, sems, parent)
    core = None
    code = 0
    try:
        core = ActorCore(aid, incarnation, env_fn, policy_fn, spec, seed, start_sent, capacity)
        actor_loop(core, link, broadcast_every, num_steps, lead)
    except ShutdownRequested:
        pass
    except BaseException as e:  # reported through shared memory, never pickled
        link.report_error(f"raised {type(e).__name__}: {e}")
        code = 1
    finally:
        if core is not None:
            core.close()
        del link
        wshm.close()
        rshm.close()
    if code:
        os._exit(code)  # skip interpreter teardown: the learner already has the message


# --------------------------------------------------------------- learner side
class _Actor:
    def __init__(self, aid: int, incarnation: int, proc: Any, shm: Any, ring: RingLayout,
                 sems: tuple) -> None:  # fmt: skip
        self.aid, self.incarnation, self.proc, self.shm, self.sems = (
            aid, incarnation, proc, shm, sems,
        )  # fmt: skip
        self.ctl, self.err, self.slots = ring.views(shm.buf)
        self.k = 0

    def release_views(self) -> None:
        self.ctl = self.err = None  # type: ignore[assignment]
        self.slots = []


class ProcessesBackend:
    """Spawned actor processes; see the module docstring."""

    name = "processes"

    def __init__(
        self, config: ActorLearnerConfig, env_fn: EnvFn, policy_fn: PolicyFn, spec: Spec
    ) -> None:
        self.cfg = config
        self.env_fn = env_fn
        self.policy_fn = policy_fn
        self.spec = spec
        self.ctx = mp.get_context("spawn")
        self.capacity = config.chunk_for("processes")
        self.ring = RingLayout(spec, self.capacity)
        self.wn = encoded_size(spec.n_params, spec.fdtype)
        self.wshm = _new_segment(32 + self.wn, "w")
        self.wctl = np.ndarray((4,), np.int64, self.wshm.buf, 0)
        self.wctl[:] = 0
        self.wblob = np.ndarray((self.wn,), np.uint8, self.wshm.buf, 32)
        self.any = self.ctx.Semaphore(0)
        self.actors: dict[int, _Actor] = {}
        self.segments: list[shared_memory.SharedMemory] = [self.wshm]
        self._closed = False

    def start(self, blob: bytes, version: int, start_sent: int, actors: dict[int, int]) -> None:
        """Publish ``blob`` and spawn ``actors`` (``{actor_id: incarnation}``)."""
        self.publish(blob, version)
        for aid, inc in actors.items():
            self._spawn(aid, inc, start_sent)

    def _spawn(self, aid: int, incarnation: int, start_sent: int) -> None:
        shm = _new_segment(self.ring.nbytes, f"r{aid}")
        self.segments.append(shm)
        sems = (self.ctx.Semaphore(SLOTS), self.ctx.Semaphore(0), self.any)
        a = _Actor(aid, incarnation, None, shm, self.ring, sems)
        a.ctl[:] = 0
        c = self.cfg
        valve = (c.seed, c.broadcast_every, c.num_steps, c.lead_steps, self.capacity)
        proc = self.ctx.Process(
            target=_actor_main,
            args=(aid, incarnation, start_sent, self.env_fn, self.policy_fn, self.spec, valve,
                  self.wshm.name, self.wn, shm.name, sems, os.getpid()),
            name=f"fastppo-actor-{aid}.{incarnation}",
            daemon=True,  # never outlive the learner
        )  # fmt: skip
        proc.start()
        a.proc = proc
        self.actors[aid] = a

    def publish(self, blob: bytes, version: int) -> None:
        if len(blob) != self.wn:
            raise ValueError(
                f"processes backend: broadcast must be {self.wn} bytes, got {len(blob)}"
            )
        self.wctl[_SEQ] += 1  # odd: readers back off
        self.wblob[:] = np.frombuffer(blob, np.uint8)
        self.wctl[_LEN] = len(blob)
        self.wctl[_VER] = version
        self.wctl[_SEQ] += 1

    def _drain(self, events: list[Chunk | Failure]) -> None:
        for a in self.actors.values():
            while a.sems[1].acquire(block=False):
                s = a.slots[a.k % SLOTS]
                first, n, inc, _ = (int(x) for x in s["head"])
                data = {name: s[name][:n].copy() for name, _, _, _ in self.ring.fields}
                events.append(Chunk(a.aid, inc, first, data, s["next_obs"].copy()))
                a.k += 1
                a.sems[0].release()

    def poll(self, timeout: float) -> list[Chunk | Failure]:
        """Chunks and failures; waits up to ``timeout`` for something to arrive."""
        events: list[Chunk | Failure] = []
        self._drain(events)
        if not events:
            if self.any.acquire(timeout=timeout):
                self._drain(events)
        for a in list(self.actors.values()):
            code = a.proc.exitcode
            if code is None:
                continue
            self._drain(events)  # whatever it finished sending still counts
            n = int(a.ctl[_ERRLEN])
            if n:
                reason = a.err[:n].tobytes().decode("utf-8", "replace")
            elif code < 0:
                reason = f"killed by signal {-code} ({signal.Signals(-code).name})"
            else:
                reason = f"exited with code {code}"
            events.append(Failure(a.aid, a.incarnation, reason))
            self._reap(a)
        return events

    def _reap(self, a: _Actor) -> None:
        if a.proc.is_alive():
            a.proc.kill()
        a.proc.join(JOIN_TIMEOUT_S)
        a.release_views()
        if a.shm in self.segments:
            self.segments.remove(a.shm)
        _drop_segment(a.shm)
        if self.actors.get(a.aid) is a:
            del self.actors[a.aid]

    def restart(self, aid: int, incarnation: int, start_sent: int) -> None:
        old = self.actors.get(aid)
        if old is not None:
            self._reap(old)
        self._spawn(aid, incarnation, start_sent)

    def retire(self, aid: int) -> None:
        old = self.actors.get(aid)
        if old is not None:
            self._reap(old)

    def shutdown(self) -> None:
        """Stop the actors (bounded joins, then SIGKILL) and unlink every segment."""
        if self._closed:
            return
        self._closed = True
        try:
            self.wctl[_STOP] = 1
            deadline = time.monotonic() + JOIN_TIMEOUT_S
            for a in self.actors.values():
                a.proc.join(max(0.0, deadline - time.monotonic()))
            for a in list(self.actors.values()):
                if a.proc.is_alive():
                    a.proc.kill()  # an env stuck in C code cannot see the stop flag
                    a.proc.join(JOIN_TIMEOUT_S)
                a.release_views()
            self.actors.clear()
        finally:
            self.wctl = self.wblob = None  # type: ignore[assignment]
            for shm in self.segments:
                _drop_segment(shm)
            self.segments.clear()


__all__ = ["SHM_PREFIX", "ProcessesBackend"]
