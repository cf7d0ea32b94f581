"""Actor-learner actors on a compiled env: the fused rollout (one compiled call per
chunk) and the step path give the same rows bit for bit, and ``run`` uses it."""

from __future__ import annotations

import functools
import pickle

import numpy as np
import pytest

from fastppo.actor_learner import ActorLearnerConfig, encode_weights, run
from fastppo.actor_learner.actor import (
    ActorCore,
    CompiledEnvFn,
    DefaultPolicyFn,
    make_env_fn,
    spaces,
    spec_for,
)
from fastppo.envs import make_vec
from fastppo.ppo import rollout
from fastppo.ppo.config import PPOConfig


def _cores(env_id: str, capacity: int, **policy: object) -> tuple[ActorCore, ActorCore]:
    env_fn = CompiledEnvFn(env_id)
    policy_fn = DefaultPolicyFn(seed=3, **policy)  # type: ignore[arg-type]
    probe = env_fn()
    spec = spec_for(probe, policy_fn(*spaces(probe)))
    fused = ActorCore(1, 2, env_fn, policy_fn, spec, 7, 0, capacity)
    steps = ActorCore(1, 2, env_fn, policy_fn, spec, 7, 0, capacity, fused=False)
    assert fused.fused and not steps.fused
    blob = encode_weights(fused.policy.params, 3)
    for c in (fused, steps):
        c.load(blob)
    return fused, steps


@pytest.mark.parametrize(("env_id", "policy"), [
    ("CartPole-v1", {}),
    ("Acrobot-v1", {}),
    ("MountainCar-v0", {"dtype": "float64"}),
    ("MountainCarContinuous-v0", {}),
    ("Pendulum-v1", {"options": {"squash": True}}),
])  # fmt: skip
def test_fused_actor_rows_equal_the_step_path(env_id: str, policy: dict) -> None:
    fused, steps = _cores(env_id, 96, **policy)
    truncations = 0
    for rnd, sizes in enumerate(([1, 40, 55], [96], [7, 7, 82])):
        for c in (fused, steps):
            # truncations and their reset rows inside the chunk
            c.env.elapsed_steps[0] = c.env.max_episode_steps - 3 - 15 * rnd
            for m in sizes:
                if c is fused:
                    c.collect(m)
                else:
                    for _ in range(m):
                        c.step()
        a, b = fused.take_chunk(), steps.take_chunk()
        assert (a.first_step, a.n) == (b.first_step, b.n) == (96 * rnd, 96)
        for k in a.data:
            assert a.data[k].dtype == b.data[k].dtype, k
            assert np.array_equal(a.data[k], b.data[k]), k
        assert not a.data["valid"].all()
        truncations += int(a.data["truncated"].sum())
        assert (a.data["versions"] == 3).all()
        assert np.array_equal(a.next_obs, b.next_obs)
        assert np.array_equal(fused.env.state, steps.env.state)
        assert (fused.need_reset, fused.counter, fused.sent) == (
            steps.need_reset,
            steps.counter,
            steps.sent,
        )
    assert truncations


def test_env_ids_pick_the_compiled_env_by_backend() -> None:
    fn = make_env_fn("CartPole-v1")
    assert fn == CompiledEnvFn("CartPole-v1")
    assert pickle.loads(pickle.dumps(fn)) == fn  # processes and Ray ship it
    gym_fn = make_env_fn("CartPole-v1", "gymnasium")
    assert isinstance(gym_fn, functools.partial)
    assert isinstance(make_env_fn("LunarLander-v3"), functools.partial)


def test_a_compiled_env_must_hold_one_env() -> None:
    fused, _ = _cores("CartPole-v1", 8)
    with pytest.raises(ValueError, match=r"run: env_fn must make one env.*num_envs=2"):
        ActorCore(0, 0, lambda: make_vec("CartPole-v1", 2), DefaultPolicyFn(), fused.spec, 0, 0, 8)


def test_run_collects_with_the_fused_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = rollout.collect

    def spy(fn, policy, env, carry, rows, *a, **kw):
        calls.append(rows.logp.shape[0])
        return real(fn, policy, env, carry, rows, *a, **kw)

    monkeypatch.setattr(rollout, "collect", spy)
    cfg = ActorLearnerConfig(num_actors=2, num_steps=64, total_env_steps=640, seed=1)
    policy, report = run("CartPole-v1", cfg, PPOConfig(batch_size=64, n_epochs=2))
    assert report.env_steps >= 640 and report.updates >= 5
    assert sum(calls) >= 640 and max(calls) > 1  # whole chunks, not single steps
    assert report.episode_returns  # episodes counted from the fused rows


def test_processes_actors_step_the_compiled_env() -> None:
    """CompiledEnvFn travels to spawned actor processes; their chunks train."""
    cfg = ActorLearnerConfig(
        num_actors=2, num_steps=64, total_env_steps=512, seed=2, backend="processes"
    )
    policy, report = run("CartPole-v1", cfg, PPOConfig(batch_size=64, n_epochs=1))
    assert report.env_steps >= 512 and report.updates >= 4 and report.actor_restarts == 0
