"""MLP actor-critic with discrete, multi-discrete and diagonal-Gaussian heads.

Two separate stacks (actor and critic, no shared trunk, as in CleanRL's PPO)
share ONE flat float32 (or float64) parameter vector ``params``; every layer is a view into
it, so an optimizer step, a checkpoint or a parameter broadcast is a single
contiguous array. Layout, in order: actor layers (``W [n_in, n_out]`` then
``b [n_out]`` each), the Gaussian ``log_std`` (continuous heads only), then
critic layers.

Two sides of the API:

* learner side (``step``, ``value``, ``evaluate``) takes network inputs: when the
  trainer normalises observations, it passes normalised ones;
* environment side (``act``) takes raw observations, applies ``obs_normalizer``
  when one is attached, and returns actions ready for ``env.step`` (rescaled or
  clipped to the Box bounds).

References
----------
Schulman et al., "Proximal Policy Optimization Algorithms", arXiv 1707.06347.
Huang et al., "The 37 Implementation Details of Proximal Policy Optimization",
ICLR Blog Track 2022 (initialisation gains, separate stacks, state-independent log_std).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastppo import _blas, sampling
from fastppo._checks import as_array, check_finite, fail, int_vector
from fastppo.kernels import mlp as K
from fastppo.nn.init import orthogonal
from fastppo.nn.layout import (
    MAX_PARAMS,
    MAX_WIDTH,
    bounds,
    check_dtype,
    check_hidden,
    layer_layout,
    layer_views,
    param_count,
)

ACTIVATIONS = {"tanh": K.ACT_TANH, "relu": K.ACT_RELU}
KINDS = ("discrete", "multi_discrete", "continuous")


def spec_dtype(spec: dict[str, Any]) -> np.dtype:
    """The parameter dtype a policy spec names (float64 when it names none: older files)."""
    return np.dtype(check_dtype("ActorCritic.from_spec", spec.get("dtype", "float64")))


class ActorCritic:
    """Actor and critic MLPs over a flat float32 (or float64) parameter vector.

    Parameters
    ----------
    obs_shape : tuple of int
        Observation shape; observations are flattened to ``D = prod(obs_shape)``.
    kind : {"discrete", "multi_discrete", "continuous"}
        Action head.
    nvec : sequence of int, optional
        Category counts: ``[n]`` for ``discrete``, one per dimension for
        ``multi_discrete``.
    action_dim : int, optional
        Number of continuous action dimensions.
    action_low, action_high : array-like, optional
        Box bounds (continuous heads); ``act`` clips (or, with ``squash``, rescales)
        to them. Infinite bounds are allowed (no clipping on that dimension).
    action_start : array-like of int, optional
        Offset added to discrete actions for the env (gymnasium's ``start``).
    hidden_sizes : sequence of int
        Widths of the hidden layers of each stack (default ``(64, 64)``).
    activation : {"tanh", "relu"}
    seed : int
        Seeds the orthogonal initialisation and the ``act`` sampling stream.
    log_std_init : float
        Initial value of the state-independent log standard deviation.
    log_std_min, log_std_max : float
        Clamp applied to ``log_std`` in every forward pass (no gradient beyond).
    squash : bool
        Tanh-squash Gaussian samples (log-prob corrected); ``act`` then maps
        ``[-1, 1]`` affinely onto finite Box bounds.
    params : float array [n_params], optional
        Initial weights (copied; checked before anything is allocated), instead
        of the orthogonal initialisation.
    dtype : {"float32", "float64"}
        Precision of the weights, activations and gradients (default
        float32: GEMMs twice as fast, and what torch trains in); float64
        for gradient checks.

    The network must hold at most ``MAX_PARAMS`` (2**26) parameters, with
    observation, layer and head widths of at most ``MAX_WIDTH`` (65536) and at
    most ``MAX_LAYERS`` (16) hidden layers: these bound what a checkpoint can
    make the constructor allocate.

    Attributes
    ----------
    params : numpy.ndarray
        ``dtype`` ``[n_params]``, the only storage of every weight.
    actor_layers, critic_layers : list of (W, b)
        Views into ``params``; ``W`` is ``[n_in, n_out]``.
    log_std : numpy.ndarray or None
        View into ``params`` (continuous heads), unclamped.
    obs_normalizer : RunningMeanStd or None
        Applied by ``act`` only (the trainer attaches its own).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        kind: str,
        *,
        nvec: Sequence[int] | np.ndarray | None = None,
        action_dim: int | None = None,
        action_low: Any = None,
        action_high: Any = None,
        action_start: Any = None,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        seed: int = 0,
        log_std_init: float = 0.0,
        log_std_min: float = -20.0,
        log_std_max: float = 2.0,
        squash: bool = False,
        params: Any = None,
        dtype: str = "float32",
    ) -> None:
        fn = "ActorCritic"
        self.dtype = np.dtype(check_dtype(fn, dtype))
        self.obs_shape = tuple(
            int(s) for s in int_vector(fn, "obs_shape", obs_shape, 1, MAX_WIDTH, 0)
        )
        self.obs_dim = math.prod(self.obs_shape)
        if kind not in KINDS:
            fail(fn, "kind", f"one of {KINDS}", repr(kind))
        self.kind = kind
        self.hidden_sizes = check_hidden(fn, hidden_sizes)
        if activation not in ACTIVATIONS:
            fail(fn, "activation", f"one of {sorted(ACTIVATIONS)}", repr(activation))
        self.activation = activation
        self._act = ACTIVATIONS[activation]
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            fail(fn, "seed", "a non-negative int", repr(seed), exc=TypeError)
        self.seed = int(seed)
        self.squash = bool(squash)
        self.log_std_min = float(log_std_min)
        self.log_std_max = float(log_std_max)
        self.log_std_init = float(log_std_init)
        if kind == "continuous":
            if (
                isinstance(action_dim, bool)
                or not isinstance(action_dim, (int, np.integer))
                or not 1 <= action_dim <= MAX_WIDTH
            ):
                fail(fn, "action_dim", f"an int in [1, {MAX_WIDTH}]", repr(action_dim))
            self.action_dim = int(action_dim)
            n_out = self.action_dim
        else:
            if nvec is None:
                fail(fn, "nvec", "category counts for a discrete head", None)
            self.nvec = int_vector(fn, "nvec", nvec, 1, MAX_WIDTH)
            if kind == "discrete" and self.nvec.size != 1:
                fail(fn, "nvec", "[n] for a discrete head", list(self.nvec))
            self.action_dim = int(self.nvec.size)
            n_out = int(self.nvec.sum())
        # The size rule comes before any allocation: a spec read from a file
        # cannot make this constructor allocate more than MAX_PARAMS floats.
        sizes_a = [self.obs_dim, *self.hidden_sizes, n_out]
        sizes_c = [self.obs_dim, *self.hidden_sizes, 1]
        n_params = param_count(sizes_a, sizes_c, self.action_dim if kind == "continuous" else 0)
        if n_params > MAX_PARAMS:
            fail(
                fn,
                "the network",
                f"at most MAX_PARAMS = {MAX_PARAMS} parameters",
                f"{n_params} (obs_dim {self.obs_dim}, hidden_sizes {list(self.hidden_sizes)}, "
                f"{n_out} outputs)",
            )
        if kind == "continuous":
            if not (math.isfinite(self.log_std_min) and math.isfinite(self.log_std_max)):
                fail(fn, "log_std_min/log_std_max", "finite", (log_std_min, log_std_max))
            if self.log_std_min >= self.log_std_max:
                fail(fn, "log_std_min", f"< log_std_max ({log_std_max})", repr(log_std_min))
            if not self.log_std_min <= self.log_std_init <= self.log_std_max:
                fail(
                    fn,
                    "log_std_init",
                    f"in [{log_std_min}, {log_std_max}]",
                    repr(log_std_init),
                )
            lo = np.full(self.action_dim, -np.inf) if action_low is None else action_low
            hi = np.full(self.action_dim, np.inf) if action_high is None else action_high
            self.action_low = bounds(fn, "action_low", lo, self.action_dim)
            self.action_high = bounds(fn, "action_high", hi, self.action_dim)
            if np.any(self.action_low > self.action_high):
                fail(fn, "action_low", "<= action_high", self.action_low)
            if self.squash and not np.all(
                np.isfinite(self.action_low) & np.isfinite(self.action_high)
            ):
                fail(fn, "squash", "False when the action bounds are infinite", True)
            self.nvec = np.zeros(0, dtype=np.int64)
            self._head = K.HEAD_SQUASHED if self.squash else K.HEAD_GAUSSIAN
        else:
            self._head = K.HEAD_CATEGORICAL
            start = 0 if action_start is None else action_start
            try:
                self.action_start = np.broadcast_to(
                    np.asarray(start, dtype=np.int64), (self.nvec.size,)
                ).copy()
            except (TypeError, ValueError, OverflowError):
                fail(fn, "action_start", f"an int or {self.nvec.size} int64 values", repr(start))
        self.n_logits = n_out

        # Build the layouts: rows (n_in, n_out, w_offset, b_offset).
        off = 0
        self._a_layout, off = layer_layout(sizes_a, off)
        self._ls_off = off
        if kind == "continuous":
            off += self.action_dim
        self._c_layout, off = layer_layout(sizes_c, off)
        if params is not None and np.shape(params) != (off,):
            # before the allocation: a spec's size is only believed when the weights match it
            fail(fn, "params", f"shape ({off},) for this network", f"shape {np.shape(params)}")
        self.params = np.zeros(off, dtype=self.dtype)
        self._bind_views()
        if params is None:
            self._init_weights()
        else:
            self.set_params(params)
        self.obs_normalizer: Any = None
        self.obs_clip: float | None = 10.0
        self._act_counter = 0
        self._widths = max(max(sizes_a), max(sizes_c))
        # multiply-adds per row of the largest GEMM, for the BLAS thread hold
        self._widest = max(int(r[0] * r[1]) for r in (*self._a_layout, *self._c_layout))
        self._cap = 0
        self._grow(64)

    # construction -----------------------------------------------------------------------
    @classmethod
    def from_spaces(
        cls,
        observation_space: Any,
        action_space: Any,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        seed: int = 0,
        *,
        dtype: str = "float32",
        **head_options: Any,
    ) -> ActorCritic:
        """Build from gymnasium spaces (Box observations; Discrete, MultiDiscrete or Box actions).

        ``head_options``: ``log_std_init``, ``log_std_min``, ``log_std_max``, ``squash``
        (continuous heads only). Other spaces (Dict, Tuple, MultiBinary, ...) raise
        ``TypeError`` naming the space.
        """
        from gymnasium import spaces

        fn = "ActorCritic.from_spaces"
        allowed = {"log_std_init", "log_std_min", "log_std_max", "squash"}
        unknown = sorted(set(head_options) - allowed)
        if unknown:
            fail(fn, "head_options", f"keys among {sorted(allowed)}", unknown, exc=TypeError)
        if not isinstance(observation_space, spaces.Box):
            fail(
                fn,
                "observation_space",
                "a gymnasium Box (flatten Dict/Tuple observations with "
                "gymnasium.wrappers.FlattenObservation)",
                repr(observation_space),
                exc=TypeError,
            )
        common: dict[str, Any] = {
            "hidden_sizes": hidden_sizes,
            "activation": activation,
            "seed": seed,
            "dtype": dtype,
        }
        obs_shape = observation_space.shape
        if isinstance(action_space, spaces.Discrete):
            if head_options:
                fail(fn, "head_options", "empty for a Discrete action space", sorted(head_options))
            return cls(
                obs_shape,
                "discrete",
                nvec=[int(action_space.n)],
                action_start=int(action_space.start),
                **common,
            )
        if isinstance(action_space, spaces.MultiDiscrete):
            if head_options:
                fail(fn, "head_options", "empty for a MultiDiscrete space", sorted(head_options))
            if action_space.nvec.ndim != 1:
                fail(fn, "action_space", "a 1-D MultiDiscrete", repr(action_space), exc=TypeError)
            return cls(
                obs_shape,
                "multi_discrete",
                nvec=action_space.nvec,
                action_start=getattr(action_space, "start", 0),
                **common,
            )
        if isinstance(action_space, spaces.Box):
            if len(action_space.shape) != 1:
                fail(fn, "action_space", "a 1-D Box", repr(action_space), exc=TypeError)
            return cls(
                obs_shape,
                "continuous",
                action_dim=int(action_space.shape[0]),
                action_low=action_space.low,
                action_high=action_space.high,
                **common,
                **head_options,
            )
        fail(
            fn,
            "action_space",
            "Discrete, MultiDiscrete or a 1-D Box",
            repr(action_space),
            exc=TypeError,
        )

    def spec(self) -> dict[str, Any]:
        """JSON-serialisable constructor arguments (for checkpoints)."""
        d: dict[str, Any] = {
            "obs_shape": list(self.obs_shape),
            "kind": self.kind,
            "hidden_sizes": list(self.hidden_sizes),
            "activation": self.activation,
            "seed": self.seed,
            "dtype": self.dtype.name,
        }
        if self.kind == "continuous":
            d.update(
                action_dim=self.action_dim,
                action_low=[float(x) for x in self.action_low],
                action_high=[float(x) for x in self.action_high],
                log_std_init=self.log_std_init,
                log_std_min=self.log_std_min,
                log_std_max=self.log_std_max,
                squash=self.squash,
            )
        else:
            d.update(
                nvec=[int(x) for x in self.nvec], action_start=[int(x) for x in self.action_start]
            )
        return d

    @classmethod
    def from_spec(cls, spec: dict[str, Any], params: Any = None) -> ActorCritic:
        """Inverse of :meth:`spec`, with ``params`` (or freshly initialised weights).

        A spec without ``dtype`` (written before float32 training) is float64.
        """
        spec = dict(spec, dtype=spec_dtype(spec).name)
        return cls(spec.pop("obs_shape"), spec.pop("kind"), params=params, **spec)

    def _bind_views(self) -> None:
        p = self.params
        self.actor_layers = [layer_views(p, row) for row in self._a_layout]
        self.critic_layers = [layer_views(p, row) for row in self._c_layout]
        if self.kind == "continuous":
            self.log_std: np.ndarray | None = p[self._ls_off : self._ls_off + self.action_dim]
        else:
            self.log_std = None

    def _init_weights(self) -> None:
        # Gains from the PPO implementation-details literature: sqrt(2) hidden,
        # 0.01 on the policy output (near-uniform initial policy), 1.0 on the value.
        rng = np.random.default_rng(self.seed)
        for layers, out_gain in ((self.actor_layers, 0.01), (self.critic_layers, 1.0)):
            for i, (w, b) in enumerate(layers):
                gain = out_gain if i == len(layers) - 1 else math.sqrt(2.0)
                w[...] = orthogonal(w.shape[0], w.shape[1], gain, rng)
                b[...] = 0.0
        if self.log_std is not None:
            self.log_std[...] = self.log_std_init

    def _grow(self, nb: int) -> None:
        if nb <= self._cap:
            return
        cap = max(nb, 2 * self._cap)
        # Activation scratch: the gathered inputs, then every layer's outputs.
        sa = self.obs_dim + sum(int(r[1]) for r in self._a_layout)
        sc = self.obs_dim + sum(int(r[1]) for r in self._c_layout)
        self._idx = np.arange(cap, dtype=np.int64)
        self._ha = np.empty(cap * sa, dtype=self.dtype)
        self._hc = np.empty(cap * sc, dtype=self.dtype)
        self._dz = np.empty(cap * self._widths, dtype=self.dtype)
        self._dprev = np.empty(cap * self._widths, dtype=self.dtype)
        # Per-row float64 scratch of the PPO loss: log-probs, entropies, their gradients.
        self._rows = np.empty(3 * cap, dtype=np.float64)
        self._cap = cap

    # parameters -----------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        return int(self.params.shape[0])

    def get_params(self) -> np.ndarray:
        """A copy of the flat parameter vector."""
        return self.params.copy()

    def set_params(self, flat: Any) -> None:
        """Copy ``flat`` (float array of length ``n_params``, finite) into ``params`` in place."""
        fn = "ActorCritic.set_params"
        a = as_array(fn, "flat", flat)
        if a.dtype.kind != "f":
            fail(fn, "flat", "a float array", f"dtype {a.dtype}", exc=TypeError)
        if a.shape != self.params.shape:
            fail(fn, "flat", f"shape {self.params.shape}", f"shape {a.shape}")
        b = a.astype(self.dtype, copy=False)
        check_finite(fn, "flat", b)  # after the cast: 1e39 is no float32
        self.params[...] = b

    def clamped_log_std(self) -> np.ndarray:
        """``clip(log_std, log_std_min, log_std_max)`` as used by every forward pass."""
        if self.log_std is None:
            fail("ActorCritic.clamped_log_std", "kind", "continuous", repr(self.kind))
        return np.clip(self.log_std, self.log_std_min, self.log_std_max)

    # learner side ---------------------------------------------------------------------
    def obs_batch(self, fn: str, obs: Any) -> np.ndarray:
        """``obs`` as C-contiguous ``[N, D]`` in the policy's dtype (checked: shape, finite)."""
        a = as_array(fn, "obs", obs)
        if a.dtype.kind not in "fiu" or a.dtype == np.float16:
            fail(
                fn, "obs", "a float32/float64 (or integer) array", f"dtype {a.dtype}", exc=TypeError
            )
        shp = self.obs_shape
        if a.shape[1:] == shp and a.ndim == len(shp) + 1:
            n = a.shape[0]
        elif a.ndim == 2 and a.shape[1] == self.obs_dim:
            n = a.shape[0]
        else:
            fail(fn, "obs", f"shape [N, {', '.join(map(str, shp))}]", f"shape {a.shape}")
        out = np.ascontiguousarray(a.reshape(n, self.obs_dim), dtype=self.dtype)
        check_finite(fn, "obs", out)
        return out

    def head_outputs(self, obs: Any) -> np.ndarray:
        """Actor outputs: logits ``[N, sum(nvec)]`` or Gaussian means ``[N, A]`` (``dtype``)."""
        x = self.obs_batch("ActorCritic.head_outputs", obs)
        return self._forward(x, True, False)[0]

    def _forward(self, x: np.ndarray, want_a: bool, want_v: bool) -> tuple[np.ndarray, np.ndarray]:
        n = x.shape[0]
        self._grow(n)
        out_a = np.empty((n, self.n_logits), dtype=self.dtype)
        out_v = np.empty(n, dtype=self.dtype)
        _blas.call(
            n * self._widest,
            K.policy_forward,
            self.params, self._a_layout, self._c_layout, self._act, x, self._idx, n,
            self._ha, self._hc, want_a, want_v, out_a, out_v,
        )  # fmt: skip
        return out_a, out_v

    def step(
        self, obs: Any, *, seed: int, counter: int, env_offset: int = 0
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions for a rollout step.

        Parameters
        ----------
        obs : array-like
            ``[N, *obs_shape]`` network inputs (already normalised if the trainer
            normalises).
        seed, counter : int
            Counter-based randomness: row ``i`` draws from stream
            ``(seed, counter, env_offset + i)``; bump ``counter`` every step.
        env_offset : int
            First stream index of this slice of envs.

        Returns
        -------
        actions : numpy.ndarray
            int64 ``[N]`` (Discrete), int64 ``[N, k]`` (MultiDiscrete) or float32
            ``[N, A]`` (Box; before clipping, after tanh when squashed) -- what
            the rollout stores; ``to_env`` makes them env-ready.
        logp : numpy.ndarray
            float32 ``[N]``, log-probability of ``actions``.
        values : numpy.ndarray
            ``[N]`` of the policy's dtype, ``V(obs)``.
        """
        x = self.obs_batch("ActorCritic.step", obs)
        out, values = self._forward(x, True, True)
        # A squashed sampler's logp is already the density of the float32 action
        # it returns, as evaluate computes it (kernels.squash): the first PPO
        # epoch sees a ratio of 1 even for saturated actions.
        actions, logp = self._sample(out, seed, counter, env_offset, False)
        return actions, logp, values

    def _sample(
        self, out: np.ndarray, seed: int, counter: int, env_offset: int, deterministic: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        # no import and no keyword dict here: the N = 1 actor loop pays this every step
        if self.kind == "discrete":
            return sampling.sample_categorical(
                out, seed=seed, counter=counter, env_offset=env_offset, deterministic=deterministic
            )
        if self.kind == "multi_discrete":
            return sampling.sample_multi_categorical(
                out, self.nvec, seed=seed, counter=counter, env_offset=env_offset,
                deterministic=deterministic,
            )  # fmt: skip
        return sampling.sample_gaussian(
            out, self.clamped_log_std(), seed=seed, counter=counter, env_offset=env_offset,
            deterministic=deterministic, squash=self.squash,
        )  # fmt: skip

    def _mode(self, fn: str, logits: np.ndarray) -> np.ndarray:
        """A discrete head's mode: the first action of largest logit, as
        ``sample_categorical(deterministic=True)`` returns it (``tests/test_nn.py``),
        in numpy: an evaluation run (``fastppo train``'s last step) then compiles
        no sampler, and a call costs a few microseconds. The rows the sampler
        refuses (a NaN or +inf logit, or all -inf) raise its error."""
        top = logits.max(axis=1)
        if not np.isfinite(top).all():
            row = int(np.argmin(np.isfinite(top)))
            offs = np.array([0, logits.shape[1]], np.int64)
            sampling.categorical._bad_categorical(fn, logits, None, offs, row, 0)
        return logits.argmax(axis=1).astype(np.int64, copy=False)

    def value(self, obs: Any) -> np.ndarray:
        """``V(obs)``: ``[N]`` of the policy's dtype for network inputs ``[N, *obs_shape]``."""
        x = self.obs_batch("ActorCritic.value", obs)
        return self._forward(x, False, True)[1]

    def actions_batch(self, fn: str, actions: Any, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Validate stored actions; returns ``(act_i [n, k] int64, act_f [n, A] dtype)``."""
        a = as_array(fn, "actions", actions)
        if self.kind == "continuous":
            if a.dtype.kind != "f":
                fail(
                    fn,
                    "actions",
                    "float actions for a Box space",
                    f"dtype {a.dtype}",
                    exc=TypeError,
                )
            if a.shape not in ((n, self.action_dim),) and not (
                self.action_dim == 1 and a.shape == (n,)
            ):
                fail(fn, "actions", f"shape ({n}, {self.action_dim})", f"shape {a.shape}")
            af = np.ascontiguousarray(a.reshape(n, self.action_dim), dtype=self.dtype)
            check_finite(fn, "actions", af)
            return K.empty_int_actions(), af
        if a.dtype.kind not in "iu":
            fail(
                fn,
                "actions",
                "integer actions",
                f"dtype {a.dtype}",
                "use .astype(np.int64)",
                TypeError,
            )
        k = self.nvec.size
        want = (n,) if self.kind == "discrete" else (n, k)
        if a.shape != want and a.shape != (n, k):
            fail(fn, "actions", f"shape {want}", f"shape {a.shape}")
        ai = np.ascontiguousarray(a.reshape(n, k), dtype=np.int64)
        bad = (ai < 0) | (ai >= self.nvec[None, :])
        if bad.any():
            r, c = np.argwhere(bad)[0]
            fail(fn, "actions", f"in [0, {self.nvec[c]})", f"{ai[r, c]} at row {r}")
        return ai, np.zeros((1, 1), dtype=self.dtype)  # unused by discrete heads

    def evaluate(self, obs: Any, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Log-probs, entropies and values of stored ``actions`` (float64 ``[B]`` each).

        Notes
        -----
        Categorical: ``logp = sum_c (z_{c,a_c} - logsumexp z_c)``,
        ``H = -sum_c sum_i p_ci log p_ci``. Gaussian: ``logp = sum_d -z_d^2/2 - s_d -
        log(2 pi)/2`` with ``z = (a - mu)/exp(s)``; squashed heads evaluate at
        ``atanh(a)`` and subtract ``log(1 - a^2)``. The squashed head reports the
        pre-squash entropy.
        """
        fn = "ActorCritic.evaluate"
        x = self.obs_batch(fn, obs)
        n = x.shape[0]
        ai, af = self.actions_batch(fn, actions, n)
        self._grow(n)
        logp = np.empty(n, dtype=np.float64)
        ent = np.empty(n, dtype=np.float64)
        val = np.empty(n, dtype=np.float64)
        _blas.call(
            n * self._widest,
            K.policy_evaluate,
            self.params, self._a_layout, self._c_layout, self._act, self._head, self.nvec,
            self._ls_off, self.log_std_min, self.log_std_max, x, ai, af, self._idx, n,
            self._ha, self._hc, self._dz, logp, ent, val,
        )  # fmt: skip
        return logp, ent, val

    # environment side -----------------------------------------------------------------
    def to_env(self, actions: np.ndarray) -> np.ndarray:
        """Stored actions -> env actions: add Discrete ``start``; clip (or rescale) to Box bounds.

        The clip applies only to what the env sees; the stored action (and its
        log-prob) stay unclipped, so the PPO ratio is unbiased.
        """
        if self.kind == "discrete":
            return actions + self.action_start[0] if self.action_start[0] else actions
        if self.kind == "multi_discrete":
            return actions + self.action_start if np.any(self.action_start) else actions
        if self.squash:
            lo, hi = self.action_low, self.action_high
            return (lo + (actions.astype(np.float64) + 1.0) * 0.5 * (hi - lo)).astype(np.float32)
        return np.clip(actions, self.action_low, self.action_high).astype(np.float32)

    def act(
        self,
        obs: Any,
        deterministic: bool = False,
        *,
        seed: int | None = None,
        counter: int | None = None,
    ) -> np.ndarray:
        """Env-ready actions for raw observations (one ``obs_shape`` observation or a batch).

        Applies ``obs_normalizer`` (with ``obs_clip``) when attached. Stochastic
        calls draw from ``(seed, counter)``, by default ``self.seed`` and an
        internal counter bumped each call. ``deterministic=True`` takes the mode
        (argmax / Gaussian mean).
        """
        fn = "ActorCritic.act"
        a = as_array(fn, "obs", obs)
        single = a.shape == self.obs_shape
        x = self.obs_batch(fn, a[None] if single else a)
        if self.obs_normalizer is not None:
            x = np.ascontiguousarray(
                self.obs_normalizer.normalize(x, clip=self.obs_clip), self.dtype
            )
        out = self._forward(x, True, False)[0]
        if counter is None:
            counter = self._act_counter
            self._act_counter += 1
        if deterministic and self.kind == "discrete":
            actions = self._mode(fn, out)
        else:
            s = self.seed if seed is None else seed
            actions, _ = self._sample(out, s, counter, 0, deterministic)
        env_actions = self.to_env(actions)
        return env_actions[0] if single else env_actions
