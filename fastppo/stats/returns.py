"""``ReturnNormalizer`` (VecNormalize's reward scaling), ``normalize_returns`` and
``denormalize_values``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fastppo._checks import (
    FLOATS,
    as_array,
    c_contiguous,
    check_finite,
    check_no_overlap,
    check_out,
    check_range,
    describe,
    fail,
    flag_array,
    flag_bytes,
    may_share_memory,
    ndarray_of,
    reported_as,
)
from fastppo.stats._common import (
    F32,
    F64,
    MAX_FEATURES,
    clip_value,
    cy,
    float_input,
)
from fastppo.stats.running import RunningMeanStd


def _flag_bytes(a: np.ndarray) -> np.ndarray | None:
    """The bytes the Cython step reads (nonzero = True), C-contiguous: bool and
    uint8 flags as they are (copied in C order if strided), float 0/1 flags
    converted (``_fast.flag_bytes``); None for anything else."""
    return flag_bytes(c_contiguous(a))


class ReturnNormalizer:
    """Per-env discounted-return reward scaling (Stable-Baselines3's VecNormalize).

    Parameters
    ----------
    n_envs : int >= 1
    gamma : float in [0, 1], default 0.99
    clip : float > 0 or None, default 10.0
    epsilon : float > 0, default 1e-8

    Notes
    -----
    Per step and env: ``R = gamma * R + r``; the ``R`` of the step's valid envs
    update the running statistics :attr:`rms` (one batch per step); then
    ``r' = clip(r / sqrt(var_R + epsilon), -clip, clip)``; and ``R = 0`` where
    the step terminated or truncated. Only the scale is used, not the mean, so
    the sign of a reward survives. This is VecNormalize's ``_update_reward`` /
    ``normalize_reward`` with exact moments instead of its ``count = 1e-4``
    prior. An invalid row (``valid`` False: next-step autoreset's reset row) is
    no transition: it leaves ``R`` and the statistics untouched (its output is
    still the scaled reward).

    References
    ----------
    Engstrom et al. (2020), "Implementation Matters in Deep Policy Gradients",
    arXiv 2005.12729 (reward scaling); Stable-Baselines3 ``VecNormalize``.
    """

    __slots__ = ("_clip", "_cy", "_gamma", "_n_envs", "_returns", "_rms")

    def __init__(
        self, n_envs: int, gamma: float = 0.99, clip: float | None = 10.0, epsilon: float = 1e-8
    ) -> None:
        fn = "ReturnNormalizer"
        if isinstance(n_envs, bool) or not isinstance(n_envs, (int, np.integer)):
            fail(fn, "n_envs", "an int", repr(n_envs), exc=TypeError)
        if not 1 <= n_envs <= MAX_FEATURES:
            fail(fn, "n_envs", f"in [1, {MAX_FEATURES}]", repr(n_envs))
        self._n_envs = int(n_envs)
        self._gamma = check_range(fn, "gamma", gamma, 0.0, 1.0)
        self._clip = clip_value(fn, clip)
        with reported_as(fn, {}):  # epsilon's errors name ReturnNormalizer
            self._rms = RunningMeanStd((), epsilon)
        self._returns = np.zeros(self._n_envs)
        # Cython holds views of the returns and the statistics (see normalize)
        self._cy = cy.ReturnScaler(self._returns, self._rms._mean, self._rms._var)

    @property
    def n_envs(self) -> int:
        return self._n_envs

    @property
    def rms(self) -> RunningMeanStd:
        """The running statistics of the discounted returns (shape ``()``)."""
        return self._rms

    @property
    def returns(self) -> np.ndarray:
        """The running discounted return per env, float64 [N] (a copy)."""
        return self._returns.copy()

    def normalize(
        self, rewards: Any, terminated: Any, truncated: Any, valid: Any = None, out: Any = None
    ) -> np.ndarray:
        """Scale one step ``[N]`` (or a ``[T, N]`` block, step by step) of rewards.

        Parameters
        ----------
        rewards : float32 or float64 array [N] or [T, N], finite
        terminated, truncated : bool/uint8/float-0-1 array like ``rewards``
        valid : flag array like ``rewards``, optional
        out : array like ``rewards``, optional

        Returns
        -------
        ndarray like ``rewards``: the scaled, clipped rewards.

        Raises ``ValueError``, with the state and ``out`` unchanged, when a
        discounted return of the block could reach 1e150 in magnitude
        (``RETURN_LIMIT``, checked from the rewards before any write): past it
        the variance of the returns could overflow float64.
        """
        fast = self._normalize_fast(rewards, terminated, truncated, valid, out)
        if fast is not None:
            return fast
        fn = "ReturnNormalizer.normalize"
        a = as_array(fn, "rewards", rewards)
        if a.dtype not in FLOATS:
            fail(fn, "rewards", "float32 or float64", f"dtype {a.dtype}", exc=TypeError)
        if a.ndim not in (1, 2) or a.shape[-1] != self._n_envs:
            fail(
                fn, "rewards", f"shape [{self._n_envs}] or [T, {self._n_envs}]", f"shape {a.shape}"
            )
        shape2 = (1, self._n_envs) if a.ndim == 1 else a.shape
        term = c_contiguous(flag_array(fn, "terminated", terminated, a.shape))
        trunc = c_contiguous(flag_array(fn, "truncated", truncated, a.shape))
        v = None
        if valid is not None:
            v = c_contiguous(flag_array(fn, "valid", valid, a.shape)).reshape(shape2)
        check_finite(fn, "rewards", a)
        o = None
        if out is not None:
            o = check_out(fn, "out", out, a.shape, a.dtype)
            given = {"rewards": a, "terminated": terminated, "truncated": truncated, "valid": valid}
            check_no_overlap(fn, (o,), given)
        res = o if o is not None else np.empty(a.shape, a.dtype)
        if a.size == 0:
            return res
        r2 = c_contiguous(a).reshape(shape2)
        direct = res.flags.c_contiguous
        o2 = res.reshape(shape2) if direct else np.empty(shape2, a.dtype)
        step = self._cy.step_f32 if a.dtype == np.float32 else self._cy.step_f64
        n = step(r2, term.reshape(shape2), trunc.reshape(shape2), v, o2, *self._step_args())
        if n == -2:
            fail(
                fn,
                "rewards",
                f"rewards whose discounted returns stay below {cy.RETURN_LIMIT:g} in magnitude "
                "(so their variance fits in float64)",
                "rewards that could take them past it; state and out are unchanged",
            )
        self._rms._count += n
        if not direct:
            np.copyto(res, o2.reshape(a.shape))
        return res

    def _step_args(self) -> tuple[float, float, float, float]:
        return (self._gamma, self._clip, self._rms._epsilon, float(self._rms._count))

    def _normalize_fast(
        self, rewards: Any, terminated: Any, truncated: Any, valid: Any, out: Any
    ) -> np.ndarray | None:
        """Per-step fast path: native float rewards and bool or uint8 flags, arrays
        or CPU tensors' views (``ndarray_of``), straight to Cython, copied in C
        order first where strided (a per-step call of 2 us had cost 8 us
        through the general path in each of these forms).

        The Cython buffers refuse a wrong dtype, layout or a read-only ``out``;
        it raises on mismatched shapes or overlap, and returns -1 (writing
        nothing) for a non-finite reward. Any refusal returns None and the
        general path raises the proper error.
        """
        if out is not None and type(out) is not np.ndarray:
            return None
        r, te0, tr0 = ndarray_of(rewards), ndarray_of(terminated), ndarray_of(truncated)
        v0 = None if valid is None else ndarray_of(valid)
        if r is None or te0 is None or tr0 is None or (valid is not None and v0 is None):
            return None
        # flags as bytes: bool and uint8 as they are, float 0/1 converted in C
        te, tr = _flag_bytes(te0), _flag_bytes(tr0)
        v = None if v0 is None else _flag_bytes(v0)
        if te is None or tr is None or (v0 is not None and v is None):
            return None
        given, used = (r, te0, tr0, v0), (c_contiguous(r), te, tr, v)
        # the Cython step tests out against what it reads; a copy hides the
        # caller's array, so out is tested against those here (the general
        # path then names the overlap)
        if out is not None and any(
            x is not None and y is not x and may_share_memory(out, x) for x, y in zip(given, used)
        ):
            return None
        rewards, terminated, truncated, valid = used
        dt = rewards.dtype
        if not (dt is F32 or dt is F64):
            return None
        if rewards.ndim == 1:
            step = self._cy.step1_f32 if dt is F32 else self._cy.step1_f64
        elif rewards.ndim == 2:
            step = self._cy.step_f32 if dt is F32 else self._cy.step_f64
        else:
            return None
        res = np.empty(rewards.shape, dt) if out is None else out
        try:
            # bool buffers pass as the uint8 the Cython step reads (same bytes)
            n = step(rewards, terminated, truncated, valid, res, *self._step_args())
        except (ValueError, TypeError, BufferError):
            return None
        if n < 0:
            return None
        self._rms._count += n
        return res

    def __reduce__(self) -> tuple[Any, ...]:
        return (ReturnNormalizer.from_state_dict, (self.state_dict(),))

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON-able state: hyperparameters, per-env returns, the statistics."""
        return {
            "n_envs": self._n_envs,
            "gamma": self._gamma,
            "clip": None if self._clip == 0.0 else self._clip,
            "returns": self._returns.tolist(),
            "rms": self._rms.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, d: Mapping[str, Any]) -> ReturnNormalizer:
        """Rebuild a :class:`ReturnNormalizer` from :meth:`state_dict` output."""
        fn = "ReturnNormalizer.from_state_dict"
        keys = ("n_envs", "gamma", "clip", "returns", "rms")
        if not isinstance(d, Mapping):
            fail(fn, "d", f"a mapping with keys {keys}", type(d).__name__, exc=TypeError)
        missing = [k for k in keys if k not in d]
        if missing:
            fail(fn, "d", f"a mapping with keys {keys}", f"one missing {missing}")
        rms = RunningMeanStd.from_state_dict(d["rms"])
        if rms.shape != ():
            fail(fn, "rms", "statistics of shape ()", f"shape {rms.shape}")
        # returns first: n_envs alone must not size an allocation
        ret = as_array(fn, "returns", d["returns"])
        if ret.dtype.kind not in "fi" or ret.shape != (d["n_envs"],):
            fail(fn, "returns", f"n_envs = {d['n_envs']!r} real numbers", describe(ret))
        rn = cls(d["n_envs"], d["gamma"], d["clip"], rms.epsilon)
        ret = ret.astype(np.float64)
        check_finite(fn, "returns", ret)
        # into the existing buffers: the Cython ReturnScaler holds views of them
        np.copyto(rn._returns, ret)
        rn._rms._load(fn, rms.count, rms._mean, rms._var)
        return rn


def normalize_returns(
    returns: Any,
    rms: RunningMeanStd,
    update: bool = True,
    clip: float | None = 5.0,
    out: Any = None,
    *,
    valid: Any = None,
) -> np.ndarray:
    """Persistent return normalisation for the value target.

    With ``update``, the returns (the rows ``valid`` keeps) first update
    ``rms``; then ``out = clip((returns - mean) / sqrt(var + epsilon), -clip,
    clip)``. The value head learns this target, and :func:`denormalize_values`
    maps its predictions back to return scale for GAE.

    Parameters
    ----------
    returns : float32 or float64 array [..., *rms.shape] (usually [T, N])
    rms : RunningMeanStd
    update : bool, default True
    clip : float > 0 or None, default 5.0
    out : array like ``returns``, optional
    valid : flag array of the leading dims, optional (keyword)

    Returns
    -------
    ndarray like ``returns``, in the memory order
    :meth:`RunningMeanStd.normalize` returns.

    Notes
    -----
    Validation (including ``out``) happens before ``rms`` changes, so a bad
    call leaves both the statistics and ``out`` untouched.
    """
    fn = "normalize_returns"
    if not isinstance(rms, RunningMeanStd):
        fail(fn, "rms", "a RunningMeanStd", type(rms).__name__, exc=TypeError)
    if not isinstance(update, (bool, np.bool_)):
        fail(fn, "update", "a bool", repr(update), exc=TypeError)
    a = float_input(fn, "returns", returns, rms.shape)
    c = clip_value(fn, clip)
    if out is not None:
        o = check_out(fn, "out", out, a.shape, a.dtype)
        check_no_overlap(fn, (o,), {"returns": a})
    if update:
        with reported_as(fn, {"batch": "returns"}):
            rms.update(a, valid)
    return rms._affine(fn, "returns", a, c, out, True)


def denormalize_values(values: Any, rms: RunningMeanStd, out: Any = None) -> np.ndarray:
    """``values * sqrt(var + epsilon) + mean``: value predictions back to return scale.

    Parameters
    ----------
    values : float32 or float64 array [..., *rms.shape]
    rms : RunningMeanStd
    out : array like ``values``, optional

    Returns
    -------
    ndarray like ``values``, in the memory order
    :meth:`RunningMeanStd.normalize` returns.
    """
    fn = "denormalize_values"
    if not isinstance(rms, RunningMeanStd):
        fail(fn, "rms", "a RunningMeanStd", type(rms).__name__, exc=TypeError)
    return rms._affine(fn, "values", values, 0.0, out, False)
