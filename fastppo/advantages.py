"""Advantage estimators: GAE, V-trace, discounted returns (the public layer).

Conventions (API.md): arrays are time-major ``[T, N]``; a 1-D ``[T]`` input is
one env and gives 1-D outputs. At step ``t`` the agent sees ``obs[t]``, takes
``actions[t]`` and receives ``rewards[t]``, ``terminated[t]`` and
``truncated[t]`` from that same ``env.step``; ``values[t] = V(obs[t])`` and
``last_values = V(obs[T])``.

The value bootstrapped at step ``t``:

* ``terminated[t]``: 0, and the lambda-trace is cut;
* ``truncated[t]`` (not terminated): the value of the true final observation,
  and the trace is cut -- ``final_values[t]`` when given (same-step autoreset),
  else ``values[t+1]`` (``last_values`` at ``t = T-1``), which is right under
  gymnasium's default next-step autoreset where row ``t+1`` holds the final obs;
* ``valid[t] == False`` (next-step autoreset's reset row): no transition; its
  advantage is 0, its return is ``values[t]`` and the trace is cut there;
* otherwise ``values[t+1]`` (``last_values`` at ``t = T-1``).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from fastppo import _checks as C
from fastppo import _dispatch
from fastppo._fastpath import GAE, RETURNS, VTRACE
from fastppo._fastpath import fast as _fast
from fastppo._jit import num_threads
from fastppo.kernels import gae as _kg
from fastppo.kernels import returns as _kr
from fastppo.kernels import sweep as K
from fastppo.kernels import vtrace as _kv

__all__ = ["discounted_returns", "gae", "next_step_valid", "vtrace"]

ArrayLike = Any

_STATUS_NAMES = {
    K.BAD_REWARDS: "rewards",
    K.BAD_VALUES: "values",
    K.BAD_LAST_VALUES: "last_values",
    K.BAD_FINAL_VALUES: "final_values",
    K.BAD_BEHAVIOR_LOGP: "behavior_logp",
    K.BAD_TARGET_LOGP: "target_logp",
}
# Parallel blocks are whole multiples of this many envs, so each thread's inner
# loop covers full SIMD vectors and full cache lines.
_BLOCK_ALIGN = 16


def _blocks(kind: int, T: int, N: int, batch_major: bool) -> tuple[int, int]:
    """A large sweep's envs per block and its validation's row ranges
    (``fastppo._cy._fast`` asks from ``PARALLEL_MIN_ELEMENTS`` on): all the
    envs in one serial call, or one block per thread.

    GAE and discounted returns are memory-bound: measured on a 2-vCPU VM,
    a second thread adds no bandwidth (serial 1.1-1.3 ms vs 1.0-1.3 ms at
    [2048, 256]) and a parallel run waits 10-20 ms whenever another
    process holds a core. So with 2 threads or fewer they stay serial;
    V-trace (exp-bound) gains ~25% from two threads.
    """
    threads = num_threads()
    if threads < 2 or N < 2 * _BLOCK_ALIGN:
        return N, 1
    if kind != VTRACE and threads <= _dispatch.SERIAL_MAX_THREADS:
        return N, 1
    per = -(-N // threads)
    per = -(-per // _BLOCK_ALIGN) * _BLOCK_ALIGN
    return per, int(K.parts(N if batch_major else T, -(-N // per)))


# The fast path (fastppo._cy._fast) takes plain numpy calls of any size (large
# ones on threads, as _blocks says) and hands anything else back (None) to the
# general path below, which validates in full, converts, and raises the house
# errors; what it converted then goes through the same C entry.
for _kind in (GAE, VTRACE, RETURNS):
    _fast.set_limit(_kind, _dispatch.PARALLEL_MIN_ELEMENTS)
_fast.set_blocks(_blocks)


class _Sweep:
    """Validated, kernel-ready inputs shared by the three sweeps."""

    __slots__ = (
        "dt",
        "fv",
        "given",
        "has_final",
        "has_trunc",
        "has_valid",
        "last",
        "one_d",
        "r",
        "shape",
        "term",
        "trunc",
        "valid",
    )

    def __init__(
        self,
        fn: str,
        rewards: ArrayLike,
        last_values: ArrayLike,
        terminated: ArrayLike,
        truncated: ArrayLike,
        final_values: ArrayLike,
        valid: ArrayLike,
        values: ArrayLike = None,
    ) -> None:
        # the caller's arrays as given: an out= buffer must not overlap them
        # even where validation read a copy (the caller's input would change)
        self.given: dict[str, Any] = {
            "rewards": rewards,
            "last_values": last_values,
            "terminated": terminated,
            "truncated": truncated,
            "final_values": final_values,
            "valid": valid,
        }
        # the float inputs share one dtype; a mismatch names the odd one out
        floats = {"rewards": rewards, "values": values, "last_values": last_values}
        C.same_float_dtype(fn, {**floats, "final_values": final_values})
        r = C.float_array(fn, "rewards", rewards)
        self.dt = dt = r.dtype
        self.one_d = r.ndim == 1
        self.shape = r.shape
        # Fortran-ordered [T, N] (batch-major [N, T] data, transposed) is kept
        # as it is until batch_major() decides the layout
        self.r = _as_2d_f(r)
        T, N = self.r.shape
        if T == 0 or N == 0:
            C.fail(fn, "rewards", "non-empty", f"shape {r.shape}")
        self.last = _last_values(fn, last_values, self.one_d, N, dt)
        self.term = _as_2d_f(C.flag_array(fn, "terminated", terminated, r.shape))
        self.has_trunc = truncated is not None
        # An absent optional input gets a full-shape stand-in (never consulted:
        # its options bit is clear), so the kernels load without branching.
        self.trunc = (
            _as_2d_f(C.flag_array(fn, "truncated", truncated, r.shape))
            if self.has_trunc
            else self.term
        )
        self.has_valid = valid is not None
        self.valid = (
            _as_2d_f(C.flag_array(fn, "valid", valid, r.shape)) if self.has_valid else self.term
        )
        self.has_final = final_values is not None
        if self.has_final:
            fv = C.float_array(fn, "final_values", final_values, dtype=dt)
            C.check_shape(fn, "final_values", fv, r.shape)
            self.fv = _as_2d_f(fv)
        else:
            self.fv = self.r  # stand-in; the sweeps read values/last_values instead

    def check_bootstrap(self, fn: str, need_final: bool = False) -> None:
        """Truncated steps need a defined bootstrap (API.md's ambiguity rule).

        Final values' finiteness (where they are read) is checked in the kernel.
        """
        if not self.has_trunc or self.has_final or (self.has_valid and not need_final):
            return
        # Only truncations that are not also terminations bootstrap.
        if not C.any_set_where_clear(self.trunc, self.term):
            return
        if need_final:
            C.fail(
                fn,
                "final_values",
                "given when truncated has a True",
                "None",
                "discounted_returns has no values to bootstrap a truncated "
                "episode from; pass final_values = V(final obs)",
            )
        C.fail(
            fn,
            "final_values or valid",
            "given when truncated has a True",
            "neither",
            "pass final_values (same-step autoreset: V(info['final_obs'])) or valid "
            "(next-step autoreset: fastppo.next_step_valid(terminated, truncated)); "
            "without one the bootstrap is ambiguous",
        )

    def batch_major(self, others: list[np.ndarray]) -> tuple[bool, list[np.ndarray]]:
        """Whether the batch-major kernel reads the inputs as they are: every 2-D
        input Fortran-ordered (``[N, T]`` C-contiguous rollouts passed as their
        transposes). Otherwise every input is made C-contiguous (time-major)."""
        arrays = (self.r, self.term, self.trunc, self.valid, self.fv, *others)
        if all(a.flags.c_contiguous for a in arrays):  # the usual time-major call
            return False, others
        T, N = self.r.shape
        if T > 1 and N > 1 and all(a.flags.f_contiguous for a in arrays):
            return True, others
        made: dict[int, np.ndarray] = {}  # a stand-in shares its array's copy

        def c(a: np.ndarray) -> np.ndarray:
            return made.setdefault(id(a), _as_2d_c(a))

        self.r, self.term, self.trunc, self.valid, self.fv = (
            c(a) for a in (self.r, self.term, self.trunc, self.valid, self.fv)
        )
        return False, [c(a) for a in others]

    def rollout(
        self,
        batch_major: bool,
        values: np.ndarray | None = None,
        behavior_logp: np.ndarray | None = None,
        target_logp: np.ndarray | None = None,
    ) -> tuple[np.ndarray, ...]:
        """The kernels' input record (:func:`fastppo.kernels.sweep.rollout`), as
        :func:`_kernel_views`; ``rewards`` stands in for what a sweep does not read."""
        r = self.r
        rw, v, fv, te, tr, ok, blp, tlp = _kernel_views(
            batch_major, r, r if values is None else values, self.fv, self.term, self.trunc,
            self.valid, r if behavior_logp is None else behavior_logp,
            r if target_logp is None else target_logp,
        )  # fmt: skip
        return K.rollout(
            rewards=rw, values=v, last_values=self.last, final_values=fv, terminated=te,
            truncated=tr, valid=ok, behavior_logp=blp, target_logp=tlp,
        )  # fmt: skip

    @property
    def options(self) -> int:
        return (
            (K.HAS_TRUNC if self.has_trunc else 0)
            | (K.HAS_FINAL if self.has_final else 0)
            | (K.HAS_VALID if self.has_valid else 0)
        )

    def kernel_options(self, batch_major: bool) -> int:
        """:attr:`options` for a whole-call kernel, with its layout bit."""
        return self.options | (K.BATCH_MAJOR if batch_major else 0)

    def raise_status(self, fn: str, code: int, arrays: dict[str, np.ndarray]) -> None:
        """Turn a kernel's status code into the house ValueError (slow path)."""
        if code == K.OK:
            return
        name = _STATUS_NAMES[code]
        a = arrays[name]
        if name == "final_values":
            a = np.where((self.trunc != 0) & (self.term == 0), a, 0)
        bad = np.argwhere(~np.isfinite(a))[0]
        idx = tuple(int(i) for i in bad)
        if self.one_d and name != "last_values":
            idx = idx[:1]
        where = idx[0] if len(idx) == 1 else idx
        C.fail(
            fn,
            name if name != "final_values" else "final_values (at truncated steps)",
            "finite",
            f"{a[tuple(bad)].item()!r} at index {where}",
        )

    def fast(
        self, entry: Any, head: tuple[np.ndarray, ...], hyper: tuple[Any, ...], outs: Any
    ) -> Any:
        """The sweep through the fast path's C entry once validation and
        conversions are done (float flags, strided copies): ``entry(*head,
        last_values, flags, final_values, *hyper, outs)`` with the kernel-ready
        arrays and outputs (1-D again for a 1-D call), serial or on threads as
        for any call it takes. None when it refuses a non-finite input
        (nothing written); the serial kernel then names it."""

        def k(a: np.ndarray) -> np.ndarray:
            return a.reshape(a.shape[0]) if self.one_d else a

        # With neither final values nor a valid mask, check_bootstrap proved
        # every truncated step terminated too: the flags change nothing, and
        # the C entry would refuse them as possibly ambiguous.
        trunc = self.has_trunc and (self.has_final or self.has_valid)
        return entry(
            *(k(a) for a in head), self.last, k(self.term),
            k(self.trunc) if trunc else None,
            k(self.fv) if self.has_final else None,
            k(self.valid) if self.has_valid else None,
            *hyper, tuple(k(o) for o in outs) if isinstance(outs, tuple) else k(outs),
        )  # fmt: skip

    def outputs(
        self,
        fn: str,
        out: Any,
        names: tuple[str, ...],
        inputs: dict[str, Any],
        order: Literal["C", "F"] = "C",
    ):
        shape, dt = self.shape, self.dt
        if out is None:
            return tuple(np.empty(shape, dt, order=order) for _ in names)
        if len(names) == 1:
            o = C.check_out(fn, "out", out, shape, dt)
            outs: tuple[np.ndarray, ...] = (o,)
        else:
            outs = C.check_out_pair(fn, out, (shape, shape), (dt, dt), (names[0], names[1]))
        # every array the kernel reads, flags included, and the caller's own
        # arrays (a uint8 view of an output buffer passed as a flag array)
        read = {**inputs, "terminated": self.term}
        if self.has_trunc:
            read["truncated"] = self.trunc
        if self.has_final:
            read["final_values"] = self.fv
        if self.has_valid:
            read["valid"] = self.valid
        # a caller's array the kernel reads itself (or a view of, e.g. bool
        # flags as uint8) is checked once
        for k, x in self.given.items():
            if isinstance(x, np.ndarray) and not any(a is x or a.base is x for a in read.values()):
                read[k] = x
        C.check_no_overlap(fn, outs, read)
        return outs


def _as_2d_c(a: np.ndarray) -> np.ndarray:
    """[T] -> [T, 1] view; C-contiguous (copying only when it must)."""
    if a.ndim == 1:
        a = a.reshape(a.shape[0], 1)
    return C.c_contiguous(a)


def _kernel_views(batch_major: bool, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The 2-D arrays as a sweep reads them: as they are (time-major), or for a
    batch-major sweep the [N, T] C-contiguous arrays behind the Fortran-ordered
    [T, N] ones (their transposes: views, no copy)."""
    return tuple(a.T for a in arrays) if batch_major else arrays


def _as_2d_f(a: np.ndarray) -> np.ndarray:
    """:func:`_as_2d_c`, but a Fortran-ordered [T, N] is kept as it is."""
    if a.ndim == 1:
        a = a.reshape(a.shape[0], 1)
    return a if a.flags.c_contiguous or a.flags.f_contiguous else C.c_contiguous(a)


def _last_values(fn: str, x: ArrayLike, one_d: bool, n: int, dt: np.dtype) -> np.ndarray:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        if not one_d:
            C.fail(fn, "last_values", f"an array of shape ({n},) for 2-D rewards", repr(x))
        return np.full(1, x, dt)
    a = C.float_array(fn, "last_values", x, ndims=(0, 1), dtype=dt)
    a = a.reshape(-1)
    if a.shape != (n,):
        want = "a scalar or shape (1,)" if one_d else f"shape ({n},)"
        C.fail(fn, "last_values", want, f"shape {np.shape(x)}")
    return C.c_contiguous(a)


def _gamma_lambda(fn: str, gamma: float, lam: float, lam_name: str) -> tuple[float, float]:
    return C.check_range(fn, "gamma", gamma, 0.0, 1.0), C.check_range(fn, lam_name, lam, 0.0, 1.0)


def gae(
    rewards: ArrayLike,
    values: ArrayLike,
    last_values: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike = None,
    *,
    final_values: ArrayLike = None,
    valid: ArrayLike = None,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalized Advantage Estimation with terminated/truncated handling.

    Parameters
    ----------
    rewards : float32 or float64, [T, N] or [T]
    values : same dtype and shape as ``rewards``; ``values[t] = V(obs[t])``.
    last_values : [N] (or scalar / [1] for 1-D input), ``V(obs[T])``.
    terminated : bool, uint8 or float 0/1, like ``rewards``.
    truncated : same, optional.
    final_values : like ``values``, optional. ``V`` of the true final observation,
        read only where ``truncated`` and not ``terminated`` (same-step autoreset).
    valid : flags like ``terminated``, optional. False marks next-step
        autoreset's reset rows (see :func:`next_step_valid`).
    gamma, gae_lambda : float in [0, 1].
    out : (advantages, returns), optional preallocated outputs (no allocation).

    Returns
    -------
    advantages, returns : arrays of ``rewards``' dtype and shape;
        ``returns = advantages + values``.

    Batch-major rollouts (``[N, T]`` C-contiguous, as torchrl and tianshou
    store them) are passed as their transposes, ``gae(r.T, v.T, last_v,
    term.T, ...)``: when every 2-D input is Fortran-ordered, a batch-major
    sweep reads them in place (no copy, the same bits; its speed beside the
    time-major call is in docs/benchmarks.md), and fresh outputs are
    Fortran-ordered ``[T, N]``, so
    ``adv.T`` is the ``[N, T]`` C-contiguous result. Mixed layouts are copied
    to time-major first.

    Notes
    -----
    ``delta_t = r_t + gamma * nv_t - V_t`` and
    ``A_t = delta_t + gamma * lambda * (1 - cut_t) * A_{t+1}``, where ``nv_t`` and
    ``cut_t`` follow the module's bootstrap rules. Raises ``ValueError`` when
    ``truncated`` has a True and neither ``final_values`` nor ``valid`` is given.
    Results are computed in the inputs' dtype: in float32, a result whose true
    value exceeds float32's range (about 3.4e38) saturates to +-inf, as
    IEEE arithmetic does, without an error (the inputs are finite; only their
    sums overflow). Pass float64 arrays for such data. Each ``r + gamma * nv``
    and ``delta + g * A`` is a fused multiply-add (one rounding), in every
    layout and thread count, so those give the same bits.

    References
    ----------
    Schulman et al., "High-Dimensional Continuous Control Using Generalized
    Advantage Estimation", arXiv:1506.02438.
    """
    arrays = (rewards, values, last_values, terminated, truncated, final_values, valid)
    res = _fast.gae(*arrays, gamma, gae_lambda, out)
    if res is not None:
        return res
    return _gae_general(
        rewards, values, last_values, terminated, truncated, final_values, valid, gamma,
        gae_lambda, out,
    )  # fmt: skip


def _gae_general(
    rewards: ArrayLike,
    values: ArrayLike,
    last_values: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike,
    final_values: ArrayLike,
    valid: ArrayLike,
    gamma: float,
    gae_lambda: float,
    out: tuple[np.ndarray, np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gae` for any input: full validation, serial or parallel kernel."""
    fn = "gae"
    s = _Sweep(fn, rewards, last_values, terminated, truncated, final_values, valid, values)
    v = C.float_array(fn, "values", values, dtype=s.dt)
    C.check_shape(fn, "values", v, s.shape)
    g, lam = _gamma_lambda(fn, gamma, gae_lambda, "gae_lambda")
    s.check_bootstrap(fn)
    bm, (v2,) = s.batch_major([_as_2d_f(v)])
    s.given["values"] = values
    adv, ret = s.outputs(
        fn,
        out,
        ("advantages", "returns"),
        {"rewards": s.r, "values": v2, "last_values": s.last},
        order="F" if bm else "C",
    )
    k_adv, k_ret = _as_2d_out(adv, bm), _as_2d_out(ret, bm)
    if s.fast(_fast.gae, (s.r, v2), (g, lam), (k_adv, k_ret)) is None:
        ka, kr = _kernel_views(bm, k_adv, k_ret)
        code = _kg.gae_kernel(
            s.rollout(bm, v2), s.kernel_options(bm), g, g * lam, s.r.shape[1], ka, kr
        )
        s.raise_status(
            fn, code, {"rewards": s.r, "values": v2, "last_values": s.last, "final_values": s.fv}
        )
    _copy_back(adv, k_adv)
    _copy_back(ret, k_ret)
    return adv, ret


def vtrace(
    behavior_logp: ArrayLike,
    target_logp: ArrayLike,
    rewards: ArrayLike,
    values: ArrayLike,
    last_values: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike = None,
    *,
    final_values: ArrayLike = None,
    valid: ArrayLike = None,
    gamma: float = 0.99,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float = 1.0,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """V-trace off-policy value targets and policy-gradient advantages.

    Parameters
    ----------
    behavior_logp, target_logp : float32 or float64 (either width, whatever the
        values' width), like ``rewards``. Log-probs of the taken actions under the
        behaviour (actor) and target (learner) policies.
    rewards, values, last_values, terminated, truncated, final_values, valid :
        as in :func:`gae`.
    gamma, lam : float in [0, 1]. ``lam`` scales the traces.
    rho_bar, c_bar, pg_rho_bar : float > 0 (inf allowed). Clipping thresholds.
    out : (vs, pg_advantages), optional preallocated outputs.

    Returns
    -------
    vs, pg_advantages : arrays of ``rewards``' dtype and shape.

    Notes
    -----
    ``rho_t = exp(target_logp_t - behavior_logp_t)``,
    ``delta_t = min(rho_bar, rho_t) * (r_t + gamma * nv_t - V_t)``,
    ``vs_t - V_t = delta_t + gamma * c_t * (vs_{t+1} - V_{t+1})`` with
    ``c_t = lam * min(c_bar, rho_t)`` (cut like GAE),
    ``pg_t = min(pg_rho_bar, rho_t) * (r_t + gamma * next_vs_t - V_t)``, where
    ``next_vs_t`` is ``vs_{t+1}`` inside an episode and the bootstrap value at a
    boundary. On-policy (rho = 1, c_bar >= 1, rho_bar >= 1),
    ``vs - values == gae(..., gae_lambda=lam)[0]`` up to rounding. Equals rlax
    for ``c_bar = 1`` and ``lam = 1``.
    Results are computed in the inputs' dtype: in float32, a result whose true
    value exceeds float32's range (about 3.4e38) saturates to +-inf, as
    IEEE arithmetic does, without an error (the inputs are finite; only their
    sums overflow). Pass float64 arrays for such data. Multiply-adds are
    fused as in :func:`gae`; ``rho`` in float32 is ``exp`` within 1.2e-7.
    Batch-major rollouts (every 2-D input Fortran-ordered, i.e. ``[N, T]``
    arrays passed as ``x.T``) are read in place as in :func:`gae`.

    References
    ----------
    Espeholt et al., "IMPALA: Scalable Distributed Deep-RL with Importance
    Weighted Actor-Learner Architectures", arXiv:1802.01561.
    """
    taken = (behavior_logp, target_logp, rewards, values, last_values, terminated, truncated,
             final_values, valid)  # fmt: skip
    hyper = (gamma, lam, rho_bar, c_bar, pg_rho_bar, out)
    res = _fast.vtrace(*taken, *hyper)
    if res is not None:
        return res
    fn = "vtrace"
    s = _Sweep(fn, rewards, last_values, terminated, truncated, final_values, valid, values)
    v = C.float_array(fn, "values", values, dtype=s.dt)
    C.check_shape(fn, "values", v, s.shape)
    v2 = _as_2d_f(v)
    # Log-probs must be finite (checked in the kernel): -inf would mean the
    # behaviour policy took an impossible action; NaN never is a probability.
    logps = {}
    for name, x in (("behavior_logp", behavior_logp), ("target_logp", target_logp)):
        a = C.float_array(fn, name, x)
        C.check_shape(fn, name, a, s.shape)
        logps[name] = _as_2d_f(a)
    # The kernels take log-probs of the sweep's dtype (one compiled variant per
    # float dtype). float32 ones are widened exactly for a float64 sweep; for a
    # float32 sweep with a float64 log-prob, the log-ratio is formed in float64
    # and rounded once (relative error 6e-8 of the ratio's log, where rounding
    # each log-prob to float32 would lose up to 4e-6 at log-probs near -50).
    if s.dt == np.float64:
        logps = {k: a.astype(np.float64, copy=False) for k, a in logps.items()}
    elif any(a.dtype != np.float32 for a in logps.values()):
        for name, a in logps.items():
            C.check_finite(fn, name, a)
        b, t = logps["behavior_logp"], logps["target_logp"]
        log_rho = np.subtract(t, b, dtype=np.float64).astype(np.float32)
        logps = {"behavior_logp": np.zeros_like(log_rho), "target_logp": log_rho}
    g, lam_ = _gamma_lambda(fn, gamma, lam, "lam")
    rb = C.check_positive(fn, "rho_bar", rho_bar)
    cb = C.check_positive(fn, "c_bar", c_bar)
    pb = C.check_positive(fn, "pg_rho_bar", pg_rho_bar)
    s.check_bootstrap(fn)
    bm, (v2, blp, tlp) = s.batch_major([v2, logps["behavior_logp"], logps["target_logp"]])
    logps = {"behavior_logp": blp, "target_logp": tlp}
    arrays = {"rewards": s.r, "values": v2, "last_values": s.last, **logps}
    s.given.update(values=values, behavior_logp=behavior_logp, target_logp=target_logp)
    vs, pg = s.outputs(fn, out, ("vs", "pg_advantages"), arrays, order="F" if bm else "C")
    k_vs, k_pg = _as_2d_out(vs, bm), _as_2d_out(pg, bm)
    if s.fast(_fast.vtrace, (blp, tlp, s.r, v2), (g, lam_, rb, cb, pb), (k_vs, k_pg)) is None:
        kv, kp = _kernel_views(bm, k_vs, k_pg)
        ro = s.rollout(bm, v2, blp, tlp)
        code = _kv.vtrace_kernel(
            ro, s.kernel_options(bm), g, lam_, rb, cb, pb, s.r.shape[1], kv, kp
        )
        s.raise_status(fn, code, {**arrays, "final_values": s.fv})
    _copy_back(vs, k_vs)
    _copy_back(pg, k_pg)
    return vs, pg


def discounted_returns(
    rewards: ArrayLike,
    last_values: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike = None,
    *,
    final_values: ArrayLike = None,
    valid: ArrayLike = None,
    gamma: float = 0.99,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Bootstrapped discounted returns ``G_t = r_t + gamma * G_{t+1}``.

    Parameters are as in :func:`gae` (there are no ``values``); batch-major
    rollouts are read in place as there (Fortran-ordered ``[T, N]``). The sum
    is cut at episode ends: 0 after ``terminated``, ``final_values[t]`` after
    ``truncated`` (required then: there is nothing else to bootstrap from),
    ``last_values`` after the last step. Invalid rows get 0 and cut the sum.

    Notes
    -----
    Equals ``gae(..., gae_lambda=1) advantages + values`` whatever the values
    (the value terms telescope); this is the Monte-Carlo target of PPO's value
    loss when lambda = 1.
    Results are computed in the inputs' dtype: in float32, a result whose true
    value exceeds float32's range (about 3.4e38) saturates to +-inf, as
    IEEE arithmetic does, without an error (the inputs are finite; only their
    sums overflow). Pass float64 arrays for such data. Each ``r + gamma *
    next`` is a fused multiply-add, as in :func:`gae`.
    """
    arrays = (rewards, last_values, terminated, truncated, final_values, valid)
    ret_fast = _fast.discounted_returns(*arrays, gamma, out)
    if ret_fast is not None:
        return ret_fast
    fn = "discounted_returns"
    s = _Sweep(fn, rewards, last_values, terminated, truncated, final_values, valid)
    g = C.check_range(fn, "gamma", gamma, 0.0, 1.0)
    s.check_bootstrap(fn, need_final=True)
    bm, _ = s.batch_major([])
    (ret,) = s.outputs(
        fn, out, ("returns",), {"rewards": s.r, "last_values": s.last}, order="F" if bm else "C"
    )
    k_ret = _as_2d_out(ret, bm)
    if s.fast(_fast.discounted_returns, (s.r,), (g,), k_ret) is None:
        (kr,) = _kernel_views(bm, k_ret)
        code = _kr.discounted_returns_kernel(
            s.rollout(bm), s.kernel_options(bm), g, s.r.shape[1], kr
        )
        s.raise_status(fn, code, {"rewards": s.r, "last_values": s.last, "final_values": s.fv})
    _copy_back(ret, k_ret)
    return ret


def next_step_valid(
    terminated: ArrayLike, truncated: ArrayLike, prev_done: ArrayLike = None
) -> np.ndarray:
    """The ``valid`` mask for gymnasium's default next-step autoreset.

    Under ``AutoresetMode.NEXT_STEP`` the ``env.step`` after an episode ends
    only resets that env: its action is ignored, its reward is 0, and the row it
    produces is no transition. Row ``t`` is therefore invalid when step ``t-1``
    ended an episode; ``prev_done`` ([N] or scalar flags) carries the last row of
    the previous rollout into row 0.

    Returns
    -------
    valid : bool array of ``terminated``'s shape, Fortran-ordered when
        ``terminated`` is (batch-major ``[N, T]`` flags passed as ``.T``, so the
        batch-major sweeps read it in place), else C-ordered.
    """
    fn = "next_step_valid"
    te = C.as_array(fn, "terminated", terminated)
    if te.ndim not in (1, 2):
        C.fail(fn, "terminated", "1-D or 2-D", f"shape {te.shape}")
    if te.shape[0] == 0:  # as the sweeps: a rollout has at least one step
        C.fail(fn, "terminated", "non-empty (at least one step)", f"shape {te.shape}")
    term = C.flag_array(fn, "terminated", te, te.shape)
    trunc = C.flag_array(fn, "truncated", truncated, te.shape)
    # the result in terminated's memory order (Fortran for batch-major
    # [N, T].T flags, which the sweeps then read in place), computed in one C
    # pass over the flags as they lie (strides included); a flag array whose
    # elements lie further apart along that order's rows than its rows do
    # (a transpose, Fortran flags beside C ones) is copied in blocks first
    f_order = te.ndim == 2 and term.flags.f_contiguous and not term.flags.c_contiguous
    order: Literal["C", "F"] = "F" if f_order else "C"
    term, trunc = _readable_in(term, order), _readable_in(trunc, order)
    valid = np.empty(te.shape, bool, order=order)
    _fast.next_valid(term, trunc, valid)
    valid[0] = True
    if prev_done is not None:
        pd = C.as_array(fn, "prev_done", prev_done)
        want = te.shape[1:]
        if te.ndim == 1 and pd.shape == (1,):
            pd = pd.reshape(())
        valid[0] = C.flag_array(fn, "prev_done", pd, want) == 0
    return valid


def _readable_in(a: np.ndarray, order: Literal["C", "F"]) -> np.ndarray:
    """``a`` when a loop along ``order``'s rows reads it as it lies
    (:func:`fastppo._checks.row_readable`), else its copy in that order
    (:func:`fastppo._checks.c_contiguous`, through the transpose for "F")."""
    if order == "F":
        return a if C.row_readable(a.T) else C.c_contiguous(a.T).T
    return a if C.row_readable(a) else C.c_contiguous(a)


def _as_2d_out(a: np.ndarray, batch_major: bool = False) -> np.ndarray:
    """The 2-D buffer a kernel writes for output ``a`` (C-contiguous, or
    Fortran-ordered for the batch-major kernel): a view of ``a``, or scratch
    that :func:`_copy_back` copies into it once the sweep succeeded -- the
    kernels have one compiled variant, for contiguous outputs."""
    if a.ndim == 1:
        a = a.reshape(a.shape[0], 1) if a.flags.c_contiguous else a
    if a.ndim == 2 and (a.flags.f_contiguous if batch_major else a.flags.c_contiguous):
        return a
    shape = (a.shape[0], a.shape[1] if a.ndim == 2 else 1)
    return np.empty(shape, a.dtype, order="F" if batch_major else "C")


def _copy_back(a: np.ndarray, k: np.ndarray) -> None:
    if k is not a and k.base is not a:  # scratch, not a view of the caller's buffer
        np.copyto(a, k.reshape(a.shape))
