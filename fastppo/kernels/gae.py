"""GAE (Schulman et al. 2016, arXiv 1506.02438): the sweep, backwards in time.

Each chunk of ``CHUNK`` rows is read forwards (``adv = delta``, ``ret = delta
+ V``), then swept backwards while in L2, reading the carry ``A_{t+1}`` back
from the output row just written. Layout, options and validation:
:mod:`fastppo.kernels.sweep`.
"""

from __future__ import annotations

import numba

from fastppo._jit import kernel, kernel_pair
from fastppo.kernels.sweep import (
    CHUNK,
    HAS_FINAL,
    HAS_VALID,
    OK,
    validate,
)


@kernel("void(F_2, F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, F, F, i8, i8, F_2w, F_2w)")
def _gae_block(  # pragma: no cover - compiled
    rewards,
    values,
    last_values,
    terminated,
    truncated,
    final_values,
    valid,
    options,
    gamma,
    gamma_lambda,
    n0,
    n1,
    adv,
    ret,
):
    """GAE over the envs ``n0:n1``.

    Every row is sliced to ``n0:n1`` and indexed from 0: a contiguous 1-D view
    with a provably non-negative index, so the inner loops vectorise.
    """
    T = rewards.shape[0]
    zero = rewards.dtype.type(0)
    has_final = (options & HAS_FINAL) != 0
    has_valid = (options & HAS_VALID) != 0
    t_hi = T
    while t_hi > 0:
        t_lo = max(0, t_hi - CHUNK)
        # pass 1, forwards: adv = delta (0 on invalid rows), ret = delta + V
        for t in range(t_lo, t_hi):
            nvr = last_values[n0:n1] if t == T - 1 else values[t + 1, n0:n1]
            r = rewards[t, n0:n1]
            v = values[t, n0:n1]
            te = terminated[t, n0:n1]
            tr = truncated[t, n0:n1]
            fv = final_values[t, n0:n1]
            ok = valid[t, n0:n1]
            a = adv[t, n0:n1]
            rt = ret[t, n0:n1]
            for n in range(r.shape[0]):
                nv = nvr[n]
                f = fv[n] if has_final else nv
                boot = zero if te[n] != 0 else (f if tr[n] != 0 else nv)
                d = r[n] + gamma * boot - v[n]
                d = d if (ok[n] != 0) | (not has_valid) else zero
                a[n] = d
                rt[n] = d + v[n]
        # pass 2, backwards: add gamma * lambda * A_{t+1} where the trace goes on
        for t in range(min(t_hi, T - 1) - 1, t_lo - 1, -1):
            te = terminated[t, n0:n1]
            tr = truncated[t, n0:n1]
            ok = valid[t, n0:n1]
            a = adv[t, n0:n1]
            rt = ret[t, n0:n1]
            c = adv[t + 1, n0:n1]
            for n in range(a.shape[0]):
                stop = te[n] | tr[n]
                if has_valid:
                    stop |= ok[n] == 0
                x = (zero if stop != 0 else gamma_lambda) * c[n]
                a[n] += x
                rt[n] += x
        t_hi = t_lo


@kernel_pair("i8(F_2, F_2, F_1, u1_2, u1_2, F_2, u1_2, i8, f8, f8, i8, F_2w, F_2w)")
def gae_kernel(  # pragma: no cover - compiled
    rewards,
    values,
    last_values,
    terminated,
    truncated,
    final_values,
    valid,
    options,
    gamma_,
    gamma_lambda_,
    block,
    adv,
    ret,
):
    """GAE (Schulman et al. 2016, arXiv 1506.02438), backwards in time.

    ``delta_t = r_t + gamma * nv_t - V_t``;
    ``A_t = delta_t + gamma * lambda * (1 - cut_t) * A_{t+1}``;
    ``nv_t`` is 0 when terminated, the final obs' value when truncated,
    else ``V_{t+1}``; ``cut_t`` = terminated or truncated. Invalid rows get
    ``A = 0`` (so the trace is cut there) and ``ret = V``.

    Pass 1 (forwards over a chunk) writes ``adv = delta`` and
    ``ret = delta + V``; pass 2 (backwards) adds ``gamma*lambda*A_{t+1}`` to
    both where the trace continues. Returns a status code.
    """
    N = rewards.shape[1]
    gamma = rewards.dtype.type(gamma_)
    gamma_lambda = rewards.dtype.type(gamma_lambda_)
    nblocks = (N + block - 1) // block
    # Validate everything before the first write: a bad input leaves the
    # outputs untouched.
    code = validate(
        rewards,
        values,
        True,
        rewards,
        rewards,
        False,
        terminated,
        truncated,
        final_values,
        last_values,
        options,
        nblocks,
    )
    if code != OK:
        return code
    for b in numba.prange(nblocks):
        n0 = b * block
        n1 = min(N, n0 + block)
        _gae_block(
            rewards,
            values,
            last_values,
            terminated,
            truncated,
            final_values,
            valid,
            options,
            gamma,
            gamma_lambda,
            n0,
            n1,
            adv,
            ret,
        )
    return OK
