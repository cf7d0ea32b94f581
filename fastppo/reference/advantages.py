"""Reference GAE, V-trace and discounted returns: float64, plain loops over time and envs."""

from __future__ import annotations

import numpy as np


def _prep(rewards, terminated, truncated, final_values, valid):
    r = np.asarray(rewards, np.float64)
    one_d = r.ndim == 1
    r2 = r.reshape(r.shape[0], -1)
    shape = r2.shape

    def flags(x, default):
        if x is None:
            return np.full(shape, default, bool)
        return np.asarray(x).reshape(shape) != 0

    term = flags(terminated, False)
    trunc = flags(truncated, False)
    ok = flags(valid, True)
    fv = None if final_values is None else np.asarray(final_values, np.float64).reshape(shape)
    return one_d, r2, term, trunc, fv, ok


def _next_value(t, n, T, values, last, term, trunc, fv):
    """Bootstrap value for step t of env n, and whether the trace is cut."""
    nv = last[n] if t == T - 1 else values[t + 1, n]
    if term[t, n]:
        return 0.0, True
    if trunc[t, n]:
        return (fv[t, n] if fv is not None else nv), True
    return nv, False


def gae(
    rewards,
    values,
    last_values,
    terminated,
    truncated=None,
    *,
    final_values=None,
    valid=None,
    gamma=0.99,
    gae_lambda=0.95,
):
    """Generalized Advantage Estimation, arXiv 1506.02438, as API.md specifies."""
    one_d, r, term, trunc, fv, ok = _prep(rewards, terminated, truncated, final_values, valid)
    v = np.asarray(values, np.float64).reshape(r.shape)
    last = np.asarray(last_values, np.float64).reshape(-1)
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        a_next = 0.0
        for t in reversed(range(T)):
            if not ok[t, n]:
                adv[t, n] = 0.0
                a_next = 0.0
                continue
            nv, cut = _next_value(t, n, T, v, last, term, trunc, fv)
            delta = r[t, n] + gamma * nv - v[t, n]
            adv[t, n] = delta + (0.0 if cut else gamma * gae_lambda * a_next)
            a_next = adv[t, n]
    ret = adv + v
    if one_d:
        return adv[:, 0], ret[:, 0]
    return adv, ret


def vtrace(
    behavior_logp,
    target_logp,
    rewards,
    values,
    last_values,
    terminated,
    truncated=None,
    *,
    final_values=None,
    valid=None,
    gamma=0.99,
    lam=1.0,
    rho_bar=1.0,
    c_bar=1.0,
    pg_rho_bar=1.0,
):
    """V-trace, arXiv 1802.01561, with separate rho_bar / c_bar / pg_rho_bar and lam."""
    one_d, r, term, trunc, fv, ok = _prep(rewards, terminated, truncated, final_values, valid)
    v = np.asarray(values, np.float64).reshape(r.shape)
    last = np.asarray(last_values, np.float64).reshape(-1)
    rho = np.exp(
        np.asarray(target_logp, np.float64).reshape(r.shape)
        - np.asarray(behavior_logp, np.float64).reshape(r.shape)
    )
    T, N = r.shape
    vs = np.zeros((T, N))
    pg = np.zeros((T, N))
    for n in range(N):
        diff_next = 0.0  # vs_{t+1} - V_{t+1}
        for t in reversed(range(T)):
            if not ok[t, n]:
                vs[t, n] = v[t, n]
                pg[t, n] = 0.0
                diff_next = 0.0
                continue
            nv, cut = _next_value(t, n, T, v, last, term, trunc, fv)
            carry = 0.0 if cut else diff_next
            delta = min(rho_bar, rho[t, n]) * (r[t, n] + gamma * nv - v[t, n])
            c = lam * min(c_bar, rho[t, n])
            diff = delta + gamma * c * carry
            vs[t, n] = v[t, n] + diff
            next_vs = nv + carry  # vs_{t+1} inside an episode, the bootstrap at a boundary
            pg[t, n] = min(pg_rho_bar, rho[t, n]) * (r[t, n] + gamma * next_vs - v[t, n])
            diff_next = diff
    if one_d:
        return vs[:, 0], pg[:, 0]
    return vs, pg


def discounted_returns(
    rewards, last_values, terminated, truncated=None, *, final_values=None, valid=None, gamma=0.99
):
    """Bootstrapped discounted return G_t = r_t + gamma * G_{t+1}, cut at episode ends."""
    one_d, r, term, trunc, fv, ok = _prep(rewards, terminated, truncated, final_values, valid)
    last = np.asarray(last_values, np.float64).reshape(-1)
    T, N = r.shape
    g = np.zeros((T, N))
    for n in range(N):
        for t in reversed(range(T)):
            if not ok[t, n]:
                g[t, n] = 0.0
                continue
            nxt = last[n] if t == T - 1 else g[t + 1, n]
            if term[t, n]:
                boot = 0.0
            elif trunc[t, n]:
                boot = fv[t, n] if fv is not None else nxt
            else:
                boot = nxt
            g[t, n] = r[t, n] + gamma * boot
    return g[:, 0] if one_d else g


def next_step_valid(terminated, truncated, prev_done=None):
    """valid[t] is False when step t-1 ended an episode (next-step autoreset's reset row)."""
    done = (np.asarray(terminated) != 0) | (np.asarray(truncated) != 0)
    valid = np.ones(done.shape, bool)
    for t in range(done.shape[0]):
        if t == 0:
            if prev_done is not None:
                valid[0] = ~(np.asarray(prev_done) != 0)
        else:
            valid[t] = ~done[t - 1]
    return valid
