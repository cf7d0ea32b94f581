"""fastppo.compat.sb3.CompiledVecEnv: SB3's VecEnv conventions, and SB3's PPO trains on it.

Needs the compat-test extra (stable_baselines3, torch); without it the module
is skipped as a whole, visibly (``pytest.importorskip``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest

sb3 = pytest.importorskip("stable_baselines3")
torch = pytest.importorskip("torch")

from stable_baselines3.common.vec_env import (  # noqa: E402
    DummyVecEnv,
    VecCheckNan,
    VecEnv,
    VecMonitor,
    VecNormalize,
)

from fastppo import envs  # noqa: E402
from fastppo.compat import sb3 as compat_sb3  # noqa: E402
from fastppo.compat.sb3 import make_vec_env  # noqa: E402

N = 8


def _flags(infos: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    has_term = np.array(["terminal_observation" in d for d in infos])
    limit = np.array([d["TimeLimit.truncated"] for d in infos])
    return has_term, limit


# ---- (a) conventions -------------------------------------------------------------------


@pytest.mark.parametrize("env_id", envs.ids())
def test_shapes_dtypes_and_info_keys(env_id: str) -> None:
    env = make_vec_env(env_id, N, seed=0)
    assert isinstance(env, VecEnv) and env.num_envs == N
    assert env.observation_space == gym.make(env_id).observation_space
    assert env.action_space == gym.make(env_id).action_space
    obs = env.reset()
    assert isinstance(obs, np.ndarray)
    assert obs.dtype == np.float32 and obs.shape == (N, *env.observation_space.shape)
    assert env.reset_infos == [{} for _ in range(N)]
    for _ in range(5):
        # what SB3's policies give: int64 [N] or float32 [N, A]
        actions = np.array([env.action_space.sample() for _ in range(N)])
        obs, rew, dones, infos = env.step(actions)
        assert obs.dtype == np.float32 and obs.shape == (N, *env.observation_space.shape)
        assert rew.dtype == np.float32 and rew.shape == (N,)
        assert dones.dtype == np.bool_ and dones.shape == (N,)
        assert isinstance(infos, list) and len(infos) == N
        assert all(type(d) is dict for d in infos)
        assert all(env.observation_space.contains(o) for o in obs)
    env.close()


@pytest.mark.parametrize("env_id", envs.ids())
def test_same_trajectory_as_the_compiled_env_same_step(env_id: str) -> None:
    """obs, rewards, dones and terminal_observation are the compiled env's own same-step
    results; TimeLimit.truncated is truncated and not terminated."""
    env = make_vec_env(env_id, N, seed=3)
    ref = envs.make_vec(env_id, N, seed=3, autoreset_mode="same_step")
    np.testing.assert_array_equal(env.reset(), ref.reset()[0])
    # start near the time limit so truncations come quickly, beside terminations
    limit = ref.max_episode_steps
    start = limit - 1 - np.arange(N) * 7
    env.venv.elapsed_steps[:] = start
    ref.elapsed_steps[:] = start
    rng = np.random.default_rng(1)
    seen_trunc = seen_done = 0
    for _ in range(80):
        if ref._discrete:
            a = rng.integers(0, ref.single_action_space.n, N)
        else:
            a = rng.uniform(-1.5, 1.5, (N, 1)).astype(np.float32)
        obs, rew, dones, infos = env.step(a)
        r_obs, r_rew, r_term, r_trunc, r_info = ref.step(a)
        np.testing.assert_array_equal(obs, r_obs)
        np.testing.assert_array_equal(rew, r_rew.astype(np.float32))
        np.testing.assert_array_equal(dones, r_term | r_trunc)
        has_term, tl = _flags(infos)
        np.testing.assert_array_equal(has_term, dones)
        np.testing.assert_array_equal(tl, r_trunc & ~r_term)
        for i in np.flatnonzero(dones):
            term_obs = infos[i]["terminal_observation"]
            assert term_obs.dtype == np.float32 and term_obs.shape == obs.shape[1:]
            np.testing.assert_array_equal(term_obs, r_info["final_obs"][i])
        seen_trunc += int((r_trunc & ~r_term).sum())
        seen_done += int(dones.sum())
    assert seen_trunc >= 1  # env 0 is cut at its first step
    assert seen_done >= seen_trunc


def _time_limit(env: gym.Env) -> gym.wrappers.TimeLimit:
    while not isinstance(env, gym.wrappers.TimeLimit):
        env = env.env  # type: ignore[attr-defined]
    return env


def test_cartpole_matches_sb3_dummy_vec_env_to_each_first_done() -> None:
    """Beside SB3's DummyVecEnv of gymnasium CartPole-v1 envs put in the same states:
    the same obs, rewards, dones and infos (keys and values) up to each env's first
    done, terminations and time-limit truncations both."""
    env = make_vec_env("CartPole-v1", N, seed=0)
    dummy = DummyVecEnv([lambda: gym.make("CartPole-v1") for _ in range(N)])
    env.reset()
    dummy.reset()
    # envs 0-3 play until they fall; envs 4-7 are cut by the time limit within 5 steps
    start = np.r_[np.zeros(N // 2, np.int64), 495 + np.arange(N // 2)]
    env.venv.elapsed_steps[:] = start
    for i, e in enumerate(dummy.envs):
        e.unwrapped.state = env.venv.state[i].copy()  # type: ignore[attr-defined]
        _time_limit(e)._elapsed_steps = int(start[i])
    rng = np.random.default_rng(0)
    live = np.ones(N, bool)
    kinds = set()
    while live.any():
        a = rng.integers(0, 2, N)
        obs, rew, dones, infos = env.step(a)
        d_obs, d_rew, d_dones, d_infos = dummy.step(a)
        assert rew.dtype == d_rew.dtype and dones.dtype == d_dones.dtype
        for i in np.flatnonzero(live):
            assert rew[i] == d_rew[i] and dones[i] == d_dones[i]
            assert infos[i].keys() == d_infos[i].keys()
            assert infos[i]["TimeLimit.truncated"] == d_infos[i]["TimeLimit.truncated"]
            if dones[i]:
                np.testing.assert_array_equal(
                    infos[i]["terminal_observation"], d_infos[i]["terminal_observation"]
                )
                kinds.add(infos[i]["TimeLimit.truncated"])
                live[i] = False  # the two reset draws differ from here on
            else:
                np.testing.assert_array_equal(obs[i], d_obs[i])
    assert kinds == {True, False}


def test_time_limit_truncated_only_on_truncation() -> None:
    env = make_vec_env("CartPole-v1", 2, seed=0)
    env.reset()
    # env 0 one step from the limit, upright; env 1 far past the angle limit
    env.venv.state[:] = [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.5, 0.0]]
    env.venv.elapsed_steps[:] = [499, 10]
    obs, _, dones, infos = env.step(np.array([0, 0]))
    assert dones.tolist() == [True, True]
    assert infos[0]["TimeLimit.truncated"] is True
    assert infos[1]["TimeLimit.truncated"] is False
    assert infos[1]["terminal_observation"][2] > 0.4  # the angle before the reset
    assert np.abs(obs).max() <= 0.05  # both were reset in the same step
    assert env.venv.elapsed_steps.tolist() == [0, 0]
    # terminated and truncated at once: terminated wins, as in DummyVecEnv
    env.venv.state[0] = [0.0, 0.0, 0.5, 0.0]
    env.venv.elapsed_steps[0] = 499
    _, _, dones, infos = env.step(np.array([0, 0]))
    assert dones[0] and infos[0]["TimeLimit.truncated"] is False


# ---- seeds and options, as DummyVecEnv takes them --------------------------------------


def test_seed_applies_to_the_next_reset_only() -> None:
    env = make_vec_env("CartPole-v1", N, seed=0)
    assert env.seed(10) == [10 + i for i in range(N)]
    a = env.reset()
    ref = envs.make_vec("CartPole-v1", N, autoreset_mode="same_step")
    np.testing.assert_array_equal(a, ref.reset(seed=[10 + i for i in range(N)])[0])
    b = env.reset()  # no seed: the streams continue
    assert not np.array_equal(a, b)
    env.seed(10)
    np.testing.assert_array_equal(env.reset(), a)
    # make_vec_env's seed keys the streams: same seed, same first reset
    np.testing.assert_array_equal(
        make_vec_env("CartPole-v1", N, seed=5).reset(),
        make_vec_env("CartPole-v1", N, seed=5).reset(),
    )


def test_partial_seeds_and_per_env_options() -> None:
    env = make_vec_env("CartPole-v1", 4, seed=0)
    first = env.reset()
    env._seeds = [7, None, 7, None]  # what a caller may set by hand
    env.set_options([{"low": -1e-3, "high": 1e-3}, {}, {}, {"low": 0.2, "high": 0.2}])
    obs = env.reset()
    assert np.abs(obs[0]).max() <= 1e-3
    np.testing.assert_allclose(obs[3], 0.2, rtol=1e-6)
    # env 2: seeded with 7, default bounds: what a fresh env seeded with 7 would draw
    ref = envs.make_vec("CartPole-v1", 4, autoreset_mode="same_step")
    np.testing.assert_array_equal(obs[2], ref.reset(seed=[7] * 4)[0][2])
    assert not np.array_equal(obs[1], first[1])  # unseeded: the stream went on
    assert env._seeds == [None] * 4 and env._options == [{}] * 4
    with pytest.raises(ValueError, match=r"^CompiledVecEnv\.reset: options \(set_options\) must"):
        env.set_options({"bogus": 1.0})
        env.reset()


# ---- (b) SB3's VecEnv API and wrappers -------------------------------------------------


def test_sb3_wrappers_run_on_it() -> None:
    env = VecMonitor(VecNormalize(VecCheckNan(make_vec_env("CartPole-v1", N, seed=0))))
    obs = env.reset()
    assert obs.shape == (N, 4)
    episodes = 0
    for _ in range(200):
        obs, rew, dones, infos = env.step(np.ones(N, np.int64))
        for i in np.flatnonzero(dones):
            assert "episode" in infos[i] and "terminal_observation" in infos[i]
            episodes += 1
    assert episodes > 0
    assert env.unwrapped.venv.env_id == "CartPole-v1"


def test_attributes_methods_and_render() -> None:
    env = make_vec_env("Pendulum-v1", 3, seed=0)
    spec = gym.spec("Pendulum-v1")
    assert env.get_attr("spec")[0].id == spec.id
    assert env.get_attr("render_mode") == [None] * 3
    assert env.get_attr("action_space", indices=[1]) == [env.action_space]
    assert env.get_attr("observation_space", 2) == [env.observation_space]
    assert env.get_attr("metadata")[0]["render_modes"] == ["rgb_array"]
    assert env.has_attr("spec") and not env.has_attr("np_random")
    assert env.env_is_wrapped(gym.wrappers.TimeLimit) == [False] * 3
    with pytest.raises(AttributeError, match=r"^CompiledVecEnv\.get_attr: attr_name must be"):
        env.get_attr("np_random")
    with pytest.raises(ValueError, match=r"^CompiledVecEnv\.get_attr: indices must be"):
        env.get_attr("spec", indices=[3])
    with pytest.raises(NotImplementedError, match=r"^CompiledVecEnv\.set_attr: cannot set"):
        env.set_attr("g", 9.0)
    with pytest.raises(NotImplementedError, match=r"^CompiledVecEnv\.env_method: cannot call"):
        env.env_method("reset")
    with pytest.warns(UserWarning, match="render_mode='rgb_array'"):
        assert env.get_images() == [None] * 3
    assert repr(env) == "CompiledVecEnv(Pendulum-v1, n_envs=3)"
    env.close()


def test_rgb_array_frames_are_dummy_vec_envs() -> None:
    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env

    ours = make_vec_env("CartPole-v1", 2, seed=0, render_mode="rgb_array")
    theirs = sb3_make_vec_env("CartPole-v1", 2, env_kwargs={"render_mode": "rgb_array"})
    ours.reset()
    theirs.reset()
    assert ours.get_attr("render_mode") == theirs.get_attr("render_mode")
    for i, env in enumerate(theirs.envs):
        ours.unwrapped.venv.state[i] = env.unwrapped.state
    for a, b in zip(ours.get_images(), theirs.get_images()):
        assert a.shape == (400, 600, 3) and np.array_equal(a, b)
    assert np.array_equal(ours.render(), theirs.render())  # SB3's tiling of both
    ours.close()
    theirs.close()


def test_bad_actions_and_arguments_use_the_house_format() -> None:
    env = make_vec_env("CartPole-v1", 2, seed=0)
    env.reset()
    with pytest.raises(ValueError, match=r"^CompiledVecEnv\.step: actions must be integer"):
        env.step(np.array([0, 2]))
    with pytest.raises(TypeError, match=r"^CompiledVecEnv\.step: actions must be integer"):
        env.step(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r"^CompiledVecEnv\.step: actions must be shape \(2,\)"):
        env.step(np.zeros(3, np.int64))
    env.step(np.array([1, 0]))  # nothing moved: it still steps
    cont = make_vec_env("Pendulum-v1", 2, seed=0)
    cont.reset()
    with pytest.raises(ValueError, match=r"^CompiledVecEnv\.step: actions must be actions"):
        cont.step(np.array([[0.0], [np.nan]], np.float32))
    with pytest.raises(ValueError, match=r"^fastppo\.compat\.sb3\.make_vec_env: n_envs must be"):
        make_vec_env("CartPole-v1", 0)
    with pytest.raises(ValueError, match=r"env_id must be one of CartPole-v1"):
        make_vec_env("LunarLander-v3", 2)
    with pytest.raises(TypeError, match=r"^CompiledVecEnv: venv must be a fastppo"):
        compat_sb3.CompiledVecEnv(DummyVecEnv([lambda: gym.make("CartPole-v1")]))
    with pytest.raises(ValueError, match=r"autoreset_mode='same_step'"):
        compat_sb3.CompiledVecEnv(envs.make_vec("CartPole-v1", 2))


def test_without_sb3_the_error_names_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    monkeypatch.setitem(sys.modules, "stable_baselines3.common.vec_env", None)
    monkeypatch.delitem(compat_sb3.__dict__, "CompiledVecEnv", raising=False)
    with pytest.raises(
        ImportError, match=r"CompiledVecEnv needs .*`pip install stable-baselines3`"
    ):
        make_vec_env("CartPole-v1", 2)


# ---- (c) SB3's PPO learns CartPole-v1 on it --------------------------------------------


def _linear(v: float) -> Callable[[float], float]:
    """rl-zoo3's ``lin_<v>`` schedule."""
    return lambda progress_remaining: progress_remaining * v


@pytest.mark.slow
def test_sb3_ppo_trains_cartpole_to_500() -> None:
    """rl-zoo3's CartPole-v1 PPO hyperparameters, 1e5 steps, on the compiled env.

    About 40-60 s on one core of a small machine (``torch.set_num_threads(1)``).
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        env = VecMonitor(make_vec_env("CartPole-v1", 8, seed=0))
        model = PPO(
            "MlpPolicy",
            env,
            n_steps=32,
            batch_size=256,
            gae_lambda=0.8,
            gamma=0.98,
            n_epochs=20,
            ent_coef=0.0,
            learning_rate=_linear(1e-3),
            clip_range=_linear(0.2),
            seed=0,
            device="cpu",
        )
        t0 = time.perf_counter()
        model.learn(total_timesteps=100_000)
        took = time.perf_counter() - t0
        # on the wrapped env and on gymnasium's own CartPole-v1
        ours, _ = evaluate_policy(
            model, VecMonitor(make_vec_env("CartPole-v1", 1, seed=100)), 5, deterministic=True
        )
        theirs, _ = evaluate_policy(model, Monitor(gym.make("CartPole-v1")), 5, deterministic=True)
    finally:
        torch.set_num_threads(threads)
    print(f"SB3 PPO 1e5 steps on CompiledVecEnv: {took:.1f} s; eval {ours} / {theirs}")
    assert ours == 500.0, f"mean evaluation return on the compiled env {ours}"
    assert theirs == 500.0, f"mean evaluation return on gymnasium's env {theirs}"
