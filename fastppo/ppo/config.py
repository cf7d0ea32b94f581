"""PPO hyperparameters (Stable-Baselines3 names) and their validation."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from fastppo._checks import check_range, fail
from fastppo.nn.layout import DTYPES

_FN = "PPOConfig"


@dataclass
class PPOConfig:
    """PPO hyperparameters; names follow Stable-Baselines3.

    Attributes
    ----------
    n_envs : int
        Parallel environments in the vector env.
    n_steps : int
        Steps per env per rollout; one update uses ``n_envs * n_steps`` samples.
    batch_size : int
        Minibatch size (SB3 meaning: samples per gradient step).
    n_epochs : int
        Passes over the rollout per update, reshuffled each epoch.
    gamma, gae_lambda : float
        Discount and GAE lambda (Schulman et al. 2015, arXiv 1506.02438).
    clip_range : float
        PPO ratio clip ``eps`` (arXiv 1707.06347); with ``anneal_clip`` it decays
        linearly to 0 over the run, on the learning rate's schedule.
    clip_range_vf : float or None
        Value clipping around the rollout values; ``None`` disables it.
    ent_coef, vf_coef : float
        Loss weights: ``loss = L_clip - ent_coef * H + vf_coef * L_vf``.
    max_grad_norm : float or None
        Global gradient-norm clip; ``None`` disables it.
    learning_rate : float
        Adam step size; with ``anneal_lr`` it decays linearly to 0 over the run.
    adam_eps : float
        Adam epsilon (1e-5 as in CleanRL).
    target_kl : float or None
        Stop the update's epochs when a minibatch's approximate KL exceeds
        ``1.5 * target_kl`` (SB3's rule); ``None`` disables it.
    normalize_advantage : bool
        Normalise advantages per minibatch.
    normalize_obs, normalize_reward : bool
        Running observation normalisation / discounted-return reward scaling.
    obs_clip, reward_clip : float
        Clips applied after normalisation.
    hidden_sizes : tuple of int
        Hidden widths of the actor and of the critic.
    activation : {"tanh", "relu"}
    dtype : {"float32", "float64"}
        Precision of the network's weights, activations and gradients
        (float32: twice the GEMM rate; float64 for gradient checks).
    log_std_init, log_std_min, log_std_max : float
        Gaussian heads: initial log std and its clamp.
    squash : bool
        Gaussian heads: tanh-squash actions onto the Box bounds.
    env_backend : {"compiled", "gymnasium"}
        ``"compiled"``: for an env id that :mod:`fastppo.envs` compiles (the
        classic-control ids, no ``env_kwargs``), step its compiled,
        gymnasium-identical vector env; any other env runs on gymnasium.
        ``"gymnasium"``: always gymnasium's own envs.
    vectorization : {"sync", "async"}
        gymnasium vector env type (gymnasium envs only).
    seed : int
        Seeds weights, env resets, minibatch shuffles and action sampling.
    """

    n_envs: int = 8
    n_steps: int = 256
    batch_size: int = 64
    n_epochs: int = 10
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_range: float = 0.2
    clip_range_vf: float | None = None
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float | None = 0.5
    learning_rate: float = 3e-4
    adam_eps: float = 1e-5
    anneal_lr: bool = True
    anneal_clip: bool = False
    target_kl: float | None = None
    normalize_advantage: bool = True
    normalize_obs: bool = False
    normalize_reward: bool = False
    obs_clip: float = 10.0
    reward_clip: float = 10.0
    hidden_sizes: tuple[int, ...] = field(default_factory=lambda: (64, 64))
    activation: str = "tanh"
    dtype: str = "float32"
    log_std_init: float = 0.0
    log_std_min: float = -20.0
    log_std_max: float = 2.0
    squash: bool = False
    env_backend: str = "compiled"
    vectorization: str = "sync"
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.hidden_sizes, list):
            self.hidden_sizes = tuple(self.hidden_sizes)

    @property
    def rollout_size(self) -> int:
        """Samples per update: ``n_envs * n_steps``."""
        return self.n_envs * self.n_steps

    def validate(self) -> PPOConfig:
        """Raise ``TypeError``/``ValueError`` (house format) for any bad field; returns self."""
        for name in ("n_envs", "n_steps", "batch_size", "n_epochs", "seed"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                fail(_FN, name, "an int", repr(v), exc=TypeError)
            lo = 0 if name == "seed" else 1
            if v < lo:
                fail(_FN, name, f">= {lo}", repr(v))
        if self.batch_size > self.rollout_size:
            fail(
                _FN,
                "batch_size",
                f"<= n_envs * n_steps = {self.rollout_size}",
                repr(self.batch_size),
            )
        _real(self, "gamma", 0.0, 1.0)
        _real(self, "gae_lambda", 0.0, 1.0)
        _real(self, "clip_range", 0.0, math.inf, lo_open=True)
        _real(self, "clip_range_vf", 0.0, math.inf, lo_open=True, optional=True)
        _real(self, "ent_coef", 0.0, math.inf)
        _real(self, "vf_coef", 0.0, math.inf)
        _real(self, "max_grad_norm", 0.0, math.inf, lo_open=True, optional=True)
        _real(self, "learning_rate", 0.0, math.inf, lo_open=True)
        _real(self, "adam_eps", 0.0, math.inf, lo_open=True)
        _real(self, "target_kl", 0.0, math.inf, lo_open=True, optional=True)
        _real(self, "obs_clip", 0.0, math.inf, lo_open=True)
        _real(self, "reward_clip", 0.0, math.inf, lo_open=True)
        _real(self, "log_std_init", -math.inf, math.inf)
        _real(self, "log_std_min", -math.inf, math.inf)
        _real(self, "log_std_max", -math.inf, math.inf)
        if not self.log_std_min < self.log_std_max:
            fail(_FN, "log_std_min", f"< log_std_max ({self.log_std_max})", repr(self.log_std_min))
        if not self.log_std_min <= self.log_std_init <= self.log_std_max:
            fail(
                _FN,
                "log_std_init",
                f"in [{self.log_std_min}, {self.log_std_max}]",
                repr(self.log_std_init),
            )
        for name in (
            "anneal_lr",
            "anneal_clip",
            "normalize_advantage",
            "normalize_obs",
            "normalize_reward",
            "squash",
        ):
            v = getattr(self, name)
            if not isinstance(v, bool):
                fail(_FN, name, "a bool", repr(v), exc=TypeError)
        hs = self.hidden_sizes
        if not isinstance(hs, tuple) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hs
        ):
            fail(_FN, "hidden_sizes", "a tuple of positive ints", repr(hs))
        if self.activation not in ("tanh", "relu"):
            fail(_FN, "activation", "'tanh' or 'relu'", repr(self.activation))
        if self.dtype not in DTYPES:
            fail(_FN, "dtype", f"one of {DTYPES}", repr(self.dtype))
        if self.env_backend not in ("compiled", "gymnasium"):
            fail(_FN, "env_backend", "'compiled' or 'gymnasium'", repr(self.env_backend))
        if self.vectorization not in ("sync", "async"):
            fail(_FN, "vectorization", "'sync' or 'async'", repr(self.vectorization))
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable field values."""
        d = dataclasses.asdict(self)
        d["hidden_sizes"] = list(self.hidden_sizes)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PPOConfig:
        """Build from a mapping; unknown keys raise ``ValueError`` naming them."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            fail(_FN, "keys", f"PPOConfig field names ({', '.join(sorted(names))})", unknown)
        return cls(**d).validate()

    def replace(self, **changes: Any) -> PPOConfig:
        """A validated copy with ``changes`` applied."""
        return PPOConfig.from_dict({**self.to_dict(), **changes})


def _real(
    cfg: PPOConfig,
    name: str,
    lo: float,
    hi: float,
    lo_open: bool = False,
    optional: bool = False,
) -> None:
    """A real field in the interval (``_checks.check_range``), or None when ``optional``."""
    v = getattr(cfg, name)
    if v is None and optional:
        return
    if optional and (isinstance(v, bool) or not isinstance(v, (int, float))):
        fail(_FN, name, "a real number or None", repr(v), exc=TypeError)
    check_range(_FN, name, v, lo, hi, lo_open)
