"""What every backend's actor runs: one environment, a local policy, a chunk buffer.

An actor steps a single environment (it is one column of the learner's
rollout) under gymnasium's next-step autoreset convention, done by hand so
that nothing depends on the wrapper stack: after a step that ends an episode,
the next row holds the final observation, its value and an ignored action, has
reward 0 and ``valid = False``, and only then is the environment reset. The
final observation therefore sits in the rollout, the learner can re-evaluate
its value under any policy, and every row has the same fixed size.

Each step is tagged with the policy version that chose it and its behaviour
log-probability; each chunk with the actor id, incarnation (restart count) and
the index of its first step, so the learner can prove nothing was dropped or
reordered.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from fastppo.actor_learner.config import step_allowance
from fastppo.actor_learner.wire import decode_weights

EnvFn = Callable[[], Any]
PolicyFn = Callable[[Any, Any], Any]


class ShutdownRequested(Exception):
    """Raised inside an actor when the learner asked it to stop."""


# ---------------------------------------------------------------- the step spec
@dataclass(frozen=True)
class Spec:
    """Shapes and dtypes of one step record (fixed for a run)."""

    obs_shape: tuple[int, ...]
    act_shape: tuple[int, ...]
    act_dtype: str
    fdtype: str  # float dtype of obs, rewards and values: the policy's
    n_params: int

    def field_specs(self) -> list[tuple[str, tuple[int, ...], np.dtype]]:
        """``(name, per-step shape, dtype)`` of every per-step field."""
        f = np.dtype(self.fdtype)
        return [
            ("obs", self.obs_shape, f),
            ("actions", self.act_shape, np.dtype(self.act_dtype)),
            ("logp", (), np.dtype(np.float32)),
            ("values", (), f),
            ("rewards", (), f),
            ("terminated", (), np.dtype(np.bool_)),
            ("truncated", (), np.dtype(np.bool_)),
            ("valid", (), np.dtype(np.bool_)),
            ("versions", (), np.dtype(np.int64)),
        ]


def is_compiled(env: Any) -> bool:
    """True for one of :mod:`fastppo.envs`' compiled envs (a vector env of one)."""
    from fastppo.envs import CompiledVectorEnv

    return isinstance(env, CompiledVectorEnv)


def spaces(env: Any) -> tuple[Any, Any]:
    """``(observation_space, action_space)`` of one env: a compiled env's single spaces."""
    if is_compiled(env):
        return env.single_observation_space, env.single_action_space
    return env.observation_space, env.action_space


def spec_for(env: Any, policy: Any) -> Spec:
    """Derive the record spec from a probe environment and policy."""
    import gymnasium.spaces as sp

    params = np.asarray(policy.params)
    fdtype = params.dtype if params.dtype in (np.float32, np.float64) else np.dtype(np.float32)
    obs_space, space = spaces(env)
    if isinstance(space, sp.Discrete):
        act_shape: tuple[int, ...] = ()
        act_dtype = "int64"
    elif isinstance(space, (sp.MultiDiscrete, sp.MultiBinary)):
        act_shape, act_dtype = tuple(space.shape), "int64"
    elif isinstance(space, sp.Box):
        act_shape, act_dtype = tuple(space.shape), "float32"
    else:
        raise TypeError(
            f"run: env action_space must be Discrete, MultiDiscrete, MultiBinary or Box, "
            f"got {type(space).__name__}"
        )
    if not isinstance(obs_space, sp.Box):
        raise TypeError(
            f"run: env observation_space must be a Box, got {type(obs_space).__name__}; "
            "flatten it with gymnasium.wrappers.FlattenObservation"
        )
    return Spec(
        obs_shape=tuple(obs_space.shape),
        act_shape=act_shape,
        act_dtype=act_dtype,
        fdtype=np.dtype(fdtype).name,
        n_params=int(params.size),
    )


# --------------------------------------------------------------------- chunks
@dataclass
class Chunk:
    """Consecutive steps of one actor incarnation.

    ``obs[k]`` is the observation step ``first_step + k`` acted on and
    ``next_obs`` the one after the last step (the bootstrap observation when a
    rollout ends at this chunk's end).
    """

    actor_id: int
    incarnation: int
    first_step: int
    data: dict[str, np.ndarray]
    next_obs: np.ndarray
    node: str = ""

    @property
    def n(self) -> int:
        return int(self.data["rewards"].shape[0])


@dataclass
class Failure:
    """An actor incarnation that raised or died."""

    actor_id: int
    incarnation: int
    reason: str
    #: True when no restart can help (it did not come back within
    #: ``restart_timeout_s``): the learner retires the actor at once.
    final: bool = False


def empty_fields(spec: Spec, capacity: int) -> dict[str, np.ndarray]:
    return {n: np.zeros((capacity, *s), dtype=d) for n, s, d in spec.field_specs()}


# ---------------------------------------------------------------- actor core
def actor_seeds(seed: int, actor_id: int, incarnation: int) -> tuple[int, int]:
    """``(env_seed, sampling_seed)`` of an actor's stream ``(seed, id, restart)``."""
    s = np.random.SeedSequence([seed, actor_id, incarnation]).generate_state(2, dtype=np.uint32)
    return int(s[0]), int(s[1])


def env_action(space: Any, action: np.ndarray) -> Any:
    """Turn one sampled action into what ``env.step`` takes."""
    import gymnasium.spaces as sp

    if isinstance(space, sp.Discrete):
        return int(action)
    if isinstance(space, sp.Box):
        # Gaussian samples are unbounded; the env sees them clipped, while the
        # learner keeps the sampled value (its log-prob is what was drawn).
        return np.clip(action, space.low, space.high).astype(space.dtype, copy=False)
    return np.asarray(action, dtype=space.dtype)


class ActorCore:
    """One actor incarnation's environment, policy and chunk buffer.

    Parameters
    ----------
    actor_id, incarnation : int
        Column and restart count; with ``seed`` they key the RNG stream.
    env_fn : callable
        ``env_fn() -> gymnasium.Env``.
    policy_fn : callable
        ``policy_fn(observation_space, action_space) -> policy`` with
        ``step``, ``set_params`` and ``params`` as ``ActorCritic``.
    spec : Spec
    seed : int
    start_sent : int
        Steps already consumed from this column (the valve counts from there).
    capacity : int
        Chunk size in steps.
    fused : bool
        Collect with the fused rollout (:meth:`collect`) where it applies;
        False keeps the step path (the same rows, for tests).
    """

    def __init__(
        self,
        actor_id: int,
        incarnation: int,
        env_fn: EnvFn,
        policy_fn: PolicyFn,
        spec: Spec,
        seed: int,
        start_sent: int,
        capacity: int,
        fused: bool = True,
    ) -> None:
        self.actor_id = actor_id
        self.incarnation = incarnation
        self.spec = spec
        self.env = env_fn()
        self.compiled = is_compiled(self.env)
        if self.compiled and self.env.num_envs != 1:
            raise ValueError(
                "run: env_fn must make one env (a compiled env of num_envs=1), "
                f"got a compiled env of num_envs={self.env.num_envs}"
            )
        self.policy = policy_fn(*spaces(self.env))
        env_seed, self.sample_seed = actor_seeds(seed, actor_id, incarnation)
        self.version = -1  # no weights yet: an actor never acts with its init
        self.sent = start_sent  # steps taken (sent or buffered), valve units
        self.next_index = 0  # index of the next step within this incarnation
        self.counter = 0
        self.capacity = capacity
        self.buf = empty_fields(spec, capacity)
        self.n = 0
        self.fdtype = np.dtype(spec.fdtype)
        obs, _ = self.env.reset(seed=env_seed)
        self.obs = np.asarray(obs, dtype=self.fdtype).reshape(spec.obs_shape)
        self.need_reset = False
        self.fused = fused and self.compiled and _is_actor_critic(self.policy)
        if self.fused:
            # float64 rows for the fields the fused kernel writes in float64
            # (the chunk buffer holds the policy's dtype, or float32 log-probs)
            self._wide = {
                k: np.zeros((capacity, *self.buf[k].shape[1:]), np.float64)
                for k in ("obs", "logp", "values", "rewards")
            }

    def load(self, blob: Any) -> None:
        """Load a broadcast (bytes in the documented format)."""
        version, params = decode_weights(blob, self.spec.n_params, self.spec.fdtype)
        self.policy.set_params(params)
        self.version = version

    def allowance(self, broadcast_every: int, num_steps: int, lead_steps: int) -> int:
        return step_allowance(self.sent, self.version, broadcast_every, num_steps, lead_steps)

    def step(self) -> None:
        """Take one step into the buffer (the buffer must have room), one Python
        iteration: the step path, and the only one for other envs and policies."""
        b, k = self.buf, self.n
        obs_b = self.obs.reshape((1, *self.spec.obs_shape))
        actions, logp, values = self.policy.step(obs_b, seed=self.sample_seed, counter=self.counter)
        self.counter += 1
        a = np.asarray(actions).reshape(self.spec.act_shape)
        b["obs"][k] = self.obs
        b["actions"][k] = a
        b["logp"][k] = np.asarray(logp).reshape(())
        b["values"][k] = np.asarray(values).reshape(())
        b["versions"][k] = self.version
        if self.compiled:
            self._step_compiled(a, k)
        else:
            self._step_gym(a, k)
        self.n += 1
        self.sent += 1

    def _step_gym(self, a: np.ndarray, k: int) -> None:
        """The env step of :meth:`step` on a gymnasium env, its next-step autoreset
        done by hand (the reset row's transition fields are written here)."""
        b = self.buf
        if self.need_reset:
            # the reset row of next-step autoreset: no transition happens here
            b["rewards"][k] = 0.0
            b["terminated"][k] = False
            b["truncated"][k] = False
            b["valid"][k] = False
            obs, _ = self.env.reset()
            self.need_reset = False
        else:
            to_env = getattr(self.policy, "to_env", None)
            if to_env is not None:
                env_a = to_env(a[None])[0]
                env_a = int(env_a) if env_a.ndim == 0 else env_a
            else:
                env_a = env_action(self.env.action_space, a)
            obs, reward, terminated, truncated, _ = self.env.step(env_a)
            b["rewards"][k] = reward
            b["terminated"][k] = bool(terminated)
            b["truncated"][k] = bool(truncated)
            b["valid"][k] = True
            self.need_reset = bool(terminated or truncated)
        self.obs = np.asarray(obs, dtype=self.fdtype).reshape(self.spec.obs_shape)

    def _step_compiled(self, a: np.ndarray, k: int) -> None:
        """The env step of :meth:`step` on a compiled env: its next-step
        autoreset makes the reset row (reward 0, neither flag) itself."""
        to_env = getattr(self.policy, "to_env", None)
        if to_env is not None:
            env_a = to_env(a[None])
        else:
            env_a = np.asarray(env_action(self.env.single_action_space, a))[None]
        obs, reward, terminated, truncated, _ = self.env.step(env_a)
        b = self.buf
        b["rewards"][k] = reward[0]
        b["terminated"][k] = terminated[0]
        b["truncated"][k] = truncated[0]
        b["valid"][k] = not self.need_reset
        self.need_reset = bool(terminated[0] or truncated[0])
        self.obs = np.asarray(obs[0], dtype=self.fdtype)

    def collect(self, m: int) -> None:
        """Take ``m`` steps into the buffer (it must have room).

        On a compiled env with the package's ``ActorCritic`` this is one
        compiled call (:func:`fastppo.ppo.rollout.collect`, the trainer's fused
        rollout for one env); otherwise ``m`` calls of :meth:`step`. Both give
        the same rows bit for bit (``tests/test_actor_fused.py``).
        """
        if not self.fused:
            for _ in range(m):
                self.step()
            return
        from fastppo.ppo import rollout as R

        k, b, w = self.n, self.buf, self._wide
        carry = R.Carry(
            self.obs.astype(np.float64).reshape(1, -1),
            np.array([self.need_reset]),
            np.zeros(1, np.float64),  # episode returns: the learner counts them
            np.zeros(1, np.int64),
        )
        rows = R.Rows(
            w["obs"][:m], b["actions"][k : k + m], w["logp"][:m], w["values"][:m],
            w["rewards"][:m], b["terminated"][k : k + m], b["truncated"][k : k + m],
            b["valid"][k : k + m],
        )  # fmt: skip
        R.collect("run", self.policy, self.env, carry, rows, self.sample_seed, self.counter)
        for name, wide in w.items():
            b[name][k : k + m] = wide[:m]
        b["versions"][k : k + m] = self.version
        self.counter += m
        self.obs = carry.obs[0].astype(self.fdtype)
        self.need_reset = bool(carry.prev_done[0])
        self.n += m
        self.sent += m

    def take_chunk(self, copy: bool = True) -> Chunk:
        """Hand out the buffered steps and start a new chunk."""
        n = self.n
        data = {k: (v[:n].copy() if copy else v[:n]) for k, v in self.buf.items()}
        chunk = Chunk(self.actor_id, self.incarnation, self.next_index, data, self.obs.copy())
        self.next_index += n
        self.n = 0
        return chunk

    def close(self) -> None:
        try:
            self.env.close()
        except Exception:
            pass  # closing a broken env must not mask the error that broke it


class Link(Protocol):
    """How an actor loop talks to its learner (one per backend)."""

    def newest(self, have: int) -> Any | None:
        """The newest broadcast if its version is above ``have``, else None."""

    def wait_newer(self, have: int, timeout: float) -> None:
        """Block up to ``timeout`` s for a version above ``have`` or shutdown."""

    def send(self, chunk: Chunk) -> None:
        """Deliver a chunk; raise ShutdownRequested if stopping meanwhile."""

    def stopping(self) -> bool:
        """True once the learner asked the actor to stop."""


def actor_loop(
    core: ActorCore, link: Link, broadcast_every: int, num_steps: int, lead_steps: int
) -> None:
    """Step until shutdown, honouring the staleness valve.

    Before every step the actor loads the newest pending broadcast (older
    ones it missed are skipped, never replayed). When the valve closes it
    flushes its partial chunk, so the learner can finish the update that
    opens the valve again, and waits (in short, bounded waits) for a newer
    policy.
    """
    while not link.stopping():
        blob = link.newest(core.version)
        if blob is not None:
            core.load(blob)
        if core.version < 0:
            link.wait_newer(core.version, 0.1)
            continue
        allow = core.allowance(broadcast_every, num_steps, lead_steps)
        if allow == 0:
            if core.n:
                link.send(core.take_chunk())
            link.wait_newer(core.version, 0.1)
            continue
        core.collect(min(allow, core.capacity - core.n) if core.fused else 1)
        if core.n >= core.capacity:
            link.send(core.take_chunk())


@dataclass(frozen=True)
class DefaultPolicyFn:
    """Builds the package's ``ActorCritic`` from the ``PPOConfig`` settings.

    A module-level class (not a closure) so that it pickles by reference for
    the ``processes`` and ``ray`` backends.
    """

    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    seed: int = 0
    options: dict[str, Any] = field(default_factory=dict)
    dtype: str = "float32"

    def __call__(self, observation_space: Any, action_space: Any) -> Any:
        import gymnasium.spaces as sp

        from fastppo.nn.policy import ActorCritic

        # the Gaussian-head options mean nothing to (and are refused by) discrete heads
        options = self.options if isinstance(action_space, sp.Box) else {}
        return ActorCritic.from_spaces(
            observation_space,
            action_space,
            hidden_sizes=tuple(self.hidden_sizes),
            activation=self.activation,
            seed=self.seed,
            dtype=self.dtype,
            **options,
        )


def _is_actor_critic(policy: Any) -> bool:
    from fastppo.nn.policy import ActorCritic

    return isinstance(policy, ActorCritic)


@dataclass(frozen=True)
class CompiledEnvFn:
    """Makes one :mod:`fastppo.envs` compiled env (a picklable ``env_fn``).

    Its actors collect with the fused rollout. The actor resets it with its
    own seed, so the seed here only saves an OS entropy read.
    """

    env_id: str

    def __call__(self) -> Any:
        from fastppo import envs

        return envs.make_vec(self.env_id, 1, seed=0, autoreset_mode="next_step")


def make_env_fn(env: Any, env_backend: str = "compiled") -> EnvFn:
    """Accept an env id string or a zero-argument callable.

    An id :mod:`fastppo.envs` compiles makes that compiled env when
    ``env_backend`` is ``"compiled"`` (``PPOConfig.env_backend``), else
    ``gymnasium.make(id)``.
    """
    if isinstance(env, str):
        import gymnasium

        from fastppo import envs

        if envs.compiled_for(env, env_backend):
            return CompiledEnvFn(env)
        return functools.partial(gymnasium.make, env)
    if not callable(env):
        raise TypeError(f"run: env_fn must be a callable or a gymnasium id, got {env!r}")
    return env
