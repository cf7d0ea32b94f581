"""Numba kernels for the MLP actor-critic: forward, manual backward, PPO loss, Adam.

Everything here works on ONE flat float64 parameter vector. A stack of dense
layers is described by an int64 ``layout`` array with one row per layer,
``(n_in, n_out, w_offset, b_offset)``; the weight of a layer is the row-major
``[n_in, n_out]`` block ``params[w_offset : w_offset + n_in * n_out]`` and its bias
``params[b_offset : b_offset + n_out]``. Hidden layers apply the activation
(0 = tanh, 1 = relu); the last layer of a stack is linear.

Weights are stored ``[n_in, n_out]`` (the transpose of torch's ``[out, in]``), so
a layer's weight is a C-contiguous ``[n_in, n_out]`` view of ``params`` and the
three products of a layer (forward ``H W``, weight gradient ``H^T dZ``, input
gradient ``dZ W^T``) are GEMMs on views: ``np.dot``, which Numba lowers to the
BLAS that SciPy ships (no copies, the GIL stays released). The elementwise
work around them (bias, activation and its derivative) is vectorised loops.
The kernels but the forward pass opt into ``FASTMATH_SAFE`` for their
reductions (NaN/inf semantics are kept, so a NaN in the inputs still shows up
as a non-finite gradient norm and the step is skipped).

Every kernel has a float32 and a float64 variant (``F``): parameters,
activations, gradients and the Adam moments in ``F`` (float32 by default: twice
the GEMM rate, and tanh32 vectorises eight lanes wide), while per-row scalars
(log-probs, advantages, returns, losses) are float64. The float64
variant lets the tests check every gradient against central finite
differences to ~1e-7.

Activations for a minibatch of ``nb`` rows live in a flat scratch vector: the
gathered input rows first (``nb * n_in0``), then layer ``l``'s output for row
``b`` at ``nb * n_in0 + sum_{k<l} nb * n_out_k + b * n_out_l``. Gathering the
rows once makes every layer read one contiguous block, so all inner loops are
unit-stride and vectorise.
The caller owns all scratch and output buffers; nothing is allocated here.

Head codes: 0 = (multi-)categorical over ``nvec`` (Discrete is ``nvec = [n]``),
1 = diagonal Gaussian, 2 = tanh-squashed diagonal Gaussian. Gaussian heads take
a state-independent ``log_std`` at ``params[ls_off : ls_off + A]``, clamped to
``[ls_lo, ls_hi]`` in the forward pass (no gradient when the clamp is active).

References
----------
Schulman et al., "Proximal Policy Optimization Algorithms", arXiv 1707.06347.
Kingma & Ba, "Adam: A Method for Stochastic Optimization", arXiv 1412.6980.
Haarnoja et al., "Soft Actor-Critic", arXiv 1801.01290 (tanh-squash correction).
"""

from __future__ import annotations

import math

import numpy as np

from fastppo._jit import FASTMATH_SAFE, kernel
from fastppo.kernels.fastmath import tanh32, tanh64
from fastppo.kernels.softmax import lse_entropy
from fastppo.kernels.squash import unsquash

ACT_TANH = 0
ACT_RELU = 1
HEAD_CATEGORICAL = 0
HEAD_GAUSSIAN = 1
HEAD_SQUASHED = 2

# Slots of the per-minibatch statistics vector written by ``minibatch_loss_grad``.
ST_LOSS, ST_PG, ST_VF, ST_ENT, ST_KL, ST_OLD_KL, ST_CLIPFRAC, ST_N = range(8)
N_MB_STATS = 8
# Slots of the whole-update statistics vector written by ``ppo_update_kernel``.
(
    U_PG,
    U_VF,
    U_ENT,
    U_KL,
    U_OLD_KL,
    U_CLIPFRAC,
    U_LOSS,
    U_GRAD_NORM,
    U_N_EVAL,
    U_N_STEPS,
    U_N_SKIPPED,
    U_EPOCHS,
    U_EARLY_STOP,
    U_LAST_KL,
) = range(14)
N_UPDATE_STATS = 14
# Slots of the hyperparameter vector (negative = feature off where noted).
(
    H_CLIP,
    H_CLIP_VF,  # < 0: no value clipping
    H_ENT,
    H_VF,
    H_NORM_ADV,  # 0 or 1
    H_LS_LO,
    H_LS_HI,
    H_LR,
    H_BETA1,
    H_BETA2,
    H_EPS,
    H_MAX_GRAD_NORM,  # <= 0: no clipping
    H_TARGET_KL,  # <= 0: no early stop
) = range(13)
N_HYPER = 13

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_NO_MASK = np.zeros(1, np.uint8)  # lse_entropy's mask argument: every action allowed
_ALL_VALID = np.zeros(0, np.bool_)  # head_rows' valid argument: every row valid
# Its has_mask flag: a numpy bool types as plain ``boolean`` where the literal
# ``False`` would type as ``Literal[bool](False)``, one more compiled variant of
# the lse_entropy subroutine per float dtype than the samplers' calls need
# (tests/test_variant_budget.py, on a fresh cache).
_MASKED = np.bool_(False)
# The log-ratio is clamped before exp so a stale or poisoned log-prob cannot
# overflow the ratio to inf (exp(20) ~ 5e8 is already far outside any clip range).
_LOGRATIO_MAX = 20.0


# No fastmath: the tanh of kernels.fastmath rounds with exact float tricks that
# reassociation would undo (and nothing here is a reduction).
@kernel("i8(F_1, i8_2, i8, F_2, i8_1, i8, i8, F_1w)")
def stack_forward(params, layout, act, x, idx, i0, nb, h):  # pragma: no cover - compiled
    """Forward rows ``x[idx[i0 : i0 + nb]]`` through one stack; returns the output offset.

    ``h`` receives the gathered input rows first (``nb * n_in0`` values), then each
    layer's activations: ``H_l = act(H_{l-1} W_l + b_l)``, the product one GEMM
    (``np.dot``: BLAS through SciPy) on ``[nb, n_in]`` and ``[n_in, n_out]`` views.
    """
    n_layers = layout.shape[0]
    n_in0 = layout[0, 0]
    zero = h.dtype.type(0)
    # Every view is made once per layer, outside the row loops: a slice costs
    # an atomic reference-count increment and decrement, which per row made
    # up a quarter of a 64-row minibatch. Indices are range variables from 0,
    # so Numba's negative-index wraparound folds away and the loops vectorise.
    x0 = h[: nb * n_in0].reshape((nb, n_in0))
    for b in range(nb):
        r = idx[i0 + b]
        for i in range(n_in0):
            x0[b, i] = x[r, i]
    off_in = 0
    off = nb * n_in0
    for l in range(n_layers):
        n_in = layout[l, 0]
        n_out = layout[l, 1]
        w = layout[l, 2]
        bias = params[layout[l, 3] : layout[l, 3] + n_out]
        hin = h[off_in : off_in + nb * n_in].reshape((nb, n_in))
        hout = h[off : off + nb * n_out].reshape((nb, n_out))
        np.dot(hin, params[w : w + n_in * n_out].reshape((n_in, n_out)), hout)
        if l < n_layers - 1 and act == ACT_TANH:
            for b in range(nb):
                if h.itemsize == 4:  # a constant: the other branch is not emitted
                    for j in range(n_out):
                        hout[b, j] = tanh32(hout[b, j] + bias[j])
                else:
                    for j in range(n_out):
                        hout[b, j] = tanh64(hout[b, j] + bias[j])
        elif l < n_layers - 1:
            for b in range(nb):
                for j in range(n_out):
                    hout[b, j] = max(hout[b, j] + bias[j], zero)
        else:
            for b in range(nb):
                for j in range(n_out):
                    hout[b, j] += bias[j]
        off_in = off
        off += nb * n_out
    return off_in


@kernel("void(F_1, i8_2, i8, i8, F_1, F_1w, F_1w, F_1w)", fastmath=FASTMATH_SAFE)
def stack_backward(params, layout, act, nb, h, dz, dprev, grad):  # pragma: no cover
    """Backpropagate ``dz`` (d loss / d stack output, ``[nb, n_out_last]`` flat) into ``grad``.

    ``h`` must hold the inputs and activations of the matching ``stack_forward``
    call; ``dz`` and ``dprev`` are scratch of at least ``nb * max_width`` and are
    overwritten. Per layer, from the last: ``dW_l = H_{l-1}^T dZ_l`` and
    ``db_l = sum_b dZ_l[b]`` are WRITTEN to the stack's slots of ``grad`` (each
    weight belongs to one stack), then ``dZ_{l-1} = (dZ_l W_l^T) * act'(H_{l-1})``
    (two GEMMs per layer).
    """
    n_layers = layout.shape[0]
    off = nb * layout[0, 0]
    for l in range(n_layers):
        off += nb * layout[l, 1]
    cur = dz
    prv = dprev
    one = h.dtype.type(1)
    for l in range(n_layers - 1, -1, -1):
        n_in = layout[l, 0]
        n_out = layout[l, 1]
        w = layout[l, 2]
        gbias = grad[layout[l, 3] : layout[l, 3] + n_out]
        off -= nb * n_out
        off_in = off - nb * n_in
        d2 = cur[: nb * n_out].reshape((nb, n_out))
        hin = h[off_in : off_in + nb * n_in].reshape((nb, n_in))
        np.dot(hin.T, d2, grad[w : w + n_in * n_out].reshape((n_in, n_out)))
        for j in range(n_out):
            gbias[j] = 0.0
        for b in range(nb):
            for j in range(n_out):
                gbias[j] += d2[b, j]
        if l > 0:
            # d in = dz W^T, then the activation's derivative from its output.
            p2 = prv[: nb * n_in].reshape((nb, n_in))
            np.dot(d2, params[w : w + n_in * n_out].reshape((n_in, n_out)).T, p2)
            if act == ACT_TANH:
                for b in range(nb):
                    for i in range(n_in):
                        p2[b, i] *= one - hin[b, i] * hin[b, i]
            else:
                for b in range(nb):
                    for i in range(n_in):
                        if hin[b, i] <= 0.0:
                            p2[b, i] = 0.0
            cur, prv = prv, cur


@kernel(
    "void(F_1, F_1, i8, i8, i8_1, i8, f8, f8, i8_2, F_2, i8_1, i8, i8, b1_1, f8, b1, f8_1,"
    " F_1w, F_1w, f8_1w, f8_1w)",
    fastmath=FASTMATH_SAFE,
)
def head_rows(
    params,
    out,
    o,
    head,
    nvec,
    ls_off,
    ls_lo,
    ls_hi,
    act_i,
    act_f,
    idx,
    i0,
    nb,
    valid,
    g_ent,
    want_grad,
    g_logp,
    dz,
    grad,
    logp,
    ent,
):  # pragma: no cover - compiled
    """Log-probs and entropies of the stored actions of rows ``idx[i0 : i0 + nb]``.

    Row ``b``'s head output is ``out[o + b * n_out :][:n_out]``; ``logp[b]`` and
    ``ent[b]`` receive its results (0 for a row whose ``valid`` is False; an empty
    ``valid`` marks every row valid). With
    ``want_grad``, ``dz``'s row ``b`` receives ``g_logp[b] * dlogp/dout + g_ent * dH/dout``
    (zeros for an invalid row) and the log_std part is added to ``grad``.

    One call handles every row of a minibatch: a call per row passed each
    array across a function boundary, and Numba's reference counting of the
    arguments (two atomic operations per array per call) cost more than the
    head's arithmetic.

    Categorical (per component ``c`` with logits ``z``, through
    ``kernels.softmax.lse_entropy``): ``logp = z_a - lse(z)``,
    ``dlogp/dz_i = [i = a] - p_i``; ``H = -sum p log p``, ``dH/dz_i = -p_i (log p_i + H)``.
    Gaussian: ``logp = sum_d -z_d^2/2 - s_d - log(2 pi)/2`` with ``z = (a - mu)/sigma``,
    ``dlogp/dmu = z / sigma``, ``dlogp/ds = z^2 - 1``; ``H = sum_d s_d + (1 + log 2 pi)/2``.
    Squashed: the Gaussian term at ``u = atanh(a)`` minus ``log(1 - tanh(u)^2)``
    (``kernels.squash.unsquash``); the correction does not depend on the parameters.
    Its entropy is reported as the pre-squash Gaussian entropy (the squashed
    one has no closed form), as in common PPO implementations.
    """
    if head == HEAD_CATEGORICAL:
        n_out = 0
        for c in range(nvec.shape[0]):
            n_out += nvec[c]
    else:
        n_out = act_f.shape[1]
    for b in range(nb):
        r = idx[i0 + b]
        ob = o + b * n_out
        db = b * n_out
        if valid.shape[0] > 0 and not valid[r]:
            logp[b] = 0.0
            ent[b] = 0.0
            if want_grad:
                for j in range(n_out):
                    dz[db + j] = 0.0
            continue
        gl = g_logp[b] if want_grad else 0.0
        lp_sum = 0.0
        ent_sum = 0.0
        if head == HEAD_CATEGORICAL:
            base = 0
            for c in range(nvec.shape[0]):
                n = nvec[c]
                z = out[ob + base : ob + base + n]
                m, ls, hc = lse_entropy(z, _NO_MASK, _MASKED)
                a = act_i[r, c]
                lp_sum += (z[a] - m) - ls
                ent_sum += hc
                if want_grad:
                    for i in range(n):
                        lp = (z[i] - m) - ls
                        p = math.exp(lp)
                        g = -gl * p - g_ent * p * (lp + hc)
                        if i == a:
                            g += gl
                        dz[db + base + i] = g
                base += n
        else:
            for d in range(n_out):
                raw = params[ls_off + d]
                s = min(max(raw, ls_lo), ls_hi)
                sigma = math.exp(s)
                a = np.float64(act_f[r, d])
                u = a
                ld = 0.0
                if head == HEAD_SQUASHED:
                    ua, la = unsquash(a)
                    u = np.float64(ua)
                    ld = np.float64(la)
                z = (u - out[ob + d]) / sigma
                lp_sum += -0.5 * z * z - s - _HALF_LOG_2PI
                if head == HEAD_SQUASHED:
                    lp_sum -= ld
                ent_sum += s + 0.5 + _HALF_LOG_2PI
                if want_grad:
                    dz[db + d] = gl * z / sigma
                    if ls_lo <= raw <= ls_hi:
                        grad[ls_off + d] += gl * (z * z - 1.0) + g_ent
        logp[b] = lp_sum
        ent[b] = ent_sum


@kernel(
    "i8(F_1, i8_2, i8_2, i8, i8, i8_1, i8, F_2, i8_2, F_2, f8_1, f8_1, f8_1, f8_1, b1_1, i8_1,"
    " i8, i8, f8_1, F_1w, F_1w, F_1w, F_1w, F_1w, f8_1w, f8_1w)",
    fastmath=FASTMATH_SAFE,
)
def minibatch_loss_grad(
    params,
    a_layout,
    c_layout,
    act,
    head,
    nvec,
    ls_off,
    obs,
    act_i,
    act_f,
    old_logp,
    adv,
    ret,
    old_val,
    valid,
    idx,
    i0,
    nb,
    hyp,
    ha,
    hc,
    dz,
    dprev,
    grad,
    rows,
    stats,
):  # pragma: no cover - compiled
    """PPO loss of rows ``idx[i0 : i0 + nb]`` and its exact gradient (overwrites ``grad``).

    ``loss = L_clip - ent_coef * H + vf_coef * L_vf`` averaged over the valid rows:
    ``L_clip = mean max(-A r, -A clip(r, 1 - eps, 1 + eps))`` with
    ``r = exp(clamp(logp - logp_old, -20, 20))``; ``L_vf = 0.5 mean (V - R)^2``, or with
    value clipping ``0.5 mean max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)``.
    Advantages are normalised over the minibatch's valid rows when ``hyp[H_NORM_ADV]``:
    ``(A - mean) / (std + 1e-8)`` (sample std), centred only when the std is ~0, and
    all zero when the mean or variance is not finite. Gradients at ties of the max
    are split as in torch, which gives the same values as the branch rule used here.

    ``rows`` is float64 scratch of at least ``3 * nb`` (per-row log-probs,
    entropies and log-prob gradients). Writes ``stats[ST_*]``; returns the number
    of valid rows.
    """
    n_params = params.shape[0]
    for k in range(n_params):
        grad[k] = 0.0
    for k in range(N_MB_STATS):
        stats[k] = 0.0
    n = 0
    for b in range(nb):
        if valid[idx[i0 + b]]:
            n += 1
    if n == 0:
        return 0
    inv_n = 1.0 / n

    # Advantage normalisation: two passes over the valid rows (mean, then variance).
    a_mean = 0.0
    a_scale = 1.0
    a_zero = False
    if hyp[H_NORM_ADV] != 0.0:
        for b in range(nb):
            r = idx[i0 + b]
            if valid[r]:
                a_mean += adv[r]
        a_mean *= inv_n
        var = 0.0
        for b in range(nb):
            r = idx[i0 + b]
            if valid[r]:
                d = adv[r] - a_mean
                var += d * d
        var = var / (n - 1) if n > 1 else 0.0
        if not (math.isfinite(a_mean) and math.isfinite(var)):
            a_zero = True
        else:
            std = math.sqrt(var)
            # A constant minibatch would divide rounding noise by ~1e-8; centring
            # alone gives the exact answer (zero advantages) instead.
            if std > 1e-8 + 1e-6 * abs(a_mean):
                a_scale = 1.0 / (std + 1e-8)

    clip = hyp[H_CLIP]
    clip_vf = hyp[H_CLIP_VF]
    ent_coef = hyp[H_ENT]
    vf_coef = hyp[H_VF]
    ls_lo = hyp[H_LS_LO]
    ls_hi = hyp[H_LS_HI]

    # Critic first: its backward pass uses the scratch the actor needs afterwards.
    vo = stack_forward(params, c_layout, act, obs, idx, i0, nb, hc)
    v_loss = 0.0
    for b in range(nb):
        r = idx[i0 + b]
        if not valid[r]:
            dz[b] = 0.0
            continue
        v = np.float64(hc[vo + b])
        e1 = v - ret[r]
        if clip_vf >= 0.0:
            dv = v - old_val[r]
            dvc = min(max(dv, -clip_vf), clip_vf)
            e2 = old_val[r] + dvc - ret[r]
            if e1 * e1 >= e2 * e2:
                v_loss += e1 * e1
                g = e1
            else:
                v_loss += e2 * e2
                g = e2 if -clip_vf <= dv <= clip_vf else 0.0
        else:
            v_loss += e1 * e1
            g = e1
        dz[b] = vf_coef * inv_n * g
    stack_backward(params, c_layout, act, nb, hc, dz, dprev, grad)

    ao = stack_forward(params, a_layout, act, obs, idx, i0, nb, ha)
    logp = rows[:nb]
    ent = rows[nb : 2 * nb]
    g_logp = rows[2 * nb : 3 * nb]
    g_ent = -ent_coef * inv_n
    # First pass: log-probs only, to get the ratios that scale the gradient.
    head_rows(
        params, ha, ao, head, nvec, ls_off, ls_lo, ls_hi, act_i, act_f, idx, i0, nb, valid,
        0.0, False, g_logp, dz, grad, logp, ent,
    )  # fmt: skip
    pg_loss = 0.0
    ent_sum = 0.0
    kl = 0.0
    old_kl = 0.0
    clipped = 0.0
    for b in range(nb):
        r = idx[i0 + b]
        g_logp[b] = 0.0
        if not valid[r]:
            continue
        if a_zero:
            a = 0.0
        else:
            a = (adv[r] - a_mean) * a_scale
        lr = logp[b] - old_logp[r]
        lrc = min(max(lr, -_LOGRATIO_MAX), _LOGRATIO_MAX)
        ratio = math.exp(lrc)
        pg1 = -a * ratio
        rc = min(max(ratio, 1.0 - clip), 1.0 + clip)
        pg2 = -a * rc
        if pg1 >= pg2:
            pg_loss += pg1
            d_ratio = -a
        else:
            # pg2 > pg1 implies rc != ratio: the clamp is active, no gradient.
            pg_loss += pg2
            d_ratio = 0.0
        if -_LOGRATIO_MAX < lr < _LOGRATIO_MAX:
            g_logp[b] = d_ratio * ratio * inv_n
        ent_sum += ent[b]
        kl += (ratio - 1.0) - lrc
        old_kl -= lrc
        if abs(ratio - 1.0) > clip:
            clipped += 1.0
    # Second pass: the head gradient of every row into dz (zero rows where invalid).
    head_rows(
        params, ha, ao, head, nvec, ls_off, ls_lo, ls_hi, act_i, act_f, idx, i0, nb, valid,
        g_ent, True, g_logp, dz, grad, logp, ent,
    )  # fmt: skip
    stack_backward(params, a_layout, act, nb, ha, dz, dprev, grad)

    stats[ST_PG] = pg_loss * inv_n
    stats[ST_VF] = 0.5 * v_loss * inv_n
    stats[ST_ENT] = ent_sum * inv_n
    stats[ST_KL] = kl * inv_n
    stats[ST_OLD_KL] = old_kl * inv_n
    stats[ST_CLIPFRAC] = clipped * inv_n
    stats[ST_N] = n
    stats[ST_LOSS] = stats[ST_PG] - ent_coef * stats[ST_ENT] + vf_coef * stats[ST_VF]
    return n


@kernel("f8(F_1w, F_1, F_1w, F_1w, i8_1w, f8, f8, f8, f8, f8)", fastmath=FASTMATH_SAFE)
def clip_adam_step(params, grad, m, v, t, lr, beta1, beta2, eps, max_norm):  # pragma: no cover
    """Global-norm clipping then one Adam step, in place; returns the pre-clip norm.

    ``g <- g * min(1, max_norm / (||g|| + 1e-6))`` (torch ``clip_grad_norm_``), then
    ``m <- b1 m + (1 - b1) g``, ``v <- b2 v + (1 - b2) g^2``,
    ``p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`` (torch's form of
    Kingma & Ba's bias correction). The norm is summed in float64; the moments
    and the step are in the parameters' dtype, as torch's Adam keeps them
    (float64 moments made the square root and the division of every
    parameter four times dearer: a fifth of a 64-row PPO minibatch). A
    non-finite norm leaves params, moments and ``t[0]`` untouched: one
    poisoned minibatch must not destroy the weights.
    """
    s = 0.0
    for i in range(grad.shape[0]):
        gi = np.float64(grad[i])
        s += gi * gi
    norm = math.sqrt(s)
    if not math.isfinite(norm):
        return norm
    coef = 1.0
    if max_norm > 0.0:
        c = max_norm / (norm + 1e-6)
        if c < 1.0:
            coef = c
    step = t[0] + 1
    t[0] = step
    f = params.dtype.type
    b1 = f(beta1)
    b2 = f(beta2)
    c1 = f(1.0 - beta1)
    c2 = f(1.0 - beta2)
    inv_bc2 = f(1.0 / math.sqrt(1.0 - beta2**step))
    step_size = f(lr / (1.0 - beta1**step))
    eps_ = f(eps)
    coef_ = f(coef)
    for i in range(params.shape[0]):
        g = grad[i] * coef_
        mi = b1 * m[i] + c1 * g
        vi = b2 * v[i] + c2 * g * g
        m[i] = mi
        v[i] = vi
        params[i] -= step_size * mi / (np.sqrt(vi) * inv_bc2 + eps_)
    return norm


@kernel(
    "void(F_1w, i8_2, i8_2, i8, i8, i8_1, i8, F_2, i8_2, F_2, f8_1, f8_1, f8_1, f8_1, b1_1,"
    " i8_2, i8, f8_1, F_1w, F_1w, i8_1w, F_1w, F_1w, F_1w, F_1w, F_1w, f8_1w, f8_1w, f8_1w)"
)
def ppo_update_kernel(
    params,
    a_layout,
    c_layout,
    act,
    head,
    nvec,
    ls_off,
    obs,
    act_i,
    act_f,
    old_logp,
    adv,
    ret,
    old_val,
    valid,
    perm,
    mb_size,
    hyp,
    m,
    v,
    t,
    ha,
    hc,
    dz,
    dprev,
    grad,
    rows,
    mb_stats,
    out,
):  # pragma: no cover - compiled
    """All epochs of one PPO update in one call: ``perm[e]`` orders the rows of epoch ``e``.

    Per minibatch: loss and gradient, SB3's early stop (before the step) when
    ``approx_kl > 1.5 * target_kl``, then clipping and Adam. Sums of the minibatch
    statistics go to ``out[U_*]`` (the caller divides by ``out[U_N_EVAL]``).
    """
    n_epochs = perm.shape[0]
    n_rows = perm.shape[1]
    for k in range(N_UPDATE_STATS):
        out[k] = 0.0
    target_kl = hyp[H_TARGET_KL]
    for e in range(n_epochs):
        stop = False
        for start in range(0, n_rows, mb_size):
            nb = min(mb_size, n_rows - start)
            n = minibatch_loss_grad(
                params, a_layout, c_layout, act, head, nvec, ls_off, obs, act_i, act_f,
                old_logp, adv, ret, old_val, valid, perm[e], start, nb, hyp, ha, hc, dz,
                dprev, grad, rows, mb_stats,
            )  # fmt: skip
            if n == 0:
                continue
            out[U_PG] += mb_stats[ST_PG]
            out[U_VF] += mb_stats[ST_VF]
            out[U_ENT] += mb_stats[ST_ENT]
            out[U_KL] += mb_stats[ST_KL]
            out[U_OLD_KL] += mb_stats[ST_OLD_KL]
            out[U_CLIPFRAC] += mb_stats[ST_CLIPFRAC]
            out[U_LOSS] += mb_stats[ST_LOSS]
            out[U_N_EVAL] += 1.0
            out[U_LAST_KL] = mb_stats[ST_KL]
            if target_kl > 0.0 and mb_stats[ST_KL] > 1.5 * target_kl:
                out[U_EARLY_STOP] = 1.0
                stop = True
                break
            norm = clip_adam_step(
                params, grad, m, v, t, hyp[H_LR], hyp[H_BETA1], hyp[H_BETA2], hyp[H_EPS],
                hyp[H_MAX_GRAD_NORM],
            )  # fmt: skip
            if math.isfinite(norm):
                out[U_GRAD_NORM] += norm
                out[U_N_STEPS] += 1.0
            else:
                out[U_N_SKIPPED] += 1.0
        out[U_EPOCHS] += 1.0
        if stop:
            break


@kernel(
    "void(F_1, i8_2, i8_2, i8, F_2, i8_1, i8, F_1w, F_1w, b1, b1, F_2w, F_1w)",
    fastmath=FASTMATH_SAFE,
)
def policy_forward(
    params,
    a_layout,
    c_layout,
    act,
    obs,
    idx,
    nb,
    ha,
    hc,
    want_actor,
    want_value,
    out_actor,
    out_value,
):  # pragma: no cover - compiled
    """Actor head outputs ``[nb, n_out]`` and/or values ``[nb]`` for rows ``obs[idx[:nb]]``."""
    if want_actor:
        ao = stack_forward(params, a_layout, act, obs, idx, 0, nb, ha)
        n_out = out_actor.shape[1]
        for b in range(nb):
            for j in range(n_out):
                out_actor[b, j] = ha[ao + b * n_out + j]
    if want_value:
        vo = stack_forward(params, c_layout, act, obs, idx, 0, nb, hc)
        for b in range(nb):
            out_value[b] = hc[vo + b]


@kernel(
    "void(F_1, i8_2, i8_2, i8, i8, i8_1, i8, f8, f8, F_2, i8_2, F_2, i8_1, i8, F_1w, F_1w,"
    " F_1w, f8_1w, f8_1w, f8_1w)",
    fastmath=FASTMATH_SAFE,
)
def policy_evaluate(
    params, a_layout, c_layout, act, head, nvec, ls_off, ls_lo, ls_hi, obs, act_i, act_f, idx,
    nb, ha, hc, dz, out_logp, out_ent, out_value,
):  # pragma: no cover - compiled  # fmt: skip
    """Log-probs, entropies and values of stored actions (no gradient)."""
    ao = stack_forward(params, a_layout, act, obs, idx, 0, nb, ha)
    head_rows(
        params, ha, ao, head, nvec, ls_off, ls_lo, ls_hi, act_i, act_f, idx, 0, nb, _ALL_VALID,
        0.0, False, out_logp, dz, dz, out_logp, out_ent,
    )  # fmt: skip
    vo = stack_forward(params, c_layout, act, obs, idx, 0, nb, hc)
    for b in range(nb):
        out_value[b] = hc[vo + b]


def empty_int_actions() -> np.ndarray:
    """Placeholder ``act_i`` for continuous heads (kernels need a typed array)."""
    return np.zeros((1, 1), dtype=np.int64)
