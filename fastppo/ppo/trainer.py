"""``PPOTrainer``: rollouts on gymnasium vector envs, GAE, the PPO update, checkpoints.

Rollouts run under gymnasium's default next-step autoreset: after a step that
ends an episode, the next ``env.step`` ignores its action and returns the reset
observation with reward 0. That step's row is no transition; it is stored with
``valid = False`` and left out of GAE, every loss and every running statistic.
The row still holds the episode's final observation and ``V(final obs)``, which
is exactly the bootstrap value a truncated episode needs (API.md, ``gae``).
"""

from __future__ import annotations

import functools
import json
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fastppo._checks import fail
from fastppo.nn.optim import Adam
from fastppo.nn.policy import ActorCritic
from fastppo.ppo.buffer import RolloutBuffer
from fastppo.ppo.config import PPOConfig
from fastppo.ppo.update import ppo_update

EnvSpec = str | Callable[[], Any]


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    return gym.make(env_id, **env_kwargs)


class PPOTrainer:
    """Proximal Policy Optimization with the torch-free MLP actor-critic.

    Parameters
    ----------
    env : str or callable
        A gymnasium env id (``"CartPole-v1"``) or a zero-argument factory returning
        a fresh ``gymnasium.Env``.
    config : PPOConfig, optional
        Hyperparameters (validated here).
    env_kwargs : dict, optional
        Passed to ``gymnasium.make`` when ``env`` is an id.

    Attributes
    ----------
    policy : ActorCritic
        ``policy.act(obs, deterministic=True)`` gives env-ready actions for raw obs.
    optimizer : Adam
    num_timesteps : int
        Env steps collected so far (``n_envs`` per vector step, reset rows included).
    n_updates : int
    history : list of dict
        One metrics record per update (CleanRL names plus ``global_step``, ``time``).
    episodes : list of (int, float, int)
        ``(global_step, return, length)`` of every finished training episode
        (undiscounted, unnormalised rewards).

    Notes
    -----
    Determinism: weights, env resets, minibatch order and actions all derive
    from ``config.seed``; the same seed gives the same losses on a re-run
    (same machine and library versions). Actions use the counter-based sampler
    keyed by ``(seed, counter, env)``.

    References
    ----------
    Schulman et al., "Proximal Policy Optimization Algorithms", arXiv 1707.06347.
    Schulman et al., "High-Dimensional Continuous Control Using Generalized
    Advantage Estimation", arXiv 1506.02438.
    """

    def __init__(
        self,
        env: EnvSpec,
        config: PPOConfig | None = None,
        *,
        env_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._init_env("PPOTrainer", env, PPOConfig() if config is None else config, env_kwargs)
        cfg = self.config
        envs = self._make_vec()
        try:
            policy = self._policy_for(envs)
        except Exception:
            envs.close()
            raise
        optimizer = Adam(policy.n_params, cfg.learning_rate, eps=cfg.adam_eps, dtype=policy.dtype)
        obs_rms = ret_norm = None
        if cfg.normalize_obs:
            from fastppo.stats import RunningMeanStd

            obs_rms = RunningMeanStd(shape=(policy.obs_dim,))
        if cfg.normalize_reward:
            from fastppo.stats import ReturnNormalizer

            ret_norm = ReturnNormalizer(cfg.n_envs, gamma=cfg.gamma, clip=cfg.reward_clip)
        self._setup(policy, optimizer, obs_rms, ret_norm, envs)

    def _setup(
        self, policy: ActorCritic, optimizer: Adam, obs_rms: Any, ret_norm: Any, envs: Any
    ) -> None:
        """Everything but the env: shared by a fresh trainer and one loaded from a file."""
        cfg = self.config
        self.policy = policy
        self.optimizer = optimizer
        self.obs_rms = obs_rms
        self.ret_norm = ret_norm
        if obs_rms is not None:
            policy.obs_normalizer = obs_rms
            policy.obs_clip = cfg.obs_clip
        self._envs = envs
        #: The env id a loaded checkpoint was trained on (None for a fresh trainer).
        self.checkpoint_env_id: str | None = None
        # Independent streams for minibatch shuffling and action sampling, both
        # derived from the one seed (weights use default_rng(seed) in the policy).
        self.rng = np.random.default_rng([cfg.seed, 0x5EED])
        self.sample_seed = int(np.random.SeedSequence([cfg.seed, 0xAC7]).generate_state(1)[0])
        self.counter = 0
        self.num_timesteps = 0
        self.n_updates = 0
        self.history: list[dict[str, Any]] = []
        self.episodes: list[tuple[int, float, int]] = []
        # The rollout buffer and the per-env state are made by the first rollout:
        # a trainer loaded only to act or evaluate never allocates them.
        self.buffer: RolloutBuffer | None = None
        self._obs: np.ndarray | None = None
        self._train_time = 0.0
        self._resets = 0
        #: Collect with one compiled call per rollout (``fastppo.ppo.rollout``) when
        #: the env is compiled; False takes the step-by-step path (the same bits).
        self.fused_rollout = True

    @classmethod
    def _restore(
        cls,
        env: EnvSpec,
        config: PPOConfig,
        policy: ActorCritic,
        optimizer: Adam,
        env_kwargs: dict[str, Any],
        obs_rms: Any,
        ret_norm: Any,
    ) -> PPOTrainer:
        """A trainer around restored parts; its envs are made when first needed."""
        fn = "PPOTrainer.load"
        self = cls.__new__(cls)
        self._init_env(fn, env, config, env_kwargs)
        if obs_rms is not None and obs_rms.shape != (policy.obs_dim,):
            fail(fn, "obs_rms", f"shape ({policy.obs_dim},) like the policy", obs_rms.shape)
        if ret_norm is not None and ret_norm.n_envs != config.n_envs:
            fail(fn, "ret_norm", f"n_envs = {config.n_envs} like the config", ret_norm.n_envs)
        self._setup(policy, optimizer, obs_rms, ret_norm, None)
        return self

    def _init_env(self, fn: str, env: EnvSpec, config: Any, env_kwargs: Any) -> None:
        if not isinstance(config, PPOConfig):
            fail(fn, "config", "a PPOConfig", type(config).__name__, exc=TypeError)
        self.config = config.validate()
        self.env_kwargs = dict(env_kwargs or {})
        if isinstance(env, str):
            self.env_id: str | None = env
            self._env_fn: Callable[[], Any] = functools.partial(_make_env, env, self.env_kwargs)
        elif callable(env):
            self.env_id = None
            self._env_fn = env
        else:
            fail(fn, "env", "a gymnasium env id or an env factory", repr(env), exc=TypeError)

    def _policy_for(self, envs: Any) -> ActorCritic:
        """A fresh policy for the spaces of ``envs`` and this config."""
        cfg = self.config
        act_space = envs.single_action_space
        from gymnasium import spaces

        head: dict[str, Any] = {}
        if isinstance(act_space, spaces.Box):
            head = {
                "log_std_init": cfg.log_std_init,
                "log_std_min": cfg.log_std_min,
                "log_std_max": cfg.log_std_max,
                "squash": cfg.squash,
            }
        return ActorCritic.from_spaces(
            envs.single_observation_space, act_space, cfg.hidden_sizes, cfg.activation, cfg.seed,
            dtype=cfg.dtype, **head,
        )  # fmt: skip

    @property
    def envs(self) -> Any:
        """The vector env; a loaded trainer makes it here, on first use."""
        if self._envs is None:
            envs = self._make_vec()
            try:
                spec = self._policy_for(envs).spec()
                if spec != self.policy.spec():
                    fail(
                        "PPOTrainer",
                        "env",
                        f"spaces matching the checkpoint's policy {self.policy.spec()}",
                        spec,
                    )
            except Exception:
                envs.close()
                raise
            self._envs = envs
        return self._envs

    # environments ---------------------------------------------------------------------
    @property
    def compiled_env(self) -> bool:
        """True when rollouts step :mod:`fastppo.envs`' compiled vector env (see
        ``PPOConfig.env_backend``), False for gymnasium's."""
        from fastppo import envs

        return envs.compiled_for(self.env_id, self.config.env_backend, self.env_kwargs)

    def env_description(self) -> str:
        """What the rollouts step, in words (the CLI's first line)."""
        if self.compiled_env:
            return f"{self.env_id}, fastppo compiled, gymnasium-identical dynamics"
        kind = "AsyncVectorEnv" if self.config.vectorization == "async" else "SyncVectorEnv"
        return f"{self.env_id or 'custom env'}, gymnasium {kind}"

    def _make_vec(self) -> Any:
        import gymnasium as gym

        if self.compiled_env:
            from fastppo import envs

            assert self.env_id is not None
            return envs.make_vec(self.env_id, self.config.n_envs, autoreset_mode="next_step")
        fns = [self._env_fn] * self.config.n_envs
        mode = gym.vector.AutoresetMode.NEXT_STEP
        if self.config.vectorization == "async":
            return gym.vector.AsyncVectorEnv(fns, autoreset_mode=mode)
        return gym.vector.SyncVectorEnv(fns, autoreset_mode=mode)

    def _reset(self) -> None:
        # A resumed run reseeds from (seed, number of resets): env state cannot be
        # checkpointed, but the restart is still reproducible.
        seed = self.config.seed + 1_000_003 * self._resets
        obs, _ = self.envs.reset(seed=seed)
        self._resets += 1
        self._obs = self._flat_obs(obs)
        n = self.config.n_envs
        self._prev_done = np.zeros(n, dtype=np.bool_)
        self._ep_ret = np.zeros(n, dtype=np.float64)
        self._ep_len = np.zeros(n, dtype=np.int64)
        if self.ret_norm is not None and self._resets > 1:
            # Fresh episodes: the running discounted returns restart at 0, the
            # statistics (the reward scale learnt so far) are kept.
            from fastppo.stats import ReturnNormalizer

            state = self.ret_norm.state_dict()
            state["returns"] = [0.0] * self.config.n_envs
            self.ret_norm = ReturnNormalizer.from_state_dict(state)

    def _new_buffer(self) -> RolloutBuffer:
        a_shape: tuple[int, ...]
        a_dtype: type[np.generic]
        if self.policy.kind == "discrete":
            a_shape, a_dtype = (), np.int64
        elif self.policy.kind == "multi_discrete":
            a_shape, a_dtype = (self.policy.action_dim,), np.int64
        else:
            a_shape, a_dtype = (self.policy.action_dim,), np.float32
        cfg = self.config
        return RolloutBuffer(cfg.n_steps, cfg.n_envs, self.policy.obs_dim, a_shape, a_dtype)

    def _flat_obs(self, obs: Any) -> np.ndarray:
        return np.asarray(obs, dtype=np.float64).reshape(self.config.n_envs, self.policy.obs_dim)

    def _net_input(self, obs: np.ndarray) -> np.ndarray:
        if self.obs_rms is None:
            return obs
        return np.asarray(self.obs_rms.normalize(obs, clip=self.config.obs_clip), dtype=np.float64)

    # rollout --------------------------------------------------------------------------
    def collect_rollout(self) -> None:
        """Fill the buffer with ``n_steps`` vector steps, then compute GAE advantages."""
        from fastppo.advantages import gae

        cfg = self.config
        if self.buffer is None:
            self.buffer = self._new_buffer()
        buf = self.buffer
        policy = self.policy
        if self._obs is None:
            self._reset()
        obs = self._obs
        assert obs is not None
        if self.fused_rollout and self.compiled_env:
            obs = self._collect_fused(buf, np.array(obs, dtype=np.float64, order="C"))
        else:
            obs = self._collect_steps(buf, obs)
        self._obs = obs
        self.num_timesteps += cfg.n_steps * cfg.n_envs
        last_values = policy.value(self._net_input(obs)).astype(np.float64)  # the buffer's dtype
        gae(
            buf.rewards, buf.values, last_values, buf.terminated, buf.truncated,
            valid=buf.valid, gamma=cfg.gamma, gae_lambda=cfg.gae_lambda,
            out=(buf.advantages, buf.returns),
        )  # fmt: skip

    def _collect_steps(self, buf: RolloutBuffer, obs: np.ndarray) -> np.ndarray:
        """``n_steps`` vector steps, one Python iteration each; returns the last obs."""
        cfg = self.config
        policy = self.policy
        for t in range(cfg.n_steps):
            valid = ~self._prev_done
            if self.obs_rms is not None and valid.any():
                self.obs_rms.update(obs, valid=valid)
            x = self._net_input(obs)
            buf.obs[t] = x
            actions, logp, values = policy.step(x, seed=self.sample_seed, counter=self.counter)
            self.counter += 1
            buf.actions[t] = actions
            buf.logp[t] = logp
            buf.values[t] = values
            next_obs, reward, term, trunc, _ = self.envs.step(policy.to_env(actions))
            reward = np.asarray(reward, dtype=np.float64)
            term = np.asarray(term, dtype=np.bool_)
            trunc = np.asarray(trunc, dtype=np.bool_)
            self._ep_ret += reward
            self._ep_len += valid
            done = (term | trunc) & valid
            if done.any():
                step = self.num_timesteps + (t + 1) * cfg.n_envs
                for i in np.flatnonzero(done):
                    self.episodes.append((step, float(self._ep_ret[i]), int(self._ep_len[i])))
                self._ep_ret[done] = 0.0
                self._ep_len[done] = 0
            if self.ret_norm is not None:
                reward = np.asarray(
                    self.ret_norm.normalize(reward, term, trunc, valid=valid), dtype=np.float64
                )
            buf.rewards[t] = reward
            buf.terminated[t] = term
            buf.truncated[t] = trunc
            buf.valid[t] = valid
            self._prev_done = term | trunc
            obs = self._flat_obs(next_obs)
        return obs

    def _collect_fused(self, buf: RolloutBuffer, obs: np.ndarray) -> np.ndarray:
        """The same rollout as :meth:`_collect_steps` in one compiled call
        (:func:`fastppo.ppo.rollout.collect`); returns the last obs."""
        from fastppo.ppo import rollout as R

        cfg = self.config
        n, rows = cfg.n_envs, cfg.n_steps * cfg.n_envs
        flat = R.Rows(
            buf.obs.reshape(rows, -1), buf.actions.reshape(rows, *buf.actions.shape[2:]),
            *(getattr(buf, k).reshape(rows) for k in R.Rows._fields[2:]),
        )  # fmt: skip
        carry = R.Carry(obs, self._prev_done, self._ep_ret, self._ep_len)
        episodes = R.collect(
            "PPOTrainer.collect_rollout", self.policy, self.envs, carry, flat,
            self.sample_seed, self.counter, self.obs_rms, cfg.obs_clip, self.ret_norm,
        )  # fmt: skip
        for t, ret, length in episodes:
            step = self.num_timesteps + (int(t) + 1) * n
            self.episodes.append((step, float(ret), int(length)))
        self.counter += cfg.n_steps
        return obs

    # training -------------------------------------------------------------------------
    def learn(
        self,
        total_timesteps: int,
        callback: Callable[[dict[str, Any]], Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Train until ``num_timesteps >= total_timesteps``.

        ``total_timesteps`` is an absolute target, so a resumed trainer continues
        where it stopped and anneals the learning rate on the same schedule:
        ``lr = learning_rate * (1 - num_timesteps / total_timesteps)`` at the start
        of each update (CleanRL's linear annealing), and with ``anneal_clip`` the
        clip range likewise (SB3's ``clip_range: lin_0.2``).

        Parameters
        ----------
        total_timesteps : int
        callback : callable, optional
            Called with each update's metrics record; returning ``False`` stops.

        Returns
        -------
        list of dict
            The records of this call (also appended to ``history``).
        """
        fn = "PPOTrainer.learn"
        if isinstance(total_timesteps, bool) or not isinstance(total_timesteps, (int, np.integer)):
            fail(fn, "total_timesteps", "an int", repr(total_timesteps), exc=TypeError)
        if total_timesteps < 1:
            fail(fn, "total_timesteps", ">= 1", repr(total_timesteps))
        cfg = self.config
        records: list[dict[str, Any]] = []
        start_steps = self.num_timesteps
        t_start = time.perf_counter()
        while self.num_timesteps < total_timesteps:
            t0 = time.perf_counter()
            frac = 1.0 - self.num_timesteps / total_timesteps
            lr = cfg.learning_rate * (frac if cfg.anneal_lr else 1.0)
            clip = cfg.clip_range * (frac if cfg.anneal_clip else 1.0)
            n_ep_before = len(self.episodes)
            self.collect_rollout()
            t1 = time.perf_counter()
            assert self.buffer is not None  # made by collect_rollout
            metrics = ppo_update(
                self.policy,
                self.optimizer,
                self.buffer.batch(),
                cfg,
                self.rng,
                lr=lr,
                clip_range=clip,
            )
            t2 = time.perf_counter()
            self.n_updates += 1
            self._train_time += t2 - t0
            new_eps = self.episodes[n_ep_before:]
            rec: dict[str, Any] = {
                "global_step": self.num_timesteps,
                "update": self.n_updates,
                **{k: float(v) for k, v in metrics.items()},
                "charts/SPS": (self.num_timesteps - start_steps) / (t2 - t_start),
                "charts/episodic_return": (
                    float(np.mean([e[1] for e in new_eps])) if new_eps else math.nan
                ),
                "charts/episodic_length": (
                    float(np.mean([e[2] for e in new_eps])) if new_eps else math.nan
                ),
                "charts/episodes": len(new_eps),
                "time/rollout_s": t1 - t0,
                "time/update_s": t2 - t1,
                "time/total_s": self._train_time,
            }
            self.history.append(rec)
            records.append(rec)
            if callback is not None and callback(rec) is False:
                break
        return records

    def recent_return(self, n: int = 20) -> float:
        """Mean return of the last ``n`` finished training episodes (NaN if none)."""
        eps = self.episodes[-n:]
        return float(np.mean([e[1] for e in eps])) if eps else math.nan

    def evaluate(
        self, n_episodes: int = 10, deterministic: bool = True, seed: int | None = None
    ) -> dict[str, float]:
        """Run ``n_episodes`` on a fresh env with ``policy.act``; returns return/length stats.

        Uses the frozen observation statistics; rewards are the env's raw rewards.
        """
        fn = "PPOTrainer.evaluate"
        if isinstance(n_episodes, bool) or not isinstance(n_episodes, (int, np.integer)):
            fail(fn, "n_episodes", "an int", repr(n_episodes), exc=TypeError)
        if n_episodes < 1:
            fail(fn, "n_episodes", ">= 1", repr(n_episodes))
        return evaluate_policy(
            self.policy,
            self._env_fn,
            n_episodes,
            deterministic=deterministic,
            seed=self.config.seed + 10_000 if seed is None else seed,
        )

    def close(self) -> None:
        """Close the vector env (worker processes for ``vectorization="async"``), if made."""
        if self._envs is not None:
            self._envs.close()
            self._envs = None

    def __enter__(self) -> PPOTrainer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # checkpoints ----------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write ``path/checkpoint.npz`` and ``path/checkpoint.json`` atomically (no pickle)."""
        from fastppo.ppo.checkpoint import save_trainer

        save_trainer(self, path)

    @classmethod
    def load(
        cls, path: str, env: EnvSpec | None = None, *, trust_env_id: bool = False
    ) -> PPOTrainer:
        """Rebuild a trainer from :meth:`save`: weights, Adam state, normalisers, counters.

        The files are data (threat model in docs/api.md): loading imports no
        module, makes no env and allocates no more than the files hold. The
        trainer makes its envs on first use (``learn``, ``evaluate``,
        ``envs``), from ``env`` when given, else from the checkpoint's env id.

        Parameters
        ----------
        path : str
            The checkpoint directory.
        env : str or callable, optional
            The env to train or evaluate on; needed when the run used an env
            factory rather than an id. Its spaces must match the checkpoint's policy.
        trust_env_id : bool
            Accept a checkpoint env id with a module part (``"pkg.mod:Env-v0"``),
            which ``gymnasium.make`` imports. Refused by default: a file must not
            choose code to run.

        Raises
        ------
        ValueError
            Any malformed, inconsistent or untrusted file, naming ``PPOTrainer.load``,
            the file and the problem.
        """
        from fastppo.ppo.checkpoint import load_trainer

        return load_trainer(cls, path, env, trust_env_id)

    def restore_state_json(self, st: dict[str, Any]) -> None:
        """Inverse of :meth:`state_json` (checked by the loader's error handling)."""
        counters = [st[k] for k in ("num_timesteps", "n_updates", "counter", "resets")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counters):
            fail("PPOTrainer.load", "trainer counters", "ints >= 0", counters)
        self.num_timesteps, self.n_updates, self.counter, self._resets = counters
        self._train_time = float(st["train_time"])
        self.rng.bit_generator.state = st["rng"]
        self.episodes = [(int(a), float(b), int(c)) for a, b, c in st["episodes"]]

    def state_json(self) -> dict[str, Any]:
        """Counters and RNG state for checkpoints (JSON-serialisable)."""
        return {
            "num_timesteps": self.num_timesteps,
            "n_updates": self.n_updates,
            "counter": self.counter,
            "resets": self._resets,
            "train_time": self._train_time,
            "rng": json.loads(json.dumps(self.rng.bit_generator.state)),
            "episodes": [list(e) for e in self.episodes],
        }


def evaluate_policy(
    policy: ActorCritic,
    env_fn: Callable[[], Any],
    n_episodes: int,
    *,
    deterministic: bool = True,
    seed: int = 0,
    max_steps: int = 1_000_000,
) -> dict[str, float]:
    """Mean/std/min/max of undiscounted returns over ``n_episodes`` of ``env_fn()``."""
    env = env_fn()
    returns: list[float] = []
    lengths: list[int] = []
    try:
        for k in range(n_episodes):
            obs, _ = env.reset(seed=seed + k)
            total, length, done = 0.0, 0, False
            while not done and length < max_steps:
                a = policy.act(obs, deterministic=deterministic, counter=length, seed=seed + k)
                obs, r, term, trunc, _ = env.step(a)
                total += float(r)
                length += 1
                done = bool(term or trunc)
            returns.append(total)
            lengths.append(length)
    finally:
        env.close()
    r = np.asarray(returns)
    return {
        "mean_return": float(r.mean()),
        "std_return": float(r.std()),
        "min_return": float(r.min()),
        "max_return": float(r.max()),
        "mean_length": float(np.mean(lengths)),
        "episodes": float(n_episodes),
    }
