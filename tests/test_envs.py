"""fastppo.envs: gymnasium's classic-control dynamics, replayed bit for bit.

Each compiled env runs beside one gymnasium env object per slot (the raw env
class, its state set from ours at every reset): from the same state and
actions every observation, reward, terminated, truncated and state must be
identical, through terminations, truncations and autoresets in both modes.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastppo import envs
from fastppo.envs._loop import RESET_BLOCK
from fastppo.reference import rng as ref_rng

IDS = envs.ids()

# Start states (ours, float64) that reach the interesting branches quickly:
# terminations, clipped speeds and positions, wrapped angles, the left wall.
_STARTS = {
    "CartPole-v1": lambda r, n: r.uniform(-1.0, 1.0, (n, 4)) * [2.4, 2.0, 0.21, 2.0],
    "Acrobot-v1": lambda r, n: r.uniform(-1.0, 1.0, (n, 4)) * [np.pi, np.pi, 4 * np.pi, 9 * np.pi],
    "MountainCar-v0": lambda r, n: np.c_[r.uniform(-1.2, 0.6, n), r.uniform(-0.07, 0.07, n)],
    "MountainCarContinuous-v0": lambda r, n: np.c_[
        r.uniform(-1.2, 0.6, n), r.uniform(-0.07, 0.07, n)
    ],
    "Pendulum-v1": lambda r, n: np.c_[r.uniform(-8.0, 8.0, n), r.uniform(-8.0, 8.0, n)],
}
# States on the exact boundaries each env tests.
_EDGES = {
    "CartPole-v1": [[2.4, 0.0, 0.0, 0.0], [0.0, 0.0, 12 * 2 * np.pi / 360, 0.0]],
    "Acrobot-v1": [[np.pi, -np.pi, 4 * np.pi, -9 * np.pi], [0.0, 0.0, 0.0, 0.0]],
    "MountainCar-v0": [[-1.2, -0.07], [0.6, 0.07], [0.5, 0.0], [-1.19, -0.07]],
    "MountainCarContinuous-v0": [[-1.2, -0.07], [0.6, 0.07], [0.45, 0.0], [-1.19, -0.07]],
    "Pendulum-v1": [[np.pi, 8.0], [-np.pi, -8.0], [0.0, 0.0]],
}


def _actions(env_id: str, r: np.random.Generator, n: int) -> np.ndarray:
    if env_id == "Pendulum-v1":
        return r.uniform(-2.6, 2.6, (n, 1)).astype(np.float32)  # out of bounds too
    if env_id == "MountainCarContinuous-v0":
        return r.uniform(-1.4, 1.4, (n, 1)).astype(np.float32)
    return r.integers(0, 3 if env_id != "CartPole-v1" else 2, n)


class _Mirror:
    """One raw gymnasium env per slot, kept in the state ours is in."""

    def __init__(self, env_id: str, n: int) -> None:
        spec = gym.spec(env_id)
        make = gym.envs.registration.load_env_creator(spec.entry_point)
        self.id = env_id
        self.envs = [make() for _ in range(n)]
        for e in self.envs:
            e.reset(seed=0)

    def set_state(
        self, i: int, row: np.ndarray, fresh_reset: bool, mid_episode: bool = False
    ) -> None:
        e = self.envs[i]
        if self.id == "Acrobot-v1" and fresh_reset:
            e.state = row.astype(np.float32)  # gymnasium keeps its reset draw as float32
        elif self.id == "MountainCar-v0":
            e.state = np.array(row, dtype=np.float64)
        elif self.id == "MountainCarContinuous-v0" and mid_episode:
            e.state = row.astype(np.float32)  # gymnasium's state after a step
        else:
            e.state = row.copy()
        if self.id == "CartPole-v1":
            e.steps_beyond_terminated = None

    def obs(self, i: int) -> np.ndarray:
        e = self.envs[i]
        if self.id == "Acrobot-v1":
            return e._get_ob()
        if self.id == "Pendulum-v1":
            return e._get_obs()
        return np.array(e.state, dtype=np.float32)

    def step(self, i: int, action: object) -> tuple[np.ndarray, float, bool]:
        o, r, term, _, _ = self.envs[i].step(action)
        return np.asarray(o, np.float32), float(r), bool(term)

    def state(self, i: int) -> np.ndarray:
        return np.asarray(self.envs[i].state, dtype=np.float64)


def _same_obs(env_id: str, ours: np.ndarray, theirs: np.ndarray, fresh_reset: bool) -> bool:
    if env_id == "Acrobot-v1" and fresh_reset:
        # numpy's float32 cos/sin of the float32 reset draw: within one ulp (module docstring)
        ulp = np.spacing(np.abs(theirs[:4]))
        return bool(np.all(np.abs(ours[:4] - theirs[:4]) <= ulp)) and np.array_equal(
            ours[4:], theirs[4:]
        )
    return np.array_equal(ours, theirs)


def _replay(env_id: str, mode: str, seed: int, n: int, steps: int, spread: float) -> int:
    """Step ours and the mirror side by side; returns how many episodes ended."""
    r = np.random.default_rng(seed)
    env = envs.make_vec(env_id, n, seed=seed, autoreset_mode=mode)
    env.reset()
    start = _STARTS[env_id](r, n) * spread
    edges = np.asarray(_EDGES[env_id], np.float64)
    start[: min(n, len(edges))] = edges[:n]
    env.state[...] = start
    limit = env.max_episode_steps
    env.elapsed_steps[:] = r.integers(0, limit, n)  # truncations within the run
    mirror = _Mirror(env_id, n)
    count = env.elapsed_steps.copy()
    for i in range(n):
        mirror.set_state(i, env.state[i], fresh_reset=False, mid_episode=count[i] > 0)
    pending = np.zeros(n, bool)
    ended = 0
    for _ in range(steps):
        acts = _actions(env_id, r, n)
        obs, rew, term, trunc, info = env.step(acts)
        assert rew.dtype == np.float64 and obs.dtype == np.float32
        for i in range(n):
            if pending[i]:  # next_step: this step was env i's reset
                mirror.set_state(i, env.state[i], fresh_reset=True)
                assert _same_obs(env_id, obs[i], mirror.obs(i), True)
                assert rew[i] == 0.0 and not term[i] and not trunc[i]
                assert env.elapsed_steps[i] == 0
                count[i] = 0
                pending[i] = False
                continue
            a = acts[i] if acts.ndim == 2 else int(acts[i])
            o, rw, te = mirror.step(i, a)
            count[i] += 1
            tr = count[i] >= limit
            assert rw == rew[i], (env_id, i, rw, rew[i])
            assert te == term[i] and tr == trunc[i]
            done = te or tr
            if done:
                ended += 1
            if done and mode == "same_step":
                assert info["_final_obs"][i] and np.array_equal(info["final_obs"][i], o)
                mirror.set_state(i, env.state[i], fresh_reset=True)
                assert _same_obs(env_id, obs[i], mirror.obs(i), True)
                assert env.elapsed_steps[i] == 0
                count[i] = 0
            else:
                assert np.array_equal(obs[i], o), (env_id, i, obs[i], o)
                assert np.array_equal(env.state[i], mirror.state(i)), (env_id, i)
                assert env.elapsed_steps[i] == count[i]
                pending[i] = done and mode == "next_step"
        if mode == "same_step" and not (term | trunc).any():
            assert info == {}
    return ended


@pytest.mark.parametrize("mode", ["next_step", "same_step"])
@pytest.mark.parametrize("env_id", IDS)
def test_replays_gymnasium_bit_for_bit(env_id: str, mode: str) -> None:
    ended = _replay(env_id, mode, seed=1, n=24, steps=250, spread=1.0)
    assert ended >= 10  # terminations/truncations and their autoresets were exercised


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    env_id=st.sampled_from(IDS),
    mode=st.sampled_from(["next_step", "same_step"]),
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 9),
    spread=st.floats(0.0, 1.0),
)
def test_replays_gymnasium_property(
    env_id: str, mode: str, seed: int, n: int, spread: float
) -> None:
    _replay(env_id, mode, seed, n, steps=60, spread=spread)


@pytest.mark.parametrize("env_id", IDS)
def test_spaces_and_metadata_match_make_vec(env_id: str) -> None:
    ours = envs.make_vec(env_id, 3, seed=0)
    theirs = gym.make_vec(env_id, num_envs=3, vectorization_mode="sync")
    try:
        assert ours.single_observation_space == theirs.single_observation_space
        assert ours.single_action_space == theirs.single_action_space
        assert ours.observation_space == theirs.observation_space
        assert ours.action_space == theirs.action_space
        assert ours.metadata["render_fps"] == theirs.metadata["render_fps"]
        assert ours.metadata["autoreset_mode"] == theirs.metadata["autoreset_mode"]
        assert ours.max_episode_steps == theirs.spec.max_episode_steps
        assert isinstance(ours, gym.vector.VectorEnv)
    finally:
        theirs.close()
        ours.close()


def _reset_uniforms(seed: int, env: int, k: int) -> np.ndarray:
    """The four uniforms of env ``env``'s ``k``-th reset, from the numpy reference Philox."""
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32)
    out = []
    for b in range(2):
        ctr = np.array([RESET_BLOCK + b, env, k & 0xFFFFFFFF, k >> 32], np.uint32)
        w = ref_rng.philox4x32_10(ctr, key)
        out += [ref_rng.uniform53(w[0], w[1]), ref_rng.uniform53(w[2], w[3])]
    return np.array(out, np.float64)


def test_resets_come_from_the_counter_based_stream() -> None:
    seed = 2**40 + 12345
    env = envs.make_vec("CartPole-v1", 5, seed=seed)
    env.reset()
    for i in range(5):
        u = _reset_uniforms(seed, i, 0)
        assert np.array_equal(env.state[i], -0.05 + (0.05 - -0.05) * u)
    env.reset(options={"low": -0.2, "high": 0.3})  # the stream moves on: reset 1
    u = _reset_uniforms(seed, 3, 1)
    assert np.array_equal(env.state[3], -0.2 + (0.3 - -0.2) * u)
    p = envs.make_vec("Pendulum-v1", 2, seed=seed)
    p.reset(options={"x_init": 1.0, "y_init": 0.5})
    u = _reset_uniforms(seed, 1, 0)
    assert np.array_equal(p.state[1], [-1.0 + 2.0 * u[0], -0.5 + 1.0 * u[1]])


@pytest.mark.parametrize("env_id", IDS)
def test_batch_size_never_changes_an_envs_trajectory(env_id: str) -> None:
    r = np.random.default_rng(3)
    small = envs.make_vec(env_id, 3, seed=9)
    big = envs.make_vec(env_id, 11, seed=9)
    o_small, _ = small.reset()
    o_big, _ = big.reset()
    assert np.array_equal(o_small, o_big[:3])
    for _ in range(300):
        a = _actions(env_id, r, 11)
        ob, rb, tb, ub, _ = big.step(a)
        os_, rs, ts, us, _ = small.step(a[:3])
        assert np.array_equal(os_, ob[:3]) and np.array_equal(rs, rb[:3])
        assert np.array_equal(ts, tb[:3]) and np.array_equal(us, ub[:3])


def test_seeds_reproduce_and_differ() -> None:
    a = envs.make_vec("Acrobot-v1", 4, seed=5)
    b = envs.make_vec("Acrobot-v1", 4)
    oa, _ = a.reset()
    ob, _ = b.reset(seed=5)
    assert np.array_equal(oa, ob)
    oc, _ = b.reset(seed=6)
    assert not np.array_equal(oa, oc)
    od, _ = b.reset(seed=[5, 6, 7, 8])
    assert np.array_equal(od[0], oa[0]) and not np.array_equal(od[1], oa[1])


def test_reset_mask_resets_only_those_envs() -> None:
    env = envs.make_vec("MountainCar-v0", 4, seed=1)
    obs, _ = env.reset()
    for _ in range(5):
        obs, *_ = env.step(np.full(4, 2))
    before = env.state.copy()
    mask = np.array([False, True, False, False])
    new, _ = env.reset(options={"reset_mask": mask})
    assert np.array_equal(env.state[~mask], before[~mask])
    assert np.array_equal(new[~mask], obs[~mask])
    assert env.state[1, 1] == 0.0 and env.elapsed_steps[1] == 0
    assert list(env.elapsed_steps[~mask]) == [5, 5, 5]


def _bad(env: envs.CompiledVectorEnv, actions: object, exc: type, *words: str) -> None:
    state = env.state.copy()
    steps = env.elapsed_steps.copy()
    with pytest.raises(exc) as e:
        env.step(actions)
    msg = str(e.value)
    assert msg.startswith("CompiledVectorEnv.step: actions must be"), msg
    for w in words:
        assert w in msg, msg
    assert np.array_equal(env.state, state) and np.array_equal(env.elapsed_steps, steps)


def test_bad_actions_raise_before_any_env_moves() -> None:
    env = envs.make_vec("CartPole-v1", 4, seed=0)
    env.reset()
    _bad(env, np.array([0, 1, 2, 0]), ValueError, "[0, 2)", "2 at index 2")
    _bad(env, np.array([0, -1, 0, 0]), ValueError, "-1 at index 1")
    _bad(env, np.array([0.0, 1.0, 0.0, 1.0]), TypeError, "float64")
    _bad(env, np.array([0, 1, 0]), ValueError, "shape (4,)")
    _bad(env, np.array([0, 1, 0, 2**64 - 1], np.uint64), ValueError, str(2**64 - 1))
    env.step(np.array([0, 1, 1, 0], np.uint8))  # any integer dtype
    env.step([0, 1, 1, 0])
    pend = envs.make_vec("Pendulum-v1", 3, seed=0)
    pend.reset()
    _bad(pend, np.array([[0.0], [np.nan], [1.0]], np.float32), ValueError, "NaN", "index 1")
    _bad(pend, np.zeros(3, np.float32), ValueError, "shape (3, 1)")
    _bad(pend, np.zeros((3, 1), np.int64), TypeError, "int64")
    pend.step(np.full((3, 1), 1.5))  # float64 is cast to float32


def test_continuous_actions_cast_to_float32_and_clip_as_gymnasium() -> None:
    a64 = np.array([[0.1234567891234], [5.0], [-np.inf]])
    e64 = envs.make_vec("Pendulum-v1", 3, seed=2)
    e32 = envs.make_vec("Pendulum-v1", 3, seed=2)
    e64.reset()
    e32.reset()
    o64 = e64.step(a64)
    o32 = e32.step(a64.astype(np.float32))
    for x, y in zip(o64[:4], o32[:4]):
        assert np.array_equal(x, y)


def test_other_errors() -> None:
    with pytest.raises(ValueError, match="env_id must be one of CartPole-v1, Acrobot-v1"):
        envs.make_vec("LunarLander-v3", 2)
    with pytest.raises(ValueError, match="num_envs must be an int >= 1, got 0"):
        envs.make_vec("CartPole-v1", 0)
    with pytest.raises(ValueError, match="autoreset_mode must be 'next_step' or 'same_step'"):
        envs.make_vec("CartPole-v1", 2, autoreset_mode="disabled")
    env = envs.make_vec("CartPole-v1", 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    assert env.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP
    with pytest.raises(gym.error.ResetNeeded):
        env.step(np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="low <= high"):
        env.reset(options={"low": 1.0, "high": 0.0})
    with pytest.raises(ValueError, match="options must be keys among"):
        env.reset(options={"x_init": 1.0})
    with pytest.raises(ValueError, match="seed must be a list of 2 seeds"):
        env.reset(seed=[1, 2, 3])
    with pytest.raises(TypeError, match="seed must be None or an int"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match=r"CompiledVectorEnv.state: value must be shape \(2, 4\)"):
        env.state = np.zeros((3, 4))


def _unaligned(a: np.ndarray) -> np.ndarray:
    raw = np.zeros(a.nbytes + 1, np.uint8)[1:]
    out = raw.view(a.dtype).reshape(a.shape)
    out[...] = a
    assert not out.flags.aligned
    return out


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_every_action_form_steps_as_the_envs_own(env_id: str) -> None:
    """The C fast path takes the env's own action form; every other accepted form
    (strided, unaligned, byte-swapped, other dtypes, lists) is cast and gives
    the same step."""
    r = np.random.default_rng(1)
    n = 5
    own = _actions(env_id, r, n)
    own = own.astype(np.int64) if own.dtype.kind == "i" else own
    forms = [
        own,
        np.repeat(own, 2, axis=0)[::2],
        _unaligned(own),
        own.astype(own.dtype.newbyteorder()),
        own.astype(np.int32 if own.dtype.kind == "i" else np.float64),
        own.tolist(),
    ]
    results = []
    for form in forms:
        env = envs.make_vec(env_id, n, seed=3, autoreset_mode="same_step")
        env.reset()
        env.state[:2] = _EDGES[env_id][:2]  # an ending episode: final_obs too
        out = env.step(form)
        results.append((out, env.state.copy()))
    (o0, r0, te0, tr0, info0), s0 = results[0]
    for (o, rew, te, tr, info), s in results[1:]:
        for x, y in ((o, o0), (rew, r0), (te, te0), (tr, tr0), (s, s0)):
            assert np.array_equal(x, y)
        assert info.keys() == info0.keys()


def test_one_declaration_of_the_step_entry() -> None:
    """envs._loop.STEP_ARGS is the declaration: the entry function takes exactly
    its parameters, and the Cython caller's ctypedef spells the same C types."""
    import inspect
    import re
    from pathlib import Path

    from fastppo._cy import _fast
    from fastppo.envs import _loop

    decl = _loop.STEP_ARGS
    assert list(inspect.signature(_loop._c_step).parameters) == [n for n, _ in decl]
    pyx = (Path(_fast.__file__).parent / "_fast.pyx").read_text()
    m = re.search(r"ctypedef int64_t \(\*env_step_fn\)\((.*?)\) noexcept nogil", pyx, re.S)
    assert m, "no ctypedef env_step_fn in _fast.pyx"
    c_names = {"f64*": "double*", "i64*": "int64_t*", "A*": "void*", "i64": "int64_t"}
    c_names |= {"f32*": "float*", "u8*": "unsigned char*"}
    spelled = [" ".join(t.split()) for t in m.group(1).split(",")]
    assert spelled == [c_names[c] for _, c in decl]
    assert len(_loop.step_signature(True).args) == len(decl)


def test_compiled_for_is_the_one_backend_rule() -> None:
    assert envs.compiled_for("CartPole-v1")
    assert not envs.compiled_for("CartPole-v1", "gymnasium")
    assert not envs.compiled_for("CartPole-v1", "compiled", {"sutton_barto_reward": True})
    assert not envs.compiled_for("LunarLander-v3") and not envs.compiled_for(None)


def test_sincos_is_libm_sin_and_cos() -> None:
    """The envs' one-call ``sincos`` gives ``math.sin``/``math.cos``'s bits (libm's,
    what gymnasium calls) for reduced, large and huge arguments, subnormals,
    signed zeros and non-finite values."""
    import math

    import numba

    from fastppo.envs._libm import sincos

    @numba.njit
    def pairs(x, out):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            out[i, 0], out[i, 1] = sincos(x[i])

    r = np.random.default_rng(7)
    x = np.concatenate(
        [
            r.uniform(-0.3, 0.3, 20_000),
            r.uniform(-40.0, 40.0, 20_000),
            r.uniform(-1e6, 1e6, 5_000),
            np.ldexp(r.uniform(0.5, 1.0, 5_000), r.integers(-1074, 1024, 5_000)),
            [0.0, -0.0, 5e-324, np.pi, -np.pi / 2, 1e22, 1.7e308, np.inf, -np.inf, np.nan],
        ]
    )
    out = np.empty((x.size, 2))
    pairs(x, out)
    want = np.array([[math.sin(v), math.cos(v)] if np.isfinite(v) else [np.nan] * 2 for v in x])
    finite = np.isfinite(x)
    np.testing.assert_array_equal(out.view(np.int64)[finite], want.view(np.int64)[finite])
    assert np.isnan(out[~finite]).all()
