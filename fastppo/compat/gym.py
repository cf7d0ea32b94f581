"""gymnasium vector envs -> fastppo's ``terminated``/``truncated``/``final_values``/``valid``.

A gymnasium vector env resets finished sub-envs itself, in one of two modes
(``gymnasium.vector.AutoresetMode``):

``NEXT_STEP`` (the default)
    The step that ends an episode returns the true final observation; the
    *next* ``step`` call only resets that sub-env (its action is ignored, its
    reward is 0, both flags False). That row is no transition: fastppo marks
    it ``valid = False``, and a truncated step bootstraps from ``values[t+1]``,
    which is ``V(final obs)``.
``SAME_STEP``
    The step that ends an episode already returns the reset observation; the
    final one is in ``infos["final_obs"][i]`` (with ``infos["_final_obs"][i]``
    True). Every row is a transition, and a truncated step needs
    ``final_values[t, i] = V(infos["final_obs"][i])``.

:class:`RolloutFlags` records both flags per step, asks for exactly the final
observations that need a value (truncated, not terminated, same-step mode
only), and hands :func:`fastppo.gae` the matching keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastppo import _checks as C

__all__ = ["FinalObs", "RolloutFlags", "autoreset_mode", "final_obs"]

NEXT_STEP = "next_step"
SAME_STEP = "same_step"
_MODES = {
    "next_step": NEXT_STEP,
    "nextstep": NEXT_STEP,
    "same_step": SAME_STEP,
    "samestep": SAME_STEP,
}


def autoreset_mode(env_or_mode: Any) -> str:
    """The autoreset mode of a vector env, as ``"next_step"`` or ``"same_step"``.

    Parameters
    ----------
    env_or_mode : gymnasium VectorEnv, ``gymnasium.vector.AutoresetMode`` or str
        A vector env (its ``metadata["autoreset_mode"]`` is read; gymnasium
        sets it, and wrappers forward it), an ``AutoresetMode`` member, or one
        of ``"next_step"``, ``"same_step"``, ``"NextStep"``, ``"SameStep"``.

    Returns
    -------
    str
        ``"next_step"`` or ``"same_step"``.

    Raises
    ------
    ValueError
        For ``AutoresetMode.DISABLED`` (the caller resets sub-envs, so only the
        caller knows where the final observations are) or an unknown mode.
    TypeError
        For an object that is neither a mode nor has ``metadata``.
    """
    fn = "autoreset_mode"
    x = env_or_mode
    if not isinstance(x, str) and hasattr(x, "metadata"):
        meta = getattr(x, "metadata", None) or {}
        # Vector envs before gymnasium 1.1 had no metadata entry and always
        # used next-step autoreset.
        x = meta.get("autoreset_mode", NEXT_STEP)
    value = getattr(x, "value", x)  # an AutoresetMode member carries its name in .value
    if not isinstance(value, str):
        C.fail(
            fn,
            "env_or_mode",
            "a vector env, an AutoresetMode or a str",
            repr(env_or_mode),
            exc=TypeError,
        )
    mode = _MODES.get(value.lower())
    if mode is None:
        C.fail(
            fn,
            "env_or_mode",
            "autoreset mode NEXT_STEP or SAME_STEP",
            repr(value),
            "with AutoresetMode.DISABLED you reset sub-envs yourself: pass terminated, "
            "truncated and final_values to fastppo.gae directly",
        )
    return mode


@dataclass(frozen=True)
class FinalObs:
    """Final observations whose values a truncated step needs.

    Attributes
    ----------
    env_ids : int64 ndarray, [k]
        Sub-envs whose episode was truncated (and not terminated) at this step.
    obs : ndarray [k, *obs_shape], list, or None
        Their true final observations, stacked when they are arrays of one
        shape (a list otherwise, e.g. dict observations); None when ``k = 0``.
    """

    env_ids: np.ndarray
    obs: Any

    def __len__(self) -> int:
        return int(self.env_ids.shape[0])


_NO_FINAL = FinalObs(np.zeros(0, np.int64), None)


def final_obs(terminated: Any, truncated: Any, infos: Any, mode: Any = SAME_STEP) -> FinalObs:
    """The truncated sub-envs of one vector step and their true final observations.

    Parameters
    ----------
    terminated, truncated : flags, [N]
        As returned by ``envs.step``.
    infos : dict
        The ``infos`` of that step.
    mode : as for :func:`autoreset_mode`
        Under next-step autoreset nothing is needed here (the final observation
        is the next row of ``obs``), so the result is empty.

    Returns
    -------
    FinalObs

    Raises
    ------
    ValueError
        If a truncated sub-env has no ``infos["final_obs"]`` entry under
        same-step autoreset.
    """
    fn = "final_obs"
    term = C.as_array(fn, "terminated", terminated)
    if term.ndim != 1:
        C.fail(fn, "terminated", "1-D [n_envs]", f"shape {term.shape}")
    te = C.flag_array(fn, "terminated", term, term.shape)
    tr = C.flag_array(fn, "truncated", truncated, term.shape)
    if autoreset_mode(mode) == NEXT_STEP:
        return _NO_FINAL
    # A terminated step bootstraps from 0 whatever its final obs, so only
    # truncations that are not also terminations need a value.
    ids = np.flatnonzero((tr != 0) & (te == 0)).astype(np.int64)
    if ids.size == 0:
        return _NO_FINAL
    if not isinstance(infos, dict) or "final_obs" not in infos:
        C.fail(
            fn,
            "infos",
            "a dict with 'final_obs' for truncated sub-envs (same-step autoreset)",
            "no 'final_obs' key" if isinstance(infos, dict) else type(infos).__name__,
            "is the env really in AutoresetMode.SAME_STEP?",
        )
    fo = infos["final_obs"]
    mask = infos.get("_final_obs")
    if mask is not None:
        missing = ids[~np.asarray(mask, bool)[ids]]
        if missing.size:
            C.fail(
                fn,
                "infos['_final_obs']",
                "True for every truncated sub-env",
                f"False for env {int(missing[0])}",
            )
    items = [fo[i] for i in ids]
    return FinalObs(ids, _stack(items))


def _stack(items: list[Any]) -> Any:
    if all(isinstance(o, np.ndarray) for o in items) and len({o.shape for o in items}) == 1:
        return np.stack(items)
    return items


class RolloutFlags:
    """Episode flags of one rollout from a gymnasium vector env, ready for the kernels.

    Parameters
    ----------
    n_steps, n_envs : int
        Rollout length ``T`` and number of sub-envs ``N``.
    mode : vector env, ``AutoresetMode`` or str
        See :func:`autoreset_mode`; pass the env itself to read its mode.
    dtype : numpy float dtype
        dtype of ``final_values``; match the values' dtype (default float32).

    Attributes
    ----------
    terminated, truncated : bool ndarray, [T, N]
    final_values : ndarray of ``dtype``, [T, N]
        ``V(final obs)`` at truncated same-step rows (0 elsewhere).
    mode : str
        ``"next_step"`` or ``"same_step"``.

    Examples
    --------
    >>> flags = RolloutFlags(n_steps, envs.num_envs, envs)         # doctest: +SKIP
    >>> for t in range(n_steps):                                   # doctest: +SKIP
    ...     obs, rew, term, trunc, infos = envs.step(actions)
    ...     flags.record(t, term, trunc, infos, value_fn=critic)
    >>> adv, ret = fastppo.gae(rewards, values, last_values,       # doctest: +SKIP
    ...                        **flags.gae_kwargs(), gamma=0.99)
    >>> flags.next_rollout()                                       # doctest: +SKIP
    """

    def __init__(
        self, n_steps: int, n_envs: int, mode: Any = NEXT_STEP, dtype: Any = np.float32
    ) -> None:
        fn = "RolloutFlags"
        for name, v in (("n_steps", n_steps), ("n_envs", n_envs)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                C.fail(fn, name, "an int", repr(v), exc=TypeError)
            if v < 1:
                C.fail(fn, name, ">= 1", repr(v))
        dt = np.dtype(dtype)
        if dt not in C.FLOATS:
            C.fail(fn, "dtype", "float32 or float64", str(dt), exc=TypeError)
        self.mode = autoreset_mode(mode)
        self.n_steps, self.n_envs = int(n_steps), int(n_envs)
        self.terminated = np.zeros((n_steps, n_envs), bool)
        self.truncated = np.zeros((n_steps, n_envs), bool)
        self.final_values = np.zeros((n_steps, n_envs), dt)
        # The first row of a rollout is a reset row when the previous rollout's
        # last step ended an episode (next-step mode); nothing has ended yet.
        self.prev_done = np.zeros(n_envs, bool)

    def record(
        self,
        t: int,
        terminated: Any,
        truncated: Any,
        infos: Any = None,
        value_fn: Callable[[Any], Any] | None = None,
    ) -> FinalObs:
        """Store step ``t``'s flags; return the final observations needing a value.

        Parameters
        ----------
        t : int in [0, n_steps)
        terminated, truncated : flags, [N]
            As returned by ``envs.step``.
        infos : dict, optional
            The step's ``infos`` (needed in same-step mode).
        value_fn : callable, optional
            ``value_fn(obs_batch) -> values [k]``; when given, it is called on
            the returned observations and the values are stored in
            ``final_values[t]`` (otherwise call :meth:`set_final_values`).

        Returns
        -------
        FinalObs
            Empty in next-step mode and when no sub-env was truncated.
        """
        fn = "RolloutFlags.record"
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self.n_steps:
            C.fail(fn, "t", f"an int in [0, {self.n_steps})", repr(t))
        te = C.flag_array(fn, "terminated", terminated, (self.n_envs,))
        tr = C.flag_array(fn, "truncated", truncated, (self.n_envs,))
        req = final_obs(te, tr, infos, self.mode)
        self.terminated[t] = te
        self.truncated[t] = tr
        self.final_values[t] = 0
        if value_fn is not None and len(req):
            self.set_final_values(t, req, value_fn(req.obs))
        return req

    def set_final_values(self, t: int, request: FinalObs, values: Any) -> None:
        """Store ``V(final obs)`` for the sub-envs of ``request`` at step ``t``.

        Parameters
        ----------
        t : int
            The step :meth:`record` returned ``request`` for.
        request : FinalObs
        values : array-like or torch tensor, [k] or [k, 1]
        """
        fn = "RolloutFlags.set_final_values"
        v = C.as_array(fn, "values", values)
        if v.ndim == 2 and v.shape[1] == 1:
            v = v.reshape(-1)
        if v.shape != (len(request),):
            C.fail(fn, "values", f"shape ({len(request)},)", f"shape {v.shape}")
        if v.dtype.kind != "f":
            C.fail(fn, "values", "floats", f"dtype {v.dtype}", exc=TypeError)
        C.check_finite(fn, "values", v)
        self.final_values[t, request.env_ids] = v

    @property
    def valid(self) -> np.ndarray | None:
        """[T, N] bool mask of real transitions (next-step mode), None in same-step mode."""
        if self.mode != NEXT_STEP:
            return None
        from fastppo.advantages import next_step_valid

        return next_step_valid(self.terminated, self.truncated, self.prev_done)

    def gae_kwargs(self) -> dict[str, np.ndarray]:
        """Keyword arguments for :func:`fastppo.gae` / ``vtrace`` / ``discounted_returns``.

        ``terminated`` and ``truncated`` always; ``valid`` in next-step mode,
        ``final_values`` in same-step mode.
        """
        kw = {"terminated": self.terminated, "truncated": self.truncated}
        if self.mode == NEXT_STEP:
            valid = self.valid
            assert valid is not None
            kw["valid"] = valid
        else:
            kw["final_values"] = self.final_values
        return kw

    def next_rollout(self) -> None:
        """Start the next rollout: carry the last step's done flags, clear the rest."""
        np.logical_or(self.terminated[-1], self.truncated[-1], out=self.prev_done)
        self.terminated[:] = False
        self.truncated[:] = False
        self.final_values[:] = 0
