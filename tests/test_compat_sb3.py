"""fastppo.compat.sb3 against Stable-Baselines3 itself (needs the compat-test extra)."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

sb3 = pytest.importorskip("stable_baselines3")
torch = pytest.importorskip("torch")

from stable_baselines3.common.buffers import RolloutBuffer as SB3RolloutBuffer  # noqa: E402

import fastppo  # noqa: E402
from fastppo.compat import sb3 as compat_sb3  # noqa: E402

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
ACT = gym.spaces.Discrete(2)


def _filled(cls: type, T: int, N: int, gamma: float, lam: float, data: dict) -> object:
    buf = cls(T, OBS, ACT, device="cpu", gae_lambda=lam, gamma=gamma, n_envs=N)
    buf.rewards[:] = data["rewards"]
    buf.values[:] = data["values"]
    buf.episode_starts[:] = data["episode_starts"]
    return buf


def _random_rollout(rng: np.random.Generator, T: int, N: int, gamma: float) -> dict:
    """A rollout in fastppo's raw terms plus the same rollout as SB3 stores it."""
    raw = rng.standard_normal((T, N)).astype(np.float32)
    values = rng.standard_normal((T, N)).astype(np.float32)
    term = rng.random((T, N)) < 0.08
    trunc = (rng.random((T, N)) < 0.08) & ~term
    final_values = rng.standard_normal((T, N)).astype(np.float32)
    last_values = rng.standard_normal(N).astype(np.float32)
    # collect_rollouts folds the time-limit bootstrap into the reward ...
    folded = raw + np.float32(gamma) * final_values * trunc
    # ... and episode_starts[t + 1] is step t's done.
    starts = np.zeros((T, N), np.float32)
    starts[0] = rng.random(N) < 0.5  # never read: row 0's predecessor is in the last rollout
    starts[1:] = (term | trunc)[:-1]
    dones = (term | trunc)[-1]
    return {
        "raw": raw,
        "values": values,
        "term": term,
        "trunc": trunc,
        "final_values": final_values,
        "last_values": last_values,
        "rewards": folded,
        "episode_starts": starts,
        "dones": dones,
    }


def _tol(*arrays: np.ndarray) -> float:
    return 2e-6 * max(1.0, max(float(np.abs(a).max()) for a in arrays))


@pytest.mark.parametrize(("T", "N"), [(1, 1), (7, 1), (64, 5), (257, 40)])
@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.9, 0.0), (1.0, 1.0)])
def test_buffer_matches_sb3(T: int, N: int, gamma: float, lam: float) -> None:
    rng = np.random.default_rng(T * 1000 + N)
    d = _random_rollout(rng, T, N, gamma)
    ref = _filled(SB3RolloutBuffer, T, N, gamma, lam, d)
    ours = _filled(compat_sb3.RolloutBuffer, T, N, gamma, lam, d)
    adv_before, ret_before = ours.advantages, ours.returns
    last = torch.from_numpy(d["last_values"].reshape(N, 1))
    ref.compute_returns_and_advantage(last, d["dones"])
    ours.compute_returns_and_advantage(last, d["dones"])
    # written in place into the buffer's own arrays
    assert ours.advantages is adv_before and ours.returns is ret_before
    assert ours.advantages.dtype == np.float32 and ours.returns.dtype == np.float32
    tol = _tol(ref.advantages, ref.returns)
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=0, atol=tol)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=0, atol=tol)


def test_sb3_truncation_handling_equals_native_gae() -> None:
    """SB3's folded bootstrap == fastppo.gae with terminated/truncated/final_values."""
    T, N, gamma, lam = 200, 16, 0.99, 0.95
    d = _random_rollout(np.random.default_rng(7), T, N, gamma)
    assert d["trunc"].any() and d["term"].any()
    ref = _filled(SB3RolloutBuffer, T, N, gamma, lam, d)
    ref.compute_returns_and_advantage(torch.from_numpy(d["last_values"]), d["dones"])
    adv, ret = fastppo.gae(
        d["raw"],
        d["values"],
        d["last_values"],
        d["term"],
        d["trunc"],
        final_values=d["final_values"],
        gamma=gamma,
        gae_lambda=lam,
    )
    tol = _tol(ref.advantages, ref.returns)
    np.testing.assert_allclose(adv, ref.advantages, rtol=0, atol=tol)
    np.testing.assert_allclose(ret, ref.returns, rtol=0, atol=tol)


def test_sb3_gae_function_and_dict_buffer() -> None:
    T, N, gamma, lam = 50, 4, 0.97, 0.9
    d = _random_rollout(np.random.default_rng(3), T, N, gamma)
    ref = _filled(SB3RolloutBuffer, T, N, gamma, lam, d)
    ref.compute_returns_and_advantage(torch.from_numpy(d["last_values"][:, None]), d["dones"])
    # torch CPU tensors in, SB3's [N, 1] last values
    adv, ret = compat_sb3.sb3_gae(
        torch.from_numpy(d["rewards"]),
        torch.from_numpy(d["values"]),
        torch.from_numpy(d["episode_starts"]),
        torch.from_numpy(d["last_values"][:, None]),
        torch.from_numpy(d["dones"]),
        gamma=gamma,
        gae_lambda=lam,
    )
    tol = _tol(ref.advantages)
    np.testing.assert_allclose(adv, ref.advantages, rtol=0, atol=tol)
    np.testing.assert_allclose(ret, ref.returns, rtol=0, atol=tol)

    space = gym.spaces.Dict({"a": OBS})
    buf = compat_sb3.DictRolloutBuffer(
        T, space, ACT, device="cpu", gae_lambda=lam, gamma=gamma, n_envs=N
    )
    buf.rewards[:] = d["rewards"]
    buf.values[:] = d["values"]
    buf.episode_starts[:] = d["episode_starts"]
    buf.compute_returns_and_advantage(torch.from_numpy(d["last_values"][:, None]), d["dones"])
    np.testing.assert_allclose(buf.advantages, ref.advantages, rtol=0, atol=tol)


class _CountTruncations(gym.Wrapper):
    count = 0

    def step(self, action):  # type: ignore[no-untyped-def]
        obs, r, term, trunc, info = self.env.step(action)
        if trunc and not term:
            _CountTruncations.count += 1
        return obs, r, term, trunc, info


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_ppo_rollout_with_time_limits_matches_sb3() -> None:
    """Real collect_rollouts (time-limit bootstraps included), SB3 buffer vs ours."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    def make(cls: type | None) -> object:
        env = make_vec_env(
            lambda: _CountTruncations(gym.make("CartPole-v1", max_episode_steps=12)),
            n_envs=4,
            seed=11,
        )
        kw = {} if cls is None else {"rollout_buffer_class": cls}
        model = PPO(
            "MlpPolicy", env, n_steps=64, batch_size=64, n_epochs=1, seed=5, device="cpu", **kw
        )
        model._setup_learn(total_timesteps=256)
        model.collect_rollouts(
            model.env, model._init_callback(None), model.rollout_buffer, n_rollout_steps=64
        )
        return model.rollout_buffer

    _CountTruncations.count = 0
    ref = make(None)
    assert _CountTruncations.count > 0  # the rollout did exercise the time-limit bootstrap
    ours = make(compat_sb3.RolloutBuffer)
    assert type(ours) is compat_sb3.RolloutBuffer
    np.testing.assert_array_equal(ours.rewards, ref.rewards)  # same rollout
    tol = _tol(ref.advantages, ref.returns)
    np.testing.assert_allclose(ours.advantages, ref.advantages, rtol=0, atol=tol)
    np.testing.assert_allclose(ours.returns, ref.returns, rtol=0, atol=tol)


def test_missing_sb3_raises_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "stable_baselines3.common.buffers", None)
    with pytest.raises(ImportError, match=r"pip install stable-baselines3"):
        compat_sb3._make_buffers()


def test_sb3_gae_rejects_bad_input() -> None:
    r = np.zeros((5, 3), np.float32)
    starts = np.zeros((5, 3), np.float32)
    lv = np.zeros(3, np.float32)
    dones = np.zeros(3, bool)
    with pytest.raises(ValueError, match=r"sb3_gae: episode_starts must be shape \(5, 3\)"):
        compat_sb3.sb3_gae(r, r, starts[:4], lv, dones)
    with pytest.raises(ValueError, match=r"sb3_gae: dones must be shape \(3,\)"):
        compat_sb3.sb3_gae(r, r, starts, lv, dones[:2])
    with pytest.raises(TypeError, match=r"sb3_gae: rewards must be float32 or float64"):
        compat_sb3.sb3_gae(r.astype(np.int32), r, starts, lv, dones)
    with pytest.raises(ValueError, match=r"sb3_gae: episode_starts must be 0/1 flags"):
        compat_sb3.sb3_gae(r, r, starts + 0.5, lv, dones)
    with pytest.raises(ValueError, match=r"gae: last_values must be shape \(3,\)"):
        compat_sb3.sb3_gae(r, r, starts, lv[:2], dones)
