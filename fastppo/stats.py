"""Running statistics: exact running mean/variance and PPO's reward/return scaling.

``RunningMeanStd`` keeps ``(count, mean, var)`` of everything it has seen, with
no prior: the count starts at 0 and is an exact Python int (it never overflows
and never rounds, however long a run lasts); ``mean``/``var`` are float64.
Updates fold a batch in with Chan et al.'s pairwise merge, so any split of the
data (or statistics merged from any split) gives ``np.mean``/``np.var`` of the
whole to rounding.

One implementation, in Cython (``fastppo._cy._stats``): ``Updater`` for
:meth:`RunningMeanStd.update` / ``normalize`` / ``denormalize`` and
``ReturnScaler`` for :meth:`ReturnNormalizer.normalize`. Per step (``[8, 4]``,
``[16, 17]`` observations, ``[16]`` rewards) the call is most of the cost; the
Cython objects hold the state's buffers and acquire only the batch's, so they
enter C sooner than a Numba dispatch types six to twelve arguments (update
``[8, 4]``: 0.9 vs 1.4 us; measured with ``fastppo bench --only rms``). From
``_dispatch.PARALLEL_MIN_STATS`` elements (2**20) a pass runs on
``numba.get_num_threads()`` OpenMP threads: blocks of rows get their moments
independently and are merged in block order, so the thread count changes no
bit of the result (``tests/test_stats.py``). Validation stays in this module;
per-step calls with plain native arrays take a fast path where the Cython
buffer checks stand in for it, and anything they refuse goes through the full
checks and their error messages.

References: Chan, Golub & LeVeque (1979/1983), "Updating formulae and a
pairwise algorithm for computing sample variances" / "Algorithms for computing
the sample variance: analysis and recommendations", The American Statistician
37(3); Welford (1962), Technometrics 4(3).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import (
    FLOATS,
    as_array,
    check_finite,
    check_no_overlap,
    check_out,
    check_range,
    describe,
    fail,
    flag_array,
    reported_as,
)
from fastppo._jit import num_threads

try:
    from fastppo._cy import _stats as _cy
except ImportError as e:  # pragma: no cover - exercised only on a broken install
    raise ImportError(
        "fastppo.stats needs the compiled extension fastppo._cy._stats, which is missing "
        "or stale; build it with `pip install -e .` (rerun after editing a .pyx)"
    ) from e

__all__ = ["ReturnNormalizer", "RunningMeanStd", "denormalize_values", "normalize_returns"]


# Builtin dtypes are singletons, so ``is`` is the cheapest exact test on the
# per-step fast paths (an equal but distinct dtype object takes the slow path).
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_BOOL = np.dtype(np.bool_)


# The most features (RunningMeanStd) or envs (ReturnNormalizer) a running state
# holds: its float64 arrays stay below 512 MiB each, and a size from a caller
# (or a state dict) cannot ask for terabytes.
MAX_FEATURES = 2**26


# A block of this many elements (32 KiB of float32, 64 KiB of float64) stays in
# L1/L2 between the two passes of the batch moments, so the second costs no
# memory traffic.
BLOCK_ELEMENTS = 8192
# Without a mask, ``rows_per_super`` consecutive rows are summed as one flat run
# of about this many elements into as many accumulators, then folded: a batch
# with few features (returns have one) still runs a long, vectorisable inner
# loop instead of a loop of length 1 per row.
SUPER_WIDTH = 64


def layout(n_features: int) -> tuple[int, int]:
    """``(rows_per_super, rows_per_block)`` of the batch moments for ``n_features`` columns.

    Depends on the feature count only, so every thread count cuts a batch the
    same way (and gives the same bits). ``rows_per_block`` is a multiple of
    ``rows_per_super``.
    """
    d = max(1, n_features)
    m = max(1, SUPER_WIDTH // d)
    return m, max(m, (BLOCK_ELEMENTS // d) // m * m)


def _threads(size: int) -> int:
    """Threads for a pass over ``size`` elements: one below the parallel threshold."""
    return 1 if size < _dispatch.PARALLEL_MIN_STATS else num_threads()


def _shape_tuple(fn: str, shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not all(
        isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in shape
    ):
        fail(fn, "shape", "a tuple of ints", repr(shape), exc=TypeError)
    out = tuple(int(s) for s in shape)
    if any(s < 0 for s in out):
        fail(fn, "shape", "non-negative sizes", repr(shape))
    if math.prod(out) > MAX_FEATURES:
        fail(fn, "shape", f"at most {MAX_FEATURES} features (2**26)", repr(shape)[:60])
    return out


def _float_input(fn: str, name: str, x: Any, shape: tuple[int, ...]) -> np.ndarray:
    """A float32/float64 array whose trailing dims are ``shape``."""
    a = as_array(fn, name, x)
    if a.dtype not in FLOATS:
        fix = "use .astype(np.float32)" if a.dtype.kind in "iubf" else None
        fail(fn, name, "float32 or float64", f"dtype {a.dtype}", fix, TypeError)
    k = len(shape)
    if a.ndim < k or a.shape[a.ndim - k :] != shape:
        want = f"[..., {', '.join(map(str, shape))}]" if shape else "[...] (any shape)"
        fail(fn, name, f"shape {want} with trailing dims {shape}", f"shape {a.shape}")
    return a


def _clip_value(fn: str, clip: Any) -> float:
    """``None`` -> 0.0 (the kernels' "no clipping"); otherwise a number > 0."""
    if clip is None:
        return 0.0
    return check_range(fn, "clip", clip, 0.0, math.inf, lo_open=True)


def _raise_nonfinite(fn: str, name: str, a: np.ndarray, rows: int, v: np.ndarray | None) -> None:
    """Name the first NaN/inf of the rows that counted (the kernel only said "some")."""
    flat = a.reshape(rows, -1)
    bad = ~np.isfinite(flat)
    if v is not None:
        bad &= v.astype(bool)[:, None]
    if bad.any():
        r, j = (int(i) for i in np.argwhere(bad)[0])
        idx = np.unravel_index(r * flat.shape[1] + j, a.shape)
        where = tuple(int(i) for i in idx)
        fail(
            fn,
            name,
            "finite",
            f"{float(flat[r, j])!r} at index {where[0] if len(where) == 1 else where}",
        )
    fail(fn, name, "values whose squares fit in float64", "values so large the variance overflows")


class RunningMeanStd:
    """Exact running mean and (population) variance of a stream of batches.

    Parameters
    ----------
    shape : tuple of int, default ()
        Shape of one sample (``()`` for scalars such as returns, ``(obs_dim,)``
        for observations).
    epsilon : float, default 1e-8
        Added to the variance in :meth:`normalize` / :meth:`denormalize`; > 0.

    Notes
    -----
    The state is ``(n, mean, var)``: ``n`` an exact int (0 at the start; then
    ``mean = 0`` and ``var = 1``, so normalising is the identity up to
    epsilon), ``mean``/``var`` float64 of ``shape``. A batch ``b`` with ``n_b``
    rows, mean ``m_b`` and population variance ``v_b`` (corrected two-pass
    moments in float64, whatever the batch dtype) is merged by

    ``delta = m_b - mean``, ``n' = n + n_b``,
    ``mean' = mean + delta * n_b / n'``,
    ``var' = var * n / n' + v_b * n_b / n' + delta^2 * n * n_b / n'^2``,

    which equals the moments of the union exactly in real arithmetic, so any
    split of the data gives ``np.mean``/``np.var`` of the whole to rounding.
    The weights ``n / n'`` and ``n_b / n'`` stay in [0, 1]: counts far beyond
    2**53 neither overflow nor wash out the mean.

    References
    ----------
    Chan, Golub & LeVeque (1979), "Updating formulae and a pairwise algorithm
    for computing sample variances", Stanford CS-TR-79-773; (1983) The
    American Statistician 37(3). Welford (1962), Technometrics 4(3).
    """

    __slots__ = (
        "_count",
        "_cy",
        "_epsilon",
        "_fast_1d",
        "_fast_2d",
        "_mean",
        "_n_feat",
        "_shape",
        "_var",
    )

    def __init__(self, shape: int | Sequence[int] = (), epsilon: float = 1e-8) -> None:
        fn = "RunningMeanStd"
        self._shape = _shape_tuple(fn, shape)
        self._epsilon = check_range(fn, "epsilon", epsilon, 0.0, math.inf, True, True)
        self._n_feat = math.prod(self._shape)
        self._count = 0
        self._mean = np.zeros(self._n_feat)
        self._var = np.ones(self._n_feat)
        self._cy = _cy.Updater(self._mean, self._var, *layout(self._n_feat))
        # which per-step batches can skip the general path (see update)
        self._fast_2d = len(self._shape) == 1 and self._n_feat > 0
        self._fast_1d = self._shape == ()

    # -- state ---------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one sample."""
        return self._shape

    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def count(self) -> int:
        """Number of samples seen (an exact int)."""
        return self._count

    @property
    def mean(self) -> np.ndarray:
        """float64 array of ``shape`` (a copy)."""
        return self._mean.reshape(self._shape).copy()

    @property
    def var(self) -> np.ndarray:
        """Population variance (ddof 0), float64 array of ``shape`` (a copy)."""
        return self._var.reshape(self._shape).copy()

    @property
    def std(self) -> np.ndarray:
        """``sqrt(var)`` (without epsilon), float64 array of ``shape``."""
        return np.sqrt(self._var).reshape(self._shape)

    def __repr__(self) -> str:
        return f"RunningMeanStd(shape={self._shape}, count={self._count})"

    # -- updates -------------------------------------------------------------
    def update(self, batch: Any, valid: Any = None) -> None:
        """Fold a batch of samples into the statistics.

        Parameters
        ----------
        batch : float32 or float64 array [..., *shape]
            Any number of leading dims; each leading index is one sample.
            Values must be finite (in the rows that count).
        valid : bool/uint8/float-0-1 array of the leading dims, optional
            Rows where it is False are left out (they may hold anything).

        Raises
        ------
        TypeError
            Non-float batch, non-flag ``valid``.
        ValueError
            Trailing dims differ from ``shape``; ``valid`` of the wrong shape;
            a NaN/inf in a counted row. The state is then unchanged.
        """
        if valid is None and type(batch) is np.ndarray:
            # Per-step fast path: a C-contiguous [N, D] (or [N] for shape ())
            # native float batch goes straight to Cython; anything else, and
            # every error, takes the general path below.
            dt = batch.dtype
            if (dt is _F32 or dt is _F64) and 0 < batch.size < _dispatch.PARALLEL_MIN_STATS:
                x = None
                if batch.ndim == 2 and self._fast_2d and batch.shape[1] == self._n_feat:
                    x = batch
                elif batch.ndim == 1 and self._fast_1d:
                    x = batch.reshape(-1, 1)
                if x is not None and x.flags.c_contiguous:
                    up = self._cy.update_f32 if dt is _F32 else self._cy.update_f64
                    n = up(x, None, float(self._count))
                    if n >= 0:
                        self._count += n
                        return
        fn = "RunningMeanStd.update"
        a = _float_input(fn, "batch", batch, self._shape)
        v = None
        if valid is not None:
            lead = a.shape[: a.ndim - len(self._shape)]
            v = np.ascontiguousarray(flag_array(fn, "valid", valid, lead)).reshape(-1)
        n_feat = self._n_feat
        if n_feat == 0:
            rows = math.prod(a.shape[: a.ndim - len(self._shape)])
            self._count += rows if v is None else int(np.count_nonzero(v))
            return
        size = a.size
        if size == 0:
            return
        rows = size // n_feat
        # a per-step [N, D] batch is already the kernels' 2-D layout: skip the reshape
        x = a if a.ndim == 2 and a.shape[1] == n_feat else a.reshape(rows, n_feat)
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        up = self._cy.update_f32 if x.dtype == np.float32 else self._cy.update_f64
        n = up(x, v, float(self._count), _threads(size))
        if n == -2:
            fail(
                fn,
                "batch",
                "values whose merge with the running state keeps the variance finite",
                "a batch so far from the state's mean that the merged variance overflows; "
                "the state is unchanged",
            )
        if n < 0:
            _raise_nonfinite(fn, "batch", a, rows, v)
        self._count += int(n)

    def merge(self, other: RunningMeanStd) -> None:
        """Fold another running state into this one (Chan et al.'s merge).

        ``other`` is unchanged; its ``epsilon`` is ignored. Merging the states
        of any split of the data equals one state built on all of it.
        """
        fn = "RunningMeanStd.merge"
        if not isinstance(other, RunningMeanStd):
            fail(fn, "other", "a RunningMeanStd", type(other).__name__, exc=TypeError)
        if other._shape != self._shape:
            fail(fn, "other", f"a RunningMeanStd of shape {self._shape}", f"shape {other._shape}")
        n_b = other._count
        if n_b == 0:
            return
        n_a = self._count
        if n_a == 0:
            np.copyto(self._mean, other._mean)
            np.copyto(self._var, other._var)
        else:
            # int / int is correctly rounded in Python even beyond 2**53
            w_a = n_a / (n_a + n_b)
            w_b = n_b / (n_a + n_b)
            with np.errstate(over="ignore", invalid="ignore"):
                delta = other._mean - self._mean
                new_var = self._var * w_a + other._var * w_b + delta * delta * (w_a * w_b)
            if not (np.isfinite(delta).all() and np.isfinite(new_var).all()):
                j = int(np.flatnonzero(~(np.isfinite(delta) & np.isfinite(new_var)))[0])
                fail(
                    fn,
                    "other",
                    "a state whose merge with this one has a variance that fits in float64",
                    f"means {self._mean.flat[j]:g} and {other._mean.flat[j]:g} at feature {j}; "
                    "this state is unchanged",
                )
            self._mean += delta * w_b
            np.copyto(self._var, new_var)
        self._count = n_a + n_b

    # -- normalisation -------------------------------------------------------
    def _affine_fast(self, x: Any, clip: float, out: Any, normalize: bool) -> np.ndarray | None:
        """Per-step fast path (as in update): straight to Cython, or None.

        The Cython call itself checks what the general path would: its typed
        memoryviews refuse a wrong dtype, byte order, layout or a read-only
        ``out``, and it raises on a shape mismatch or overlapping buffers. Any
        refusal returns None, and the general path then raises the proper
        error or handles the layout.
        """
        if type(x) is not np.ndarray or x.size >= _dispatch.PARALLEL_MIN_STATS:
            return None
        dt = x.dtype
        if dt is _F32:
            aff = self._cy.affine_f32
        elif dt is _F64:
            aff = self._cy.affine_f64
        else:
            return None
        res = np.empty(x.shape, dt) if out is None else out
        if x.ndim == 2 and self._fast_2d:
            x2, r2 = x, res
        elif x.ndim == 1 and self._fast_1d and type(res) is np.ndarray and res.ndim == 1:
            # [:, None] is always a view, so a result can never land in a copy
            x2, r2 = x[:, None], res[:, None]
        else:
            return None
        try:
            aff(x2, r2, self._epsilon, normalize, clip)
        except (ValueError, TypeError, BufferError):
            return None
        return res

    def _affine(
        self, fn: str, name: str, x: Any, clip: float, out: Any, normalize: bool
    ) -> np.ndarray:
        fast = self._affine_fast(x, clip, out, normalize)
        if fast is not None:
            return fast
        a = _float_input(fn, name, x, self._shape)
        if out is None:
            res = np.empty(a.shape, a.dtype)
        else:
            res = check_out(fn, "out", out, a.shape, a.dtype)
            check_no_overlap(fn, (res,), {name: a})
        n_feat = self._n_feat
        if a.size == 0:
            return res
        rows = a.size // n_feat
        # a per-step [N, D] array is already the kernels' 2-D layout: no reshape
        two_d = a.ndim == 2 and a.shape[1] == n_feat
        x2 = a if two_d else a.reshape(rows, n_feat)
        if not x2.flags.c_contiguous:
            x2 = np.ascontiguousarray(x2)
        direct = res.flags.c_contiguous
        if direct:
            r2 = res if two_d else res.reshape(rows, n_feat)
        else:
            r2 = np.empty((rows, n_feat), a.dtype)
        aff = self._cy.affine_f32 if a.dtype == np.float32 else self._cy.affine_f64
        aff(x2, r2, self._epsilon, normalize, clip, _threads(a.size))
        if not direct:
            np.copyto(res, r2.reshape(a.shape))
        return res

    def normalize(self, x: Any, clip: float | None = None, out: Any = None) -> np.ndarray:
        """``(x - mean) / sqrt(var + epsilon)``, optionally clipped to ``[-clip, clip]``.

        Parameters
        ----------
        x : float32 or float64 array [..., *shape]
        clip : float > 0, optional
        out : array like ``x`` (same shape and dtype), optional
            Written and returned; must not overlap ``x``.

        Returns
        -------
        ndarray of ``x``'s shape and dtype (arithmetic in float64).
        """
        fn = "RunningMeanStd.normalize"
        c = _clip_value(fn, clip)
        return self._affine(fn, "x", x, c, out, True)

    def denormalize(self, y: Any, out: Any = None) -> np.ndarray:
        """``y * sqrt(var + epsilon) + mean``: the inverse of unclipped :meth:`normalize`."""
        return self._affine("RunningMeanStd.denormalize", "y", y, 0.0, out, False)

    # -- persistence ---------------------------------------------------------
    def copy(self) -> RunningMeanStd:
        """An independent copy with the same state."""
        return RunningMeanStd.from_state_dict(self.state_dict())

    def __reduce__(self) -> tuple[Any, ...]:
        # The Cython Updater holds buffer views and cannot be pickled; the
        # state dict rebuilds everything, so copy.deepcopy and pickling work.
        return (RunningMeanStd.from_state_dict, (self.state_dict(),))

    def state_dict(self) -> dict[str, Any]:
        """The state as plain JSON-able Python (ints, floats, lists).

        ``count`` is an exact int; floats survive ``json.dumps``/``loads``
        bit for bit. No pickle is involved anywhere.
        """
        return {
            "shape": list(self._shape),
            "epsilon": self._epsilon,
            "count": self._count,
            "mean": self._mean.tolist(),
            "var": self._var.tolist(),
        }

    @classmethod
    def from_state_dict(cls, d: Mapping[str, Any]) -> RunningMeanStd:
        """Rebuild a :class:`RunningMeanStd` from :meth:`state_dict` output.

        ``mean``/``var`` may be lists or arrays (flat or of ``shape``);
        ``count`` an int, a numpy integer or a decimal string.
        """
        fn = "RunningMeanStd.from_state_dict"
        keys = ("shape", "epsilon", "count", "mean", "var")
        if not isinstance(d, Mapping):
            fail(fn, "d", f"a mapping with keys {keys}", type(d).__name__, exc=TypeError)
        missing = [k for k in keys if k not in d]
        if missing:
            fail(fn, "d", f"a mapping with keys {keys}", f"one missing {missing}")
        # The statistics are sized by the data, never by the claimed shape
        # alone: a state read from a file allocates no more than it holds.
        n_feat = math.prod(_shape_tuple(fn, d["shape"]))
        for name in ("mean", "var"):
            v = d[name]
            size = as_array(fn, name, v).size if isinstance(v, (list, tuple, np.ndarray)) else 1
            if size != n_feat:
                fail(fn, name, f"{n_feat} real numbers (prod(shape))", f"{size} values")
        rms = cls(d["shape"], d["epsilon"])
        rms._load(fn, d["count"], d["mean"], d["var"])
        return rms

    def _load(self, fn: str, count: Any, mean: Any, var: Any) -> None:
        if isinstance(count, str) and count.isdigit():
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, numbers.Integral):
            fail(fn, "count", "an int", repr(count), exc=TypeError)
        if int(count) < 0:
            fail(fn, "count", ">= 0", repr(count))
        arrs = []
        for name, val in (("mean", mean), ("var", var)):
            a = as_array(fn, name, val)
            if a.dtype.kind not in "fi" or a.size != self._n_feat:
                fail(fn, name, f"{self._n_feat} real numbers", describe(a))
            a = a.astype(np.float64).reshape(self._n_feat)
            check_finite(fn, name, a)
            arrs.append(a)
        if (arrs[1] < 0).any():
            fail(fn, "var", ">= 0", f"{arrs[1].min()!r}")
        self._count = int(count)
        np.copyto(self._mean, arrs[0])
        np.copyto(self._var, arrs[1])


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
        self._clip = _clip_value(fn, clip)
        with reported_as(fn, {}):  # epsilon's errors name ReturnNormalizer
            self._rms = RunningMeanStd((), epsilon)
        self._returns = np.zeros(self._n_envs)
        # Cython holds views of the returns and the statistics (see normalize)
        self._cy = _cy.ReturnScaler(self._returns, self._rms._mean, self._rms._var)

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
        term = np.ascontiguousarray(flag_array(fn, "terminated", terminated, a.shape))
        trunc = np.ascontiguousarray(flag_array(fn, "truncated", truncated, a.shape))
        v = None
        if valid is not None:
            v = np.ascontiguousarray(flag_array(fn, "valid", valid, a.shape)).reshape(shape2)
        check_finite(fn, "rewards", a)
        o = None
        if out is not None:
            o = check_out(fn, "out", out, a.shape, a.dtype)
            given = {"rewards": a, "terminated": terminated, "truncated": truncated, "valid": valid}
            check_no_overlap(fn, (o,), given)
        res = o if o is not None else np.empty(a.shape, a.dtype)
        if a.size == 0:
            return res
        r2 = np.ascontiguousarray(a).reshape(shape2)
        direct = res.flags.c_contiguous
        o2 = res.reshape(shape2) if direct else np.empty(shape2, a.dtype)
        step = self._cy.step_f32 if a.dtype == np.float32 else self._cy.step_f64
        n = step(r2, term.reshape(shape2), trunc.reshape(shape2), v, o2, *self._step_args())
        if n == -2:
            fail(
                fn,
                "rewards",
                f"rewards whose discounted returns stay below {_cy.RETURN_LIMIT:g} in magnitude "
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
        """Per-step fast path: native float rewards and bool flags straight to Cython.

        The Cython buffers refuse a wrong dtype, layout or a read-only ``out``;
        it raises on mismatched shapes or overlap, and returns -1 (writing
        nothing) for a non-finite reward. Any refusal returns None and the
        general path raises the proper error.
        """
        if not (
            type(rewards) is np.ndarray
            and type(terminated) is np.ndarray
            and type(truncated) is np.ndarray
            and terminated.dtype is _BOOL
            and truncated.dtype is _BOOL
            and (valid is None or (type(valid) is np.ndarray and valid.dtype is _BOOL))
        ):
            return None
        dt = rewards.dtype
        if not (dt is _F32 or dt is _F64):
            return None
        if rewards.ndim == 1:
            step = self._cy.step1_f32 if dt is _F32 else self._cy.step1_f64
        elif rewards.ndim == 2:
            step = self._cy.step_f32 if dt is _F32 else self._cy.step_f64
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
    ndarray like ``returns``.

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
    a = _float_input(fn, "returns", returns, rms.shape)
    c = _clip_value(fn, clip)
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
    ndarray like ``values``.
    """
    fn = "denormalize_values"
    if not isinstance(rms, RunningMeanStd):
        fail(fn, "rms", "a RunningMeanStd", type(rms).__name__, exc=TypeError)
    return rms._affine(fn, "values", values, 0.0, out, False)
