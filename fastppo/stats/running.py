"""``RunningMeanStd``: exact running mean and variance (Welford/Chan), in Cython."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import (
    as_array,
    c_contiguous,
    check_finite,
    check_no_overlap,
    check_out,
    check_range,
    describe,
    fail,
    flag_array,
    ndarray_of,
    row_readable,
)
from fastppo.stats._common import (
    F32,
    F64,
    clip_value,
    cy,
    float_input,
    layout,
    raise_nonfinite,
    shape_tuple,
    threads,
)


def _f_ordered(a: np.ndarray) -> bool:
    """Fortran-ordered and not also C-contiguous (more than one row and column)."""
    return bool(a.flags.f_contiguous) and not a.flags.c_contiguous


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
        self._shape = shape_tuple(fn, shape)
        self._epsilon = check_range(fn, "epsilon", epsilon, 0.0, math.inf, True, True)
        self._n_feat = math.prod(self._shape)
        self._count = 0
        self._mean = np.zeros(self._n_feat)
        self._var = np.ones(self._n_feat)
        self._cy = cy.Updater(self._mean, self._var, *layout(self._n_feat))
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
        b = ndarray_of(batch) if valid is None else None
        if b is not None:
            # Per-step fast path: an [N, D] (or [N] for shape ()) native float
            # batch, an array or a CPU tensor's view, goes straight to Cython,
            # through the C copy unless C-contiguous; anything else, and every
            # error, takes the general path below.
            dt = b.dtype
            if (dt is F32 or dt is F64) and 0 < b.size < _dispatch.PARALLEL_MIN_STATS:
                x = None
                if b.ndim == 2 and self._fast_2d and b.shape[1] == self._n_feat:
                    x = c_contiguous(b)
                elif b.ndim == 1 and self._fast_1d:
                    x = c_contiguous(b).reshape(-1, 1)
                if x is not None:
                    up = self._cy.update_f32 if dt is F32 else self._cy.update_f64
                    n = up(x, None, float(self._count))
                    if n >= 0:
                        self._count += n
                        return
        fn = "RunningMeanStd.update"
        a = float_input(fn, "batch", batch, self._shape)
        v = None
        if valid is not None:
            lead = a.shape[: a.ndim - len(self._shape)]
            v = c_contiguous(flag_array(fn, "valid", valid, lead)).reshape(-1)
        n_feat = self._n_feat
        if n_feat == 0:
            rows = math.prod(a.shape[: a.ndim - len(self._shape)])
            self._count += rows if v is None else int(np.count_nonzero(v))
            return
        size = a.size
        if size == 0:
            return
        rows = size // n_feat
        # C order first (the C copy: numpy's reshape of a Fortran-ordered
        # array copies element by element, 8x slower), then [rows, D], a
        # view: the rows are folded in C order whatever the layout, so every
        # layout gives the same bits. A per-step [N, D] batch needs no reshape.
        c = c_contiguous(a)
        x = c if c.ndim == 2 and c.shape[1] == n_feat else c.reshape(rows, n_feat)
        up = self._cy.update_f32 if x.dtype == np.float32 else self._cy.update_f64
        n = up(x, v, float(self._count), threads(size))
        if n == -2:
            fail(
                fn,
                "batch",
                "values whose merge with the running state keeps the variance finite",
                "a batch so far from the state's mean that the merged variance overflows; "
                "the state is unchanged",
            )
        if n < 0:
            raise_nonfinite(fn, "batch", a, rows, v)
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
        x = ndarray_of(x)  # an array, or a CPU tensor's view
        if x is None or x.size >= _dispatch.PARALLEL_MIN_STATS:
            return None
        dt = x.dtype
        if dt is F32:
            aff = self._cy.affine_f32
        elif dt is F64:
            aff = self._cy.affine_f64
        else:
            return None
        cols = False
        if x.ndim == 2 and self._fast_2d:
            cols = _f_ordered(x)  # then feature-major: the transposes (see _affine)
            x = x if cols or row_readable(x) else c_contiguous(x)
            res = np.empty(x.shape, dt, order="F" if cols else "C") if out is None else out
            x2, r2 = (x.T, res.T) if cols else (x, res)
        elif (
            x.ndim == 1
            and self._fast_1d
            and (out is None or (type(out) is np.ndarray and out.ndim == 1))
        ):
            x = x if row_readable(x) else c_contiguous(x)
            res = np.empty(x.shape, dt) if out is None else out
            # [:, None] is always a view, so a result can never land in a copy
            x2, r2 = x[:, None], res[:, None]
        else:
            return None
        try:
            aff(x2, r2, self._epsilon, normalize, clip, 1, cols)
        except (ValueError, TypeError, BufferError):
            return None
        return res

    def _affine(
        self, fn: str, name: str, x: Any, clip: float, out: Any, normalize: bool
    ) -> np.ndarray:
        fast = self._affine_fast(x, clip, out, normalize)
        if fast is not None:
            return fast
        a = float_input(fn, name, x, self._shape)
        if not a.flags.aligned:  # the C map reads whole elements (a copy aligns)
            a = a.copy(order="K")
        # a Fortran-ordered array (one feature, or [R, D]) is mapped as it lies:
        # its transpose is C-contiguous and feature-major, and the result
        # takes its order (as numpy's element-wise functions do)
        f_order = _f_ordered(a) and (
            self._n_feat == 1 or (a.ndim == 2 and a.shape[1] == self._n_feat)
        )
        if out is None:
            res = np.empty(a.shape, a.dtype, order="F" if f_order else "C")
        else:
            res = check_out(fn, "out", out, a.shape, a.dtype)
            check_no_overlap(fn, (res,), {name: a})
        n_feat = self._n_feat
        if a.size == 0:
            return res
        rows = a.size // n_feat
        if f_order:  # the transposes: C-contiguous views, feature-major
            cols = a.ndim == 2 and n_feat > 1
            x2 = a.T if cols else a.T.reshape(rows, 1)
            direct = res.flags.f_contiguous
            if direct:
                r2 = res.T if cols else res.T.reshape(rows, 1)
            else:
                r2 = np.empty(x2.shape, a.dtype)
        else:
            cols = False
            # an [N, D] array, or any 1-D / 2-D array of one feature, is mapped as
            # it lies when a row loop can read it (strides included: no copy);
            # anything else is copied to C order and seen as [rows, D]
            if 1 <= a.ndim <= 2 and (a.shape[-1] == n_feat or n_feat == 1) and row_readable(a):
                # one feature's 1-D values as [R, 1]: each row one run, in parallel
                x2 = a if a.ndim == 2 else a[:, None] if n_feat == 1 else a[None, :]
            else:
                x2 = c_contiguous(a).reshape(rows, n_feat)
            direct = res.flags.c_contiguous
            r2 = res.reshape(x2.shape) if direct else np.empty(x2.shape, a.dtype)
        aff = self._cy.affine_f32 if a.dtype == np.float32 else self._cy.affine_f64
        aff(x2, r2, self._epsilon, normalize, clip, threads(a.size), cols)
        if not direct:
            np.copyto(res, r2.reshape(a.T.shape).T if f_order else r2.reshape(a.shape))
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
        ndarray of ``x``'s shape and dtype (arithmetic in float64), Fortran-ordered
        when ``x`` is a Fortran-ordered ``[R, *shape]`` batch (or any
        Fortran-ordered array for a one-feature state; as numpy's element-wise
        functions keep the order), else C-ordered. The same bits either way.
        """
        fn = "RunningMeanStd.normalize"
        c = clip_value(fn, clip)
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
        n_feat = math.prod(shape_tuple(fn, d["shape"]))
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
