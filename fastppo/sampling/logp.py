"""Training-side log-probs and entropies of stored actions: ``categorical_logp_entropy``,
``gaussian_logp_entropy``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo import _dispatch
from fastppo._checks import as_array, c_contiguous, fail
from fastppo._jit import by_size
from fastppo.kernels import logp as _k
from fastppo.sampling._common import (
    _F32,
    _F64,
    _canon,
    _flag,
    _logits2d,
    _mask2d,
    _offs1,
    gaussian_params,
)
from fastppo.sampling.categorical import _bad_categorical
from fastppo.sampling.gaussian import _bad_gaussian


def categorical_logp_entropy(
    logits: Any, actions: Any, mask: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """Log-probability of stored actions and entropy of the (masked) categorical.

    Parameters
    ----------
    logits : float32 or float64 array [N, A]
    actions : integer array [N]
        Actions taken, each in ``[0, A)`` and allowed.
    mask : bool or uint8 array [N, A], optional

    Returns
    -------
    logp, entropy : arrays [N] of the logits' dtype
        ``logp = l_a - logsumexp(l)`` and ``H = -sum_j p_j log p_j`` over the
        allowed actions (masked or ``-inf`` logits contribute 0, never NaN),
        computed in float64.
    """
    fn = "categorical_logp_entropy"
    x = _logits2d(fn, "logits", logits)
    n, a = x.shape
    act = actions if type(actions) is np.ndarray else as_array(fn, "actions", actions)
    if act.dtype.kind not in "iu":
        fail(
            fn,
            "actions",
            "an integer array",
            f"dtype {act.dtype}",
            "use .astype(np.int64)",
            TypeError,
        )
    if act.shape != (n,):
        fail(fn, "actions", f"shape ({n},)", f"shape {act.shape}")
    act = np.ascontiguousarray(act, dtype=np.int64)
    m = None if mask is None else _mask2d(fn, mask, x.shape)
    logp = np.empty(n, dtype=x.dtype)
    ent = np.empty(n, dtype=x.dtype)
    kern = by_size(_k.categorical_logp_entropy, n * a, _dispatch.PARALLEL_MIN_LOGITS)
    x, mk = _canon(x, m)
    st = kern(x, mk, m is not None, act, logp, ent)
    if st >= 0:
        a_i = int(act[st])
        if not 0 <= a_i < a:
            fail(fn, "actions", f"in [0, {a})", f"{a_i} at env {st}")
        r = np.asarray(x[st], dtype=np.float64)
        if np.isnan(r).any() or (r == np.inf).any():
            _bad_categorical(fn, x, m, _offs1(a), st, 0)
        fail(fn, "actions", "allowed by the mask and of finite logit", f"action {a_i} at env {st}")
    return logp, ent


def gaussian_logp_entropy(
    mean: Any, log_std: Any, actions: Any, squash: bool = False, squashed_entropy: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Log-density of stored actions and entropy of the diagonal Gaussian.

    Parameters
    ----------
    mean : float32 or float64 array [N, A]
    log_std : array [N, A] or [A], same dtype; ``|log_std| < 700`` (``LOG_STD_LIMIT``)
    actions : float32 or float64 array [N, A]
        With ``squash``, values in [-1, 1]; ``u = atanh(a)`` and ``log(1 -
        a^2)`` are evaluated in float32 at ``float32(a)`` (the samplers' action
        dtype: ``u`` within 2 ulp, the log-det within 1 ulp + 1.5e-7), with
        ``a`` clipped to ``+-(1 - 2**-24)`` (float32 ``tanh`` saturates at 1
        for ``|u| > 9``, so the exact pre-image is lost there).
    squash : bool, default False
    squashed_entropy : bool, default False
        With ``squash``: return the estimate of the squashed policy's entropy
        instead of the pre-squash one (see ``entropy``). Needs ``squash``.

    Returns
    -------
    logp : [N], the mean's dtype
        As :func:`sample_gaussian` computes it.
    entropy : [N], the mean's dtype
        By default ``H(u) = sum_j (log_std_j + (1 + log 2 pi) / 2)``: the
        entropy of the Gaussian *before* squashing, also when ``squash`` is
        set. This is what the trainer's entropy bonus uses (``fastppo.nn``'s
        squashed head reports the same), as Stable-Baselines3 and CleanRL do.
        The squashed policy's entropy ``H(a) = H(u) + E[log(1 - tanh(u)^2)]``
        has no closed form; with ``squashed_entropy=True`` the expectation is
        estimated at the given action: ``H(u) + sum_j log(1 - a_j^2)``
        (unbiased when ``actions`` are drawn from the policy; always <= H(u)).
    """
    fn = "gaussian_logp_entropy"
    mu, ls2 = gaussian_params(fn, mean, log_std)
    n, a_dim = mu.shape
    act = as_array(fn, "actions", actions)
    if act.dtype != _F32 and act.dtype != _F64:
        fail(
            fn,
            "actions",
            "float32 or float64",
            f"dtype {act.dtype}",
            "use .astype(np.float32)",
            TypeError,
        )
    if act.shape != mu.shape:
        fail(fn, "actions", f"shape {mu.shape}", f"shape {act.shape}")
    sq = _flag(fn, "squash", squash)
    sq_ent = _flag(fn, "squashed_entropy", squashed_entropy)
    if sq_ent and not sq:
        fail(fn, "squashed_entropy", "False unless squash=True", "True with squash=False")
    act = c_contiguous(act) if act.dtype == mu.dtype else act.astype(mu.dtype, order="C")
    logp = np.empty(n, dtype=mu.dtype)
    ent = np.empty(n, dtype=mu.dtype)
    kern = by_size(_k.gaussian_logp_entropy, n * a_dim, _dispatch.PARALLEL_MIN_LOGITS)
    st = kern(mu, ls2, ls2.shape[0] == 1 and n != 1, act, sq, sq_ent, logp, ent)
    if st >= 0:
        _bad_gaussian(fn, mu, ls2, st, 0, actions=act, squash=sq)
    return logp, ent
