"""fastppo.compat.gym with real gymnasium vector envs, in both autoreset modes.

The reference is built from single (non-vector) envs stepped by hand, where
every transition's true next observation is known; GAE over each env's
transitions by the textbook definition must equal fastppo.gae on the vector
rollout at every valid row, whichever autoreset mode produced it.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import fastppo
from fastppo.compat.gym import FinalObs, RolloutFlags, autoreset_mode, final_obs

GAMMA, LAM = 0.97, 0.9
W_POLICY = np.array([0.5, 0.3, -0.2, 0.1])  # falls in about 9 steps: both episode ends occur
W_VALUE = np.array([0.7, -1.1, 2.3, 0.4])
MAX_STEPS = 9  # short time limit: many truncations as well as terminations


def policy(obs: np.ndarray) -> np.ndarray:
    return (obs @ W_POLICY > 0).astype(np.int64)


def value(obs: np.ndarray) -> np.ndarray:
    return np.tanh(np.asarray(obs, np.float64) @ W_VALUE) + 0.5


def make_env() -> gym.Env:
    return gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)


def vector_rollout(mode: AutoresetMode, T: int, N: int, seed: int, rollouts: int = 2):
    envs = SyncVectorEnv([make_env for _ in range(N)], autoreset_mode=mode)
    obs, _ = envs.reset(seed=seed)
    flags = RolloutFlags(T, N, envs, dtype=np.float64)
    out = []
    for _ in range(rollouts):
        rewards = np.zeros((T, N))
        values = np.zeros((T, N))
        for t in range(T):
            values[t] = value(obs)
            obs, r, term, trunc, infos = envs.step(policy(obs))
            rewards[t] = r
            flags.record(t, term, trunc, infos, value_fn=value)
        adv, ret = fastppo.gae(
            rewards, values, value(obs), **flags.gae_kwargs(), gamma=GAMMA, gae_lambda=LAM
        )
        valid = flags.valid if flags.mode == "next_step" else np.ones((T, N), bool)
        out.append((adv, ret, valid, flags.terminated.copy(), flags.truncated.copy()))
        flags.next_rollout()
    envs.close()
    return out


def reference(seed: int, n_env: int, n_transitions: list[int]) -> list[np.ndarray]:
    """Per rollout, textbook GAE over env n_env's transitions (single env, by hand)."""
    env = make_env()
    obs, _ = env.reset(seed=seed + n_env)  # SyncVectorEnv seeds sub-env i with seed + i
    results = []
    for k in n_transitions:
        rows = []
        for _ in range(k):
            o = obs
            nxt, r, term, trunc, _ = env.step(int(policy(o[None])[0]))
            rows.append((o, r, term, trunc, nxt))
            obs = env.reset()[0] if (term or trunc) else nxt
        adv = np.zeros(k)
        a_next = 0.0
        for i in reversed(range(k)):
            o, r, term, trunc, nxt = rows[i]
            v_next = 0.0 if term else float(value(nxt[None])[0])
            delta = r + GAMMA * v_next - float(value(o[None])[0])
            cut = term or trunc or i == k - 1  # last row: the bootstrap is in delta
            a_next = delta + (0.0 if cut else GAMMA * LAM * a_next)
            adv[i] = a_next
        results.append(adv)
    return results


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_rollout_matches_single_env_reference(mode: AutoresetMode) -> None:
    T, N, seed = 40, 3, 123
    rollouts = vector_rollout(mode, T, N, seed)
    term_all = np.concatenate([r[3] for r in rollouts])
    trunc_all = np.concatenate([r[4] for r in rollouts])
    assert term_all.any() and trunc_all.any()  # both kinds of episode end were exercised
    if mode == AutoresetMode.NEXT_STEP:
        assert not all(r[2].all() for r in rollouts)  # reset rows were masked
    for n in range(N):
        counts = [int(valid[:, n].sum()) for _, _, valid, _, _ in rollouts]
        refs = reference(seed, n, counts)
        for (adv, _ret, valid, _, _), ref in zip(rollouts, refs):
            np.testing.assert_allclose(adv[valid[:, n], n], ref, rtol=1e-12, atol=1e-12)
            # reset rows are no transition: zero advantage (API contract)
            assert np.all(adv[~valid[:, n], n] == 0)


def test_modes_give_same_transitions_and_advantages() -> None:
    """Both modes see the same episodes; the valid rows' advantages agree."""
    T, N, seed = 60, 2, 5
    nxt = vector_rollout(AutoresetMode.NEXT_STEP, T, N, seed, rollouts=1)[0]
    same = vector_rollout(AutoresetMode.SAME_STEP, T, N, seed, rollouts=1)[0]
    compared = 0
    for n in range(N):
        a_next = nxt[0][nxt[2][:, n], n]
        k = a_next.shape[0]
        # the same-step rollout ran further; its first k transitions are the same
        # ones, but only rows whose whole GAE trace lies inside both rollouts agree
        ends = np.flatnonzero(same[3][:k, n] | same[4][:k, n])
        if ends.size:
            upto = ends[-1] + 1
            np.testing.assert_allclose(a_next[:upto], same[0][:upto, n], rtol=1e-12, atol=1e-12)
            compared += upto
    assert compared > 0


def test_autoreset_mode_parsing() -> None:
    envs = SyncVectorEnv([make_env], autoreset_mode=AutoresetMode.SAME_STEP)
    assert autoreset_mode(envs) == "same_step"
    assert autoreset_mode(AutoresetMode.NEXT_STEP) == "next_step"
    assert autoreset_mode("SameStep") == "same_step"
    assert autoreset_mode("next_step") == "next_step"
    with pytest.raises(ValueError, match=r"autoreset_mode: env_or_mode must be autoreset mode"):
        autoreset_mode(AutoresetMode.DISABLED)
    with pytest.raises(TypeError, match=r"autoreset_mode: env_or_mode must be a vector env"):
        autoreset_mode(3)
    envs.close()


def test_final_obs_request() -> None:
    term = np.array([False, True, False, True])
    trunc = np.array([True, False, False, True])  # env 3: both -> no value needed
    fo = np.full(4, None, dtype=object)
    fo[0], fo[1], fo[3] = np.ones(2), np.zeros(2), np.full(2, 3.0)
    infos = {"final_obs": fo, "_final_obs": np.array([True, True, False, True])}
    req = final_obs(term, trunc, infos, "same_step")
    assert isinstance(req, FinalObs) and len(req) == 1
    np.testing.assert_array_equal(req.env_ids, [0])
    np.testing.assert_array_equal(req.obs, [[1.0, 1.0]])
    assert len(final_obs(term, trunc, {}, "next_step")) == 0
    assert final_obs(term, np.zeros(4, bool), {}, "same_step").obs is None
    with pytest.raises(ValueError, match=r"final_obs: infos must be a dict with 'final_obs'"):
        final_obs(term, trunc, {}, "same_step")
    bad = dict(infos, _final_obs=np.array([False, True, False, True]))
    with pytest.raises(ValueError, match=r"final_obs: infos\['_final_obs'\] must be True"):
        final_obs(term, trunc, bad, "same_step")
    # dict observations cannot be stacked: a list comes back
    fo2 = np.full(1, None, dtype=object)
    fo2[0] = {"a": np.zeros(2)}
    req2 = final_obs([False], [True], {"final_obs": fo2}, "same_step")
    assert isinstance(req2.obs, list) and req2.obs[0]["a"].shape == (2,)


def test_rollout_flags_bookkeeping_and_errors() -> None:
    flags = RolloutFlags(3, 2, "next_step")
    flags.record(0, [False, True], [False, False])
    flags.record(1, [False, False], [True, False])
    flags.record(2, [False, False], [False, True])
    np.testing.assert_array_equal(flags.valid, [[1, 1], [1, 0], [0, 1]])
    kw = flags.gae_kwargs()
    assert set(kw) == {"terminated", "truncated", "valid"}
    flags.next_rollout()
    np.testing.assert_array_equal(flags.prev_done, [False, True])
    assert not flags.terminated.any() and not flags.truncated.any()
    np.testing.assert_array_equal(flags.valid[0], [True, False])  # carried into row 0

    same = RolloutFlags(2, 2, "same_step", dtype=np.float32)
    fo = np.full(2, None, dtype=object)
    fo[1] = np.array([2.0])
    req = same.record(0, [False, False], [False, True], {"final_obs": fo})
    same.set_final_values(0, req, np.array([[5.0]]))
    np.testing.assert_array_equal(same.final_values, [[0, 5], [0, 0]])
    assert same.valid is None and set(same.gae_kwargs()) == {
        "terminated",
        "truncated",
        "final_values",
    }
    with pytest.raises(ValueError, match=r"RolloutFlags.record: t must be an int in \[0, 2\)"):
        same.record(2, [False, False], [False, False])
    with pytest.raises(ValueError, match=r"RolloutFlags.record: terminated must be shape \(2,\)"):
        same.record(0, [False], [False, False])
    with pytest.raises(ValueError, match=r"set_final_values: values must be shape \(1,\)"):
        same.set_final_values(0, req, np.zeros(2))
    with pytest.raises(ValueError, match=r"set_final_values: values must be finite"):
        same.set_final_values(0, req, np.array([np.nan]))
    with pytest.raises(ValueError, match=r"RolloutFlags: n_steps must be >= 1"):
        RolloutFlags(0, 2)
    with pytest.raises(TypeError, match=r"RolloutFlags: dtype must be float32 or float64"):
        RolloutFlags(2, 2, dtype=np.int32)
