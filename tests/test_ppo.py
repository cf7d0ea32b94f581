"""PPO config, update, rollouts under next-step autoreset, trainer determinism, checkpoints,
and a short CartPole learning test."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

from fastppo._files import CHECKPOINT_JSON as META  # noqa: E402
from fastppo._files import CHECKPOINT_NPZ as NPZ  # noqa: E402
from fastppo.nn import ActorCritic, Adam  # noqa: E402
from fastppo.ppo import PPOConfig, PPOTrainer, RolloutBatch, ppo_update  # noqa: E402

CLEANRL_NAMES = (
    "losses/policy_loss",
    "losses/value_loss",
    "losses/entropy",
    "losses/approx_kl",
    "losses/old_approx_kl",
    "losses/clipfrac",
    "losses/explained_variance",
)


# ---------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("changes", "exc", "match"),
    [
        ({"n_envs": 0}, ValueError, "PPOConfig: n_envs must be >= 1, got 0"),
        ({"n_steps": 2.5}, TypeError, "PPOConfig: n_steps must be an int, got 2.5"),
        ({"batch_size": 10_000}, ValueError, r"PPOConfig: batch_size must be <= n_envs \* n_steps"),
        ({"gamma": 1.5}, ValueError, r"PPOConfig: gamma must be in \[0, 1\], got 1.5"),
        ({"gae_lambda": -0.1}, ValueError, "PPOConfig: gae_lambda must be in"),
        ({"clip_range": 0.0}, ValueError, r"PPOConfig: clip_range must be in \(0, inf\], got 0.0"),
        ({"clip_range_vf": -1.0}, ValueError, "PPOConfig: clip_range_vf must be in"),
        ({"learning_rate": float("nan")}, ValueError, "PPOConfig: learning_rate must be in"),
        (
            {"max_grad_norm": "big"},
            TypeError,
            "PPOConfig: max_grad_norm must be a real number or None",
        ),
        ({"target_kl": 0.0}, ValueError, "PPOConfig: target_kl must be in"),
        (
            {"activation": "gelu"},
            ValueError,
            "PPOConfig: activation must be 'tanh' or 'relu', got 'gelu'",
        ),
        (
            {"hidden_sizes": (64, -1)},
            ValueError,
            "PPOConfig: hidden_sizes must be a tuple of positive ints",
        ),
        (
            {"vectorization": "ray"},
            ValueError,
            "PPOConfig: vectorization must be 'sync' or 'async'",
        ),
        ({"normalize_obs": 1}, TypeError, "PPOConfig: normalize_obs must be a bool, got 1"),
        ({"anneal_clip": "yes"}, TypeError, "PPOConfig: anneal_clip must be a bool, got 'yes'"),
        ({"log_std_min": 3.0}, ValueError, r"PPOConfig: log_std_min must be < log_std_max \(2.0\)"),
        ({"log_std_init": -30.0}, ValueError, r"PPOConfig: log_std_init must be in \[-20.0, 2.0\]"),
    ],
)
def test_config_errors(changes, exc, match):
    with pytest.raises(exc, match=match):
        PPOConfig(**changes).validate()


def test_config_dict_round_trip_and_unknown_keys():
    cfg = PPOConfig(n_envs=3, hidden_sizes=(32,), target_kl=0.02)
    d = json.loads(json.dumps(cfg.to_dict()))
    assert PPOConfig.from_dict(d) == cfg
    with pytest.raises(
        ValueError, match=r"PPOConfig: keys must be PPOConfig field names .*, got \['lr'\]"
    ):
        PPOConfig.from_dict({"lr": 1e-3})
    assert cfg.replace(n_steps=70).n_steps == 70


# ---------------------------------------------------------------- update
def _batch(policy: ActorCritic, n: int, seed: int) -> RolloutBatch:
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 4))
    a = rng.integers(0, 2, n)
    logp, _, v = policy.evaluate(obs, a)
    valid = rng.random(n) > 0.25
    return RolloutBatch(
        obs=obs,
        actions=a,
        logp=logp.astype(np.float32),
        advantages=rng.normal(size=n),
        returns=v + rng.normal(size=n),
        values=v,
        valid=valid,
    )


def _policy() -> ActorCritic:
    return ActorCritic((4,), "discrete", nvec=[2], hidden_sizes=(16, 16), seed=0)


def test_update_metrics_and_determinism():
    cfg = PPOConfig(batch_size=16, n_epochs=3, learning_rate=1e-3)
    runs = []
    for _ in range(2):
        p = _policy()
        opt = Adam(p.n_params, 1e-3)
        b = _batch(p, 100, 1)
        m = ppo_update(p, opt, b, cfg, np.random.default_rng(7))
        runs.append((p.params.copy(), m))
    assert np.array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]
    m = runs[0][1]
    for name in CLEANRL_NAMES:
        assert name in m and np.isfinite(m[name])
    n_valid = int(_batch(_policy(), 100, 1).valid.sum())
    assert m["losses/gradient_steps"] == 3 * -(-n_valid // 16)
    assert m["losses/skipped_steps"] == 0 and m["losses/epochs"] == 3
    assert not np.array_equal(runs[0][0], _policy().params)


def test_update_ignores_invalid_rows_entirely():
    """A batch with poisoned invalid rows updates exactly like the batch without them."""
    cfg = PPOConfig(batch_size=16, n_epochs=2)
    p1, p2 = _policy(), _policy()
    o1, o2 = Adam(p1.n_params), Adam(p2.n_params)
    b = _batch(p1, 80, 2)
    keep = b.valid
    compact = RolloutBatch(
        obs=b.obs[keep],
        actions=b.actions[keep],
        logp=b.logp[keep],
        advantages=b.advantages[keep],
        returns=b.returns[keep],
        values=b.values[keep],
        valid=np.ones(int(keep.sum()), bool),
    )
    b.returns[~keep] = np.nan
    b.advantages[~keep] = np.inf
    b.logp[~keep] = -1e30
    m1 = ppo_update(p1, o1, b, cfg, np.random.default_rng(3))
    m2 = ppo_update(p2, o2, compact, cfg, np.random.default_rng(3))
    assert np.array_equal(p1.params, p2.params)
    assert m1["losses/skipped_steps"] == 0
    for name in CLEANRL_NAMES[:-1]:
        assert m1[name] == m2[name]


def test_nan_gradient_skips_the_step_and_counts_it():
    cfg = PPOConfig(batch_size=32, n_epochs=2)
    p = _policy()
    opt = Adam(p.n_params)
    b = _batch(p, 64, 4)
    b.valid[:] = True
    b.returns[5] = np.nan  # poisons every minibatch that holds row 5
    before = p.params.copy()
    m = ppo_update(p, opt, b, cfg, np.random.default_rng(0))
    assert m["losses/skipped_steps"] == 2  # one minibatch per epoch holds row 5
    assert m["losses/gradient_steps"] == 2
    assert np.all(np.isfinite(p.params)) and not np.array_equal(p.params, before)
    assert opt.step_count == 2


def test_target_kl_stops_early():
    cfg = PPOConfig(batch_size=8, n_epochs=10, learning_rate=0.05, target_kl=1e-4)
    p = _policy()
    m = ppo_update(p, Adam(p.n_params, 0.05), _batch(p, 64, 5), cfg, np.random.default_rng(0))
    assert m["losses/early_stop"] == 1.0
    assert m["losses/epochs"] < 10
    assert m["losses/gradient_steps"] < 10 * 8


def test_clip_range_argument_is_the_config_s_clip_range():
    """``ppo_update(..., clip_range=c)`` is the update of a config whose clip is ``c``."""
    cfg = PPOConfig(batch_size=16, n_epochs=4, learning_rate=0.05)  # ratios leave 1 +- 0.01
    p1, p2 = _policy(), _policy()
    b = _batch(p1, 64, 4)
    m1 = ppo_update(p1, Adam(p1.n_params), b, cfg, np.random.default_rng(0), clip_range=0.01)
    m2 = ppo_update(
        p2, Adam(p2.n_params), b, cfg.replace(clip_range=0.01), np.random.default_rng(0)
    )
    assert np.array_equal(p1.params, p2.params)
    assert m1 == m2 and m1["charts/clip_range"] == 0.01
    m3 = ppo_update(_policy(), Adam(p1.n_params), b, cfg, np.random.default_rng(0))
    assert m3["charts/clip_range"] == 0.2 and m3["losses/clipfrac"] < m1["losses/clipfrac"]


@pytest.mark.parametrize("anneal_clip", [False, True])
def test_trainer_anneals_the_clip_range_with_the_learning_rate(anneal_clip):
    cfg = PPOConfig(n_envs=2, n_steps=8, batch_size=16, n_epochs=1, anneal_clip=anneal_clip)
    with PPOTrainer(CountEnv, cfg) as tr:
        recs = tr.learn(64)
    fracs = [1.0, 0.75, 0.5, 0.25]  # 1 - num_timesteps / 64 before each 16-step update
    assert [r["charts/learning_rate"] for r in recs] == pytest.approx([3e-4 * f for f in fracs])
    clips = [r["charts/clip_range"] for r in recs]
    assert clips == pytest.approx([0.2 * f for f in fracs] if anneal_clip else [0.2] * 4)


def test_update_errors():
    p = _policy()
    b = _batch(p, 10, 0)
    cfg = PPOConfig(batch_size=4)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="ppo_update: optimizer must be sized for"):
        ppo_update(p, Adam(3), b, cfg, rng)
    with pytest.raises(TypeError, match=r"ppo_update: rng must be a numpy.random.Generator"):
        ppo_update(p, Adam(p.n_params), b, cfg, 0)  # type: ignore[arg-type]
    bad = RolloutBatch(**{**b.__dict__, "valid": b.valid.astype(np.uint8)})
    with pytest.raises(TypeError, match=r"ppo_update: batch.valid must be a bool array"):
        ppo_update(p, Adam(p.n_params), bad, cfg, rng)
    bad = RolloutBatch(**{**b.__dict__, "returns": b.returns[:5]})
    with pytest.raises(
        ValueError, match=r"ppo_update: batch.returns must be shape \(10,\), got shape \(5,\)"
    ):
        ppo_update(p, Adam(p.n_params), bad, cfg, rng)
    with pytest.raises(ValueError, match=r"ppo_update: lr must be a positive finite float"):
        ppo_update(p, Adam(p.n_params), b, cfg, rng, lr=-1.0)
    for bad_clip in (0.0, float("nan")):
        with pytest.raises(
            ValueError, match=r"ppo_update: clip_range must be a positive finite float"
        ):
            ppo_update(p, Adam(p.n_params), b, cfg, rng, clip_range=bad_clip)
    with pytest.raises(
        TypeError,
        match=r"ppo_update: optimizer must be dtype float32 \(the policy's: "
        r"Adam\(\.\.\., dtype=policy.dtype\)\), got dtype float64",
    ):
        ppo_update(p, Adam(p.n_params, dtype="float64"), b, cfg, rng)
    assert np.array_equal(p.params, _policy().params)  # nothing was stepped


# ---------------------------------------------------------------- rollouts
class CountEnv(gym.Env):
    """obs = [steps taken in the episode]; reward 1; truncates after 3 steps."""

    observation_space = gym.spaces.Box(-100, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], np.float32), 1.0, False, self.t >= 3, {}


def test_rollout_masks_reset_rows_and_bootstraps_truncation():
    cfg = PPOConfig(n_envs=2, n_steps=8, batch_size=16, n_epochs=1, gamma=0.5, gae_lambda=1.0)
    with PPOTrainer(CountEnv, cfg) as tr:
        tr.collect_rollout()
        buf = tr.buffer
        want_valid = np.array([1, 1, 1, 0, 1, 1, 1, 0], bool)
        assert np.array_equal(buf.valid[:, 0], want_valid)
        # The reset row holds the episode's final observation (next-step autoreset).
        assert buf.obs[3, 0, 0] == 3.0 and buf.obs[4, 0, 0] == 0.0
        assert np.all(buf.rewards[~buf.valid] == 0.0)
        assert np.array_equal(buf.truncated[:, 0], [0, 0, 1, 0, 0, 0, 1, 0])
        # Truncated step bootstraps on V(final obs) = values[t + 1].
        v = buf.values[:, 0]
        assert buf.returns[2, 0] == pytest.approx(1.0 + 0.5 * v[3])
        assert buf.returns[1, 0] == pytest.approx(1.0 + 0.5 * buf.returns[2, 0])
        assert buf.advantages[3, 0] == 0.0
        assert [e[2] for e in tr.episodes] == [3, 3, 3, 3]
        assert tr.num_timesteps == 16


def test_trainer_rejects_unsupported_spaces():
    class DictEnv(CountEnv):
        observation_space = gym.spaces.Dict({"x": gym.spaces.Box(-1, 1, (1,))})

    with pytest.raises(TypeError, match="observation_space must be a gymnasium Box"):
        PPOTrainer(DictEnv, PPOConfig(n_envs=1, n_steps=4, batch_size=4))
    with pytest.raises(
        TypeError, match="PPOTrainer: env must be a gymnasium env id or an env factory"
    ):
        PPOTrainer(3, PPOConfig())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="PPOConfig: batch_size must be <="):
        PPOTrainer("CartPole-v1", PPOConfig(n_envs=1, n_steps=4, batch_size=8))


# ---------------------------------------------------------------- trainer
SMALL = PPOConfig(n_envs=4, n_steps=32, batch_size=32, n_epochs=2, hidden_sizes=(16, 16), seed=3)


def _losses(tr: PPOTrainer) -> list[tuple[float, ...]]:
    return [tuple(r[k] for k in CLEANRL_NAMES[:-1]) for r in tr.history]


def test_same_seed_same_losses_other_seed_differs():
    runs = []
    for seed in (3, 3, 4):
        with PPOTrainer("CartPole-v1", SMALL.replace(seed=seed)) as tr:
            tr.learn(3 * 128)
            runs.append((_losses(tr), tr.policy.get_params()))
    assert runs[0][0] == runs[1][0]
    assert np.array_equal(runs[0][1], runs[1][1])
    assert runs[0][0] != runs[2][0]


def test_save_load_resume_round_trip(tmp_path):
    cfg = SMALL.replace(normalize_obs=True, normalize_reward=True)
    tr = PPOTrainer("CartPole-v1", cfg)
    tr.learn(256)
    tr.save(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == [META, NPZ]
    with np.load(tmp_path / NPZ, allow_pickle=False) as z:
        assert "policy/params" in z.files
    lo = PPOTrainer.load(str(tmp_path))
    assert np.array_equal(lo.policy.params, tr.policy.params)
    assert np.array_equal(lo.optimizer.m, tr.optimizer.m)
    assert np.array_equal(lo.optimizer.v, tr.optimizer.v)
    assert lo.optimizer.step_count == tr.optimizer.step_count > 0
    assert (lo.num_timesteps, lo.n_updates, lo.counter) == (
        tr.num_timesteps,
        tr.n_updates,
        tr.counter,
    )
    assert lo.obs_rms.state_dict() == tr.obs_rms.state_dict()
    assert lo.ret_norm.state_dict() == tr.ret_norm.state_dict()
    assert lo.policy.obs_normalizer is lo.obs_rms
    assert lo.episodes == tr.episodes
    # Same weights, Adam state and shuffle RNG: the same batch gives the same update.
    batch = tr.buffer.batch()
    m1 = ppo_update(tr.policy, tr.optimizer, batch, cfg, tr.rng)
    m2 = ppo_update(lo.policy, lo.optimizer, batch, cfg, lo.rng)
    assert m1 == m2 and np.array_equal(lo.policy.params, tr.policy.params)
    # Resume continues the counters up to the absolute target.
    lo.learn(512)
    assert lo.num_timesteps == 512 and lo.n_updates == 4
    obs = np.zeros((2, 4), np.float32)
    assert lo.policy.act(obs, deterministic=True).shape == (2,)
    tr.close()
    lo.close()


def test_checkpoint_is_checked_on_load(tmp_path):
    with PPOTrainer("CartPole-v1", SMALL) as tr:
        tr.save(str(tmp_path))
    meta = json.loads((tmp_path / META).read_text())
    meta["npz_sha256"] = "0" * 64
    (tmp_path / META).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"PPOTrainer.load: .*checkpoint.npz must be the file"):
        PPOTrainer.load(str(tmp_path))
    with pytest.raises(ValueError, match=r"PPOTrainer.load: path must be a directory holding"):
        PPOTrainer.load(str(tmp_path / "missing"))


def test_continuous_head_with_normalisation_runs_and_clips_actions():
    cfg = PPOConfig(
        n_envs=2, n_steps=64, batch_size=64, n_epochs=1, hidden_sizes=(8,), normalize_obs=True,
        normalize_reward=True, log_std_init=1.0,
    )  # fmt: skip
    with PPOTrainer("Pendulum-v1", cfg) as tr:
        tr.learn(128)
        assert tr.buffer.actions.dtype == np.float32
        # log_std = 1 makes many samples fall outside [-2, 2]: stored unclipped...
        assert np.abs(tr.buffer.actions).max() > 2.0
        # ...while the env only sees clipped actions.
        env_a = tr.policy.to_env(tr.buffer.actions.reshape(-1, 1))
        assert np.abs(env_a).max() <= 2.0
        assert tr.obs_rms.count > 0 and np.isfinite(tr.history[-1]["losses/loss"])
        r = tr.evaluate(n_episodes=1)
        assert r["mean_length"] == 200


@pytest.mark.slow
def test_cartpole_learns_clearly_better_than_random():
    """Random CartPole play scores ~22; a short run with the CLI defaults gets far above."""
    from fastppo.ppo.defaults import env_defaults

    d = env_defaults("CartPole-v1")
    d.pop("total_timesteps")
    with PPOTrainer("CartPole-v1", PPOConfig(**d, seed=1)) as tr:
        tr.learn(40_000)
        r = tr.evaluate(n_episodes=5)
    assert r["mean_return"] > 150, r


def test_async_vector_env_gives_the_same_run_as_sync():
    cfg = SMALL.replace(n_envs=2, n_steps=32, batch_size=32)
    runs = []
    for mode in ("sync", "async"):
        with PPOTrainer("CartPole-v1", cfg.replace(vectorization=mode)) as tr:
            tr.learn(128)
            runs.append(_losses(tr))
    assert runs[0] == runs[1]
