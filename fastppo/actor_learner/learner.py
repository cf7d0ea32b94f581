"""The learner: ordered rollout assembly, advantages, the PPO update, broadcasts.

Experience arrives per actor in chunks; each actor is one column of a
``[num_steps, n_columns]`` rollout. A column is a FIFO: an update takes exactly
``num_steps`` steps from the front of every live column, in arrival order, and
whatever lies beyond waits for the next update. Nothing is dropped except the
unconsumed steps of an actor incarnation that failed (its partial rollout).
"""

from __future__ import annotations

import collections
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fastppo.actor_learner.actor import Chunk, Failure, Spec
from fastppo.actor_learner.config import ActorLearnerConfig
from fastppo.actor_learner.wire import encode_weights


class ActorFailedError(RuntimeError):
    """An actor failed more often than ``max_actor_restarts`` allows, or the
    backend failed (a Ray error mapped by :func:`fastppo.actor_learner.run`).

    ``report`` is the run's partial :class:`ActorLearnerReport`, attached by
    ``run`` (``None`` before).
    """

    report: ActorLearnerReport | None = None


@dataclass
class ActorStats:
    """Per-actor counters in the report."""

    actor_id: int
    steps_received: int = 0
    steps_consumed: int = 0
    steps_discarded: int = 0
    episodes: int = 0
    restarts: int = 0
    alive: bool = True
    last_error: str = ""
    nodes: list[str] = field(default_factory=list)


@dataclass
class ActorLearnerReport:
    """What :func:`fastppo.actor_learner.run` returns next to the policy.

    Attributes
    ----------
    updates : int
        PPO updates done (in this process; a resumed run counts from the
        checkpoint's).
    env_steps : int
        Environment steps consumed by updates (rows of all rollouts).
    episodes : int
        Episodes completed in the received experience.
    episode_returns : list of float
        Their undiscounted returns, in arrival order.
    broadcasts : int
        Weight broadcasts published (version 0, the initial policy, included).
    last_version : int
        Version of the newest broadcast.
    actors : list of ActorStats
    lag_histogram : dict
        ``{lag: steps}``: how many updates older than the policy being updated
        the policy that chose each consumed step was.
    actor_restarts : int
        Restarts over all actors.
    losses : dict
        Metrics of the last update (CleanRL names, plus ``vtrace/*``).
    history : list of dict
        Metrics of every update.
    elapsed_s : float
    backend : str
    """

    updates: int = 0
    env_steps: int = 0
    episodes: int = 0
    episode_returns: list[float] = field(default_factory=list)
    broadcasts: int = 0
    last_version: int = -1
    actors: list[ActorStats] = field(default_factory=list)
    lag_histogram: dict[int, int] = field(default_factory=dict)
    actor_restarts: int = 0
    losses: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    elapsed_s: float = 0.0
    backend: str = ""

    @property
    def sps(self) -> float:
        """Consumed environment steps per second of wall time."""
        return self.env_steps / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def steady_sps(self, skip: int = 1) -> float:
        """Steps per second after the first ``skip`` updates.

        Leaves out start-up (process spawn, Ray workers, JIT loading), which
        ``sps`` includes.
        """
        h = self.history
        if len(h) <= skip:
            return self.sps
        a, b = h[skip - 1] if skip else {"charts/env_steps": 0.0, "charts/elapsed_s": 0.0}, h[-1]
        dt = b["charts/elapsed_s"] - a["charts/elapsed_s"]
        return (b["charts/env_steps"] - a["charts/env_steps"]) / dt if dt > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The JSON-ready counters: steps, updates, restarts and each actor's state."""
        return {
            "backend": self.backend,
            "updates": self.updates,
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            "actor_restarts": self.actor_restarts,
            "elapsed_s": self.elapsed_s,
            "actors": [
                {
                    "actor_id": a.actor_id,
                    "alive": a.alive,
                    "restarts": a.restarts,
                    "steps_consumed": a.steps_consumed,
                    "last_error": a.last_error,
                    "nodes": list(a.nodes),
                }
                for a in self.actors
            ],
        }

    def lag_stats(self) -> dict[str, float]:
        """Mean, max and 95th percentile of the policy lag (in updates)."""
        if not self.lag_histogram:
            return {"mean": 0.0, "max": 0.0, "p95": 0.0}
        lags = np.array(sorted(self.lag_histogram), dtype=np.float64)
        w = np.array([self.lag_histogram[int(k)] for k in lags], dtype=np.float64)
        cdf = np.cumsum(w) / w.sum()
        return {
            "mean": float((lags * w).sum() / w.sum()),
            "max": float(lags[-1]),
            "p95": float(lags[np.searchsorted(cdf, 0.95)]),
        }


class _Column:
    """Learner-side state of one actor's column."""

    def __init__(self, actor_id: int) -> None:
        self.actor_id = actor_id
        self.incarnation = 0
        self.expected = 0  # index of the next step expected from this incarnation
        self.chunks: collections.deque[list[Any]] = collections.deque()  # [chunk, offset]
        self.buffered = 0
        self.ep_return = 0.0
        self.alive = True

    def discard(self) -> int:
        n = self.buffered
        self.chunks.clear()
        self.buffered = 0
        self.ep_return = 0.0
        return n

    def take(self, n: int, out: dict[str, np.ndarray], col: int) -> np.ndarray:
        """Move ``n`` steps into column ``col`` of ``out``; return the bootstrap obs.

        The bootstrap observation is the one after the last step taken: the
        next queued step's, or the chunk's ``next_obs`` when the take ends
        exactly at a chunk's end.
        """
        t = 0
        boot: np.ndarray | None = None
        while t < n:
            entry = self.chunks[0]
            chunk, off = entry
            k = min(n - t, chunk.n - off)
            for name, arr in out.items():
                arr[t : t + k, col] = chunk.data[name][off : off + k]
            t += k
            off += k
            if off == chunk.n:
                self.chunks.popleft()
                boot = chunk.next_obs
            else:
                entry[1] = off
                boot = chunk.data["obs"][off]
        self.buffered -= n
        assert boot is not None
        return boot


def _default_update(
    policy: Any,
    optimizer: Any,
    batch: Any,
    ppo_config: Any,
    rng: np.random.Generator,
    lr: float | None,
) -> dict[str, float]:
    from fastppo.ppo.update import ppo_update

    return ppo_update(policy, optimizer, batch, ppo_config, rng, lr=lr)


def _make_batch(**fields: np.ndarray) -> Any:
    from fastppo.ppo.buffer import RolloutBatch

    return RolloutBatch(**fields)


class Learner:
    """Assembles rollouts from chunks and runs the PPO updates.

    Backend-independent: the run loop feeds it chunks and failures and
    forwards the broadcasts it returns.

    Parameters
    ----------
    config : ActorLearnerConfig
    ppo_config : PPOConfig
        Update hyperparameters (``batch_size``, ``n_epochs``, ``clip_range``,
        ``learning_rate``...); its ``n_envs``/``n_steps``/``gamma``/
        ``gae_lambda`` are replaced by ``config``'s.
    policy : ActorCritic-like
        The learner's policy; updated in place.
    spec : Spec
    backend : str
    update_fn, batch_fn : callable, optional
        The PPO update and batch constructor (default: ``fastppo.ppo``'s).
    """

    def __init__(
        self,
        config: ActorLearnerConfig,
        ppo_config: Any,
        policy: Any,
        spec: Spec,
        backend: str,
        update_fn: Any = None,
        batch_fn: Any = None,
    ) -> None:
        from fastppo.nn.optim import Adam

        self.cfg = config
        self.ppo = ppo_config
        self.policy = policy
        self.spec = spec
        self.update_fn = update_fn or _default_update
        self.batch_fn = batch_fn or _make_batch
        n_params = int(np.asarray(policy.params).size)
        self.optimizer = Adam(
            n_params,
            lr=float(ppo_config.learning_rate),
            eps=float(ppo_config.adam_eps),
            dtype=np.asarray(policy.params).dtype,
        )
        # the learner's minibatch shuffling has its own stream, apart from the actors'
        self.rng = np.random.default_rng(np.random.SeedSequence([config.seed, 1 << 30]))
        self.columns = [_Column(i) for i in range(config.num_actors)]
        self.report = ActorLearnerReport(
            actors=[ActorStats(i) for i in range(config.num_actors)], backend=backend
        )
        self.updates = 0
        self.version = -1
        self.stale_chunks = 0
        self.t0 = time.monotonic()
        n_total = math.ceil(config.total_env_steps / config.steps_per_update)
        self.planned_updates = max(1, n_total)

    # ------------------------------------------------------------- broadcasts
    def broadcast(self) -> bytes:
        """Encode the current weights as the next version."""
        self.version += 1
        self.report.broadcasts += 1
        self.report.last_version = self.version
        return encode_weights(np.asarray(self.policy.params), self.version)

    def broadcast_resumed(self) -> bytes:
        """The first broadcast of a run: version ``updates // broadcast_every``.

        A fresh run publishes version 0; a resumed one the version its update
        count proves, so the actors' valve stays sound.
        """
        self.version = self.updates // self.cfg.broadcast_every - 1
        return self.broadcast()

    # -------------------------------------------------------------- intake
    def live_ids(self) -> list[int]:
        return [c.actor_id for c in self.columns if c.alive]

    def receive(self, chunk: Chunk) -> None:
        """Queue a chunk behind its column's earlier steps.

        Chunks of a failed incarnation are dropped; a gap or repeat inside an
        incarnation is a transport bug and raises at once.
        """
        if not 0 <= chunk.actor_id < len(self.columns):
            raise RuntimeError(f"learner: chunk from unknown actor {chunk.actor_id}")
        col = self.columns[chunk.actor_id]
        if chunk.incarnation != col.incarnation or not col.alive:
            self.stale_chunks += 1
            return
        if chunk.first_step != col.expected:
            raise RuntimeError(
                f"learner: actor {chunk.actor_id} sent steps starting at {chunk.first_step}, "
                f"expected {col.expected} (experience dropped or reordered in transport)"
            )
        n = chunk.n
        if n == 0:
            return
        col.expected += n
        col.chunks.append([chunk, 0])
        col.buffered += n
        st = self.report.actors[chunk.actor_id]
        st.steps_received += n
        if chunk.node and chunk.node not in st.nodes:
            st.nodes.append(chunk.node)
        self._episodes(col, chunk, st)

    def _episodes(self, col: _Column, chunk: Chunk, st: ActorStats) -> None:
        d = chunk.data
        r = d["rewards"]
        ends = np.flatnonzero(d["valid"] & (d["terminated"] | d["truncated"]))
        start: int = 0
        # a reset row is invalid with reward 0, so summing whole spans is exact
        for e in ends:
            ret = col.ep_return + float(r[start : e + 1].sum())
            self.report.episode_returns.append(ret)
            self.report.episodes += 1
            st.episodes += 1
            col.ep_return = 0.0
            start = int(e) + 1
        col.ep_return += float(r[start:].sum())

    def fail(self, failure: Failure) -> tuple[str, int, int]:
        """Account for a failed actor; say what the backend must do.

        Returns ``("restart", incarnation, start_sent)``, ``("retire", 0, 0)``
        or ``("ignore", 0, 0)`` for a failure of an already replaced
        incarnation. Raises :class:`ActorFailedError` when restarts are used
        up and ``on_actor_failure == "fail"`` or no actor is left.
        """
        col = self.columns[failure.actor_id]
        if failure.incarnation != col.incarnation or not col.alive:
            return ("ignore", 0, 0)
        st = self.report.actors[failure.actor_id]
        st.steps_discarded += col.discard()
        st.last_error = failure.reason
        if st.restarts < self.cfg.max_actor_restarts and not failure.final:
            st.restarts += 1
            self.report.actor_restarts += 1
            col.incarnation += 1
            col.expected = 0
            # every live column has given num_steps to each update so far
            return ("restart", col.incarnation, self.updates * self.cfg.num_steps)
        col.alive = False
        st.alive = False
        msg = (
            f"actor {failure.actor_id} failed after {st.restarts} restarts "
            f"(max_actor_restarts={self.cfg.max_actor_restarts}): {failure.reason}"
        )
        if failure.final:
            msg = f"actor {failure.actor_id} was retired: {failure.reason}"
        if self.cfg.on_actor_failure == "fail":
            raise ActorFailedError(msg)
        if not self.live_ids():
            raise ActorFailedError(msg + "; no actor is left")
        return ("retire", 0, 0)

    # -------------------------------------------------------------- updates
    def ready(self) -> bool:
        live = [c for c in self.columns if c.alive]
        return bool(live) and all(c.buffered >= self.cfg.num_steps for c in live)

    def done(self) -> bool:
        return self.report.env_steps >= self.cfg.total_env_steps

    def assemble(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Take ``num_steps`` from each live column: ``([S, N, ...] fields, boot obs [N, ...])``."""
        S = self.cfg.num_steps
        live = [c for c in self.columns if c.alive]
        out = {
            name: np.empty((S, len(live), *shape), dtype=dt)
            for name, shape, dt in self.spec.field_specs()
        }
        boot = np.empty((len(live), *self.spec.obs_shape), dtype=self.spec.fdtype)
        for j, c in enumerate(live):
            boot[j] = c.take(S, out, j)
            self.report.actors[c.actor_id].steps_consumed += S
        return out, boot

    def update(self) -> bytes | None:
        """One PPO update on the next rollout; returns a broadcast when one is due."""
        from fastppo.advantages import gae, vtrace

        cfg = self.cfg
        ro, boot = self.assemble()
        S, N = ro["rewards"].shape
        B = S * N
        f = np.dtype(self.spec.fdtype)
        # a step chosen by version v came from the weights after v * broadcast_every updates
        lag = self.updates - ro["versions"] * cfg.broadcast_every
        vals, counts = np.unique(lag, return_counts=True)
        for v, c in zip(vals.tolist(), counts.tolist()):
            self.report.lag_histogram[v] = self.report.lag_histogram.get(v, 0) + c
        obs = ro["obs"].reshape(B, *self.spec.obs_shape)
        actions = ro["actions"].reshape(B, *self.spec.act_shape)
        last_values = np.asarray(self.policy.value(boot), dtype=f).reshape(N)
        extra: dict[str, float] = {}
        if cfg.use_vtrace:
            tlogp, _, tvalues = self.policy.evaluate(obs, actions)
            tlogp = np.asarray(tlogp).reshape(S, N)
            values = np.asarray(tvalues, dtype=f).reshape(S, N)
            vs, adv = vtrace(
                ro["logp"], tlogp, ro["rewards"], values, last_values,
                ro["terminated"], ro["truncated"], valid=ro["valid"],
                gamma=self.ppo.gamma, lam=self.ppo.gae_lambda, rho_bar=cfg.rho_bar,
                c_bar=cfg.c_bar, pg_rho_bar=cfg.pg_rho_bar,
            )  # fmt: skip
            returns = vs
            logp = tlogp.astype(np.float32)
            v = ro["valid"]
            if v.any():
                log_rho = tlogp[v].astype(np.float64) - ro["logp"][v]
                extra["vtrace/mean_rho"] = float(np.exp(log_rho).mean())
                extra["vtrace/max_abs_log_rho"] = float(np.abs(log_rho).max())
        else:
            values = ro["values"]
            adv, returns = gae(
                ro["rewards"], values, last_values, ro["terminated"], ro["truncated"],
                valid=ro["valid"], gamma=self.ppo.gamma, gae_lambda=self.ppo.gae_lambda,
            )  # fmt: skip
            logp = ro["logp"]
        batch = self.batch_fn(
            obs=obs,
            actions=actions,
            logp=logp.reshape(B),
            advantages=adv.reshape(B),
            returns=returns.reshape(B),
            values=values.reshape(B),
            valid=ro["valid"].reshape(B),
        )
        lr = None
        ppo = self.ppo
        frac = max(1.0 - self.updates / self.planned_updates, 1e-8)
        if getattr(ppo, "anneal_lr", False):
            lr = float(ppo.learning_rate) * frac
        if getattr(ppo, "anneal_clip", False):
            ppo = replace(ppo, clip_range=float(ppo.clip_range) * frac)
        raw = self.update_fn(self.policy, self.optimizer, batch, ppo, self.rng, lr)
        metrics = {k: float(v) for k, v in raw.items()}
        metrics.update(extra)
        self.updates += 1
        self.report.updates = self.updates
        self.report.env_steps += B
        metrics["charts/policy_lag_mean"] = float(lag.mean())
        metrics["charts/env_steps"] = float(self.report.env_steps)
        metrics["charts/elapsed_s"] = time.monotonic() - self.t0
        self.report.history.append(metrics)
        self.report.losses = metrics
        if self.updates % cfg.broadcast_every == 0:
            return self.broadcast()
        return None
