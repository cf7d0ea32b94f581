"""MLP actor-critic, orthogonal init and Adam: forward against numpy, gradients against
central finite differences (float64), Adam against a hand computation, error rules."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import fastppo
from fastppo.nn import ActorCritic, Adam, orthogonal
from fastppo.ppo import PPOConfig, RolloutBatch, loss_and_grad

gym = pytest.importorskip("gymnasium")
spaces = gym.spaces


# ---------------------------------------------------------------- helpers
def make_policy(
    kind: str, activation: str = "tanh", seed: int = 1, dtype: str = "float64"
) -> ActorCritic:
    """A small perturbed policy; float64 by default, where the gradient checks are tight."""
    if kind == "discrete":
        p = ActorCritic(
            (4,),
            "discrete",
            nvec=[3],
            hidden_sizes=(5, 6),
            activation=activation,
            seed=seed,
            dtype=dtype,
        )
    elif kind == "multi":
        p = ActorCritic(
            (2, 2),
            "multi_discrete",
            nvec=[2, 3],
            hidden_sizes=(5,),
            activation=activation,
            seed=seed,
            dtype=dtype,
        )
    else:
        p = ActorCritic(
            (4,),
            "continuous",
            action_dim=2,
            hidden_sizes=(5, 6),
            activation=activation,
            seed=seed,
            squash=kind == "squash",
            action_low=-1.0,
            action_high=1.0,
            log_std_init=-0.3,
            dtype=dtype,
        )
    # Perturb so no weight sits at its init symmetry (small policy output gain).
    p.params[:] += np.random.default_rng(seed).normal(0, 0.3, p.n_params)
    return p


def random_actions(kind: str, rng: np.random.Generator, b: int) -> np.ndarray:
    if kind == "discrete":
        return rng.integers(0, 3, b)
    if kind == "multi":
        return np.stack([rng.integers(0, 2, b), rng.integers(0, 3, b)], 1)
    if kind == "gauss":
        return rng.normal(size=(b, 2))
    return np.tanh(rng.normal(size=(b, 2)))


def random_batch(p: ActorCritic, kind: str, rng: np.random.Generator, b: int = 12) -> RolloutBatch:
    obs = rng.normal(size=(b, *p.obs_shape))
    a = random_actions(kind, rng, b)
    lp, _, v = p.evaluate(obs, a)
    valid = rng.random(b) > 0.2
    valid[:2] = True
    # Even rows: old log-probs 0.6 off (ratio clipped); odd rows: nearly on-policy
    # (ratio inside the clip range). Both branches of the surrogate are exercised.
    even = np.arange(b) % 2 == 0
    shift = np.where(even, 0.6 * rng.choice([-1.0, 1.0], b), rng.normal(0, 0.02, b))
    return RolloutBatch(
        obs=obs,
        actions=a,
        logp=lp + shift,
        advantages=rng.normal(size=b),
        returns=rng.normal(size=b),
        values=v + rng.normal(0, 0.2, b),
        valid=valid,
    )


def numpy_forward(p: ActorCritic, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    act = np.tanh if p.activation == "tanh" else (lambda z: np.maximum(z, 0.0))
    outs = []
    for layers in (p.actor_layers, p.critic_layers):
        h = obs.reshape(obs.shape[0], -1)
        for i, (w, b) in enumerate(layers):
            h = h @ w + b
            if i < len(layers) - 1:
                h = act(h)
        outs.append(h)
    return outs[0], outs[1][:, 0]


def fd_grad(p: ActorCritic, batch: RolloutBatch, cfg: PPOConfig, eps: float = 1e-6) -> np.ndarray:
    base = p.params.copy()
    g = np.zeros_like(base)
    for i in range(base.size):
        p.params[:] = base
        p.params[i] += eps
        lp = loss_and_grad(p, batch, cfg)[0]
        p.params[:] = base
        p.params[i] -= eps
        lm = loss_and_grad(p, batch, cfg)[0]
        g[i] = (lp - lm) / (2 * eps)
    p.params[:] = base
    return g


# ---------------------------------------------------------------- init
def test_orthogonal_rows_or_columns_are_orthonormal_times_gain():
    rng = np.random.default_rng(0)
    w = orthogonal(4, 64, math.sqrt(2), rng)  # torch layout [64, 4]: columns orthonormal
    assert w.shape == (4, 64)
    np.testing.assert_allclose(w @ w.T, 2.0 * np.eye(4), atol=1e-12)
    w = orthogonal(64, 2, 0.01, rng)
    np.testing.assert_allclose(w.T @ w, 1e-4 * np.eye(2), atol=1e-15)


def test_init_gains_and_zero_biases_and_views_share_params():
    p = ActorCritic((4,), "discrete", nvec=[2], hidden_sizes=(64, 64), seed=3, dtype="float64")
    (w0, b0), (w1, b1), (w2, b2) = p.actor_layers
    np.testing.assert_allclose(w0 @ w0.T, 2.0 * np.eye(4), atol=1e-12)
    np.testing.assert_allclose(w1.T @ w1, 2.0 * np.eye(64), atol=1e-12)
    np.testing.assert_allclose(w2.T @ w2, 1e-4 * np.eye(2), atol=1e-15)
    wv = p.critic_layers[-1][0]
    np.testing.assert_allclose(wv.T @ wv, np.eye(1), atol=1e-12)
    assert not any(b.any() for _, b in p.actor_layers + p.critic_layers)
    for w, b in p.actor_layers + p.critic_layers:
        assert np.shares_memory(w, p.params) and np.shares_memory(b, p.params)
    assert p.n_params == sum(w.size + b.size for w, b in p.actor_layers + p.critic_layers)
    # Same seed, same weights; another seed, other weights.
    again = ActorCritic((4,), "discrete", nvec=[2], seed=3, dtype="float64")
    assert np.array_equal(again.params, p.params)
    assert not np.array_equal(ActorCritic((4,), "discrete", nvec=[2], seed=4).params, p.params)
    # float32 (the default) holds the same initialisation, rounded
    assert np.array_equal(ActorCritic((4,), "discrete", nvec=[2], seed=3).params,
                          p.params.astype(np.float32))  # fmt: skip


def test_gaussian_log_std_lives_in_params():
    p = ActorCritic((3,), "continuous", action_dim=2, seed=0, log_std_init=-0.5)
    assert p.log_std is not None and np.shares_memory(p.log_std, p.params)
    assert np.all(p.log_std == -0.5)


# ---------------------------------------------------------------- forward
@pytest.mark.parametrize("kind", ["discrete", "multi", "gauss"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_forward_matches_numpy(kind, activation):
    p = make_policy(kind, activation)
    obs = np.random.default_rng(1).normal(size=(7, *p.obs_shape))
    want_out, want_v = numpy_forward(p, obs)
    np.testing.assert_allclose(p.head_outputs(obs), want_out, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(p.value(obs), want_v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        p.value(obs.astype(np.float32)),
        numpy_forward(p, obs.astype(np.float32).astype(np.float64))[1],
        rtol=1e-12,
    )


def test_evaluate_categorical_matches_numpy():
    p = make_policy("multi")
    rng = np.random.default_rng(2)
    obs = rng.normal(size=(9, 2, 2))
    a = random_actions("multi", rng, 9)
    logp, ent, v = p.evaluate(obs, a)
    logits, want_v = numpy_forward(p, obs)
    want_lp = np.zeros(9)
    want_h = np.zeros(9)
    for lo, hi, c in ((0, 2, 0), (2, 5, 1)):
        z = logits[:, lo:hi]
        lse = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1)
        lps = z - lse[:, None]
        want_lp += lps[np.arange(9), a[:, c]]
        want_h -= (np.exp(lps) * lps).sum(1)
    np.testing.assert_allclose(logp, want_lp, rtol=1e-12)
    np.testing.assert_allclose(ent, want_h, rtol=1e-12)
    np.testing.assert_allclose(v, want_v, rtol=1e-12)


def test_evaluate_and_categorical_logp_entropy_share_one_log_sum_exp():
    # both call kernels.softmax.lse_entropy (the head with reassociation allowed)
    p = make_policy("discrete")
    rng = np.random.default_rng(5)
    obs = rng.normal(size=(64, 4)) * 3
    a = random_actions("discrete", rng, 64)
    logp, ent, _ = p.evaluate(obs, a)
    logits = p.head_outputs(obs)
    want_lp, want_h = fastppo.categorical_logp_entropy(logits, a)
    np.testing.assert_allclose(logp, want_lp, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(ent, want_h, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("squash", [False, True])
def test_evaluate_gaussian_matches_numpy(squash):
    p = make_policy("squash" if squash else "gauss")
    rng = np.random.default_rng(3)
    obs = rng.normal(size=(6, 4))
    u = rng.normal(size=(6, 2))
    a = np.tanh(u) if squash else u
    logp, ent, _ = p.evaluate(obs, a)
    mean, _ = numpy_forward(p, obs)
    s = np.clip(p.log_std, p.log_std_min, p.log_std_max)
    if squash:
        # evaluated at float32(a) by the float32 unsquash (kernels.squash):
        # u within 2 float32 ulp, the log-det within 1 ulp + 1.5e-7
        u = np.arctanh(a.astype(np.float32).astype(np.float64))
    z = (u - mean) / np.exp(s)
    want = (-0.5 * z**2 - s - 0.5 * np.log(2 * np.pi)).sum(1)
    if squash:
        want -= np.log(1 - np.tanh(u) ** 2).sum(1)
    np.testing.assert_allclose(logp, want, rtol=1e-6 if squash else 1e-7)
    np.testing.assert_allclose(
        ent, (s + 0.5 + 0.5 * np.log(2 * np.pi)).sum() * np.ones(6), rtol=1e-12
    )


def test_log_std_is_clamped_in_forward():
    p = ActorCritic((2,), "continuous", action_dim=1, seed=0, log_std_min=-1.0, log_std_max=0.5)
    p.log_std[:] = 3.0
    obs = np.zeros((1, 2))
    _, ent, _ = p.evaluate(obs, np.zeros((1, 1)))
    assert ent[0] == pytest.approx(0.5 + 0.5 + 0.5 * math.log(2 * math.pi))


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("kind", ["discrete", "multi", "gauss", "squash"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
@pytest.mark.parametrize("clip_vf", [None, 0.1])
def test_gradient_matches_central_differences(kind, activation, clip_vf):
    rng = np.random.default_rng(zlib.crc32(f"{kind}-{activation}-{clip_vf}".encode()))
    p = make_policy(kind, activation)
    batch = random_batch(p, kind, rng)
    cfg = PPOConfig(clip_range=0.2, clip_range_vf=clip_vf, ent_coef=0.05, vf_coef=0.7)
    loss, g, stats = loss_and_grad(p, batch, cfg)
    assert 0.0 < stats["losses/clipfrac"] < 1.0  # both branches of the clip are exercised
    fd = fd_grad(p, batch, cfg)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7 * np.abs(g).max())
    assert np.isfinite(loss)


@pytest.mark.parametrize("kind", ["discrete", "multi", "gauss", "squash"])
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_float32_forward_loss_and_gradient_match_float64(kind, activation):
    """The float32 build (the default) computes what the float64 one does, to float32 rounding.

    Same weights (float32-representable), same batch: head outputs and values
    within 1e-5, the loss within 1e-5 relative and the gradient within 1e-4
    of its norm (each GEMM of float32 operands rounds at 6e-8 per term).
    """
    rng = np.random.default_rng(zlib.crc32(f"f32-{kind}-{activation}".encode()))
    p64 = make_policy(kind, activation)
    p64.params[:] = p64.params.astype(np.float32)
    p32 = ActorCritic.from_spec(dict(p64.spec(), dtype="float32"), params=p64.params)
    assert p32.params.dtype == np.float32 and np.array_equal(p32.params, p64.params)
    batch = random_batch(p64, kind, rng)
    obs = np.asarray(batch.obs).astype(np.float32)
    np.testing.assert_allclose(p32.head_outputs(obs), p64.head_outputs(obs), atol=1e-5)
    np.testing.assert_allclose(p32.value(obs), p64.value(obs), atol=1e-5)
    cfg = PPOConfig(clip_range=0.2, clip_range_vf=0.1, ent_coef=0.05, vf_coef=0.7)
    batch.obs = obs
    if kind in ("gauss", "squash"):
        batch.actions = np.asarray(batch.actions).astype(np.float32)
    l64, g64, _ = loss_and_grad(p64, batch, cfg)
    l32, g32, _ = loss_and_grad(p32, batch, cfg)
    assert g32.dtype == np.float32
    assert l32 == pytest.approx(l64, rel=1e-5, abs=1e-6)
    assert np.linalg.norm(g32 - g64) <= 1e-4 * np.linalg.norm(g64)


def test_float32_tanh_layers_use_a_tanh_within_a_few_ulp():
    # tanh32 (Eigen's rational), compiled, over the float32 range that matters
    import numba

    from fastppo.kernels.fastmath import tanh32

    @numba.njit
    def run(x, out):
        for i in range(x.size):
            out[i] = tanh32(x[i])

    x = np.concatenate([np.linspace(-10, 10, 400_001), [0.0, 1e-30, -3e-4, 5e-4, 7.9, 9, 1e4]])
    x = x.astype(np.float32)
    got = np.empty_like(x)
    run(x, got)
    want = np.tanh(x.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got - want) <= 8 * ulp)  # 6.6 ulp at worst, near |x| = 5.8
    assert np.all(np.abs(got) <= 1.0)
    nan = np.array([np.nan], np.float32)
    run(nan, nan)
    assert np.isnan(nan[0])


def test_dtype_is_validated_and_kept_by_spec():
    with pytest.raises(
        ValueError,
        match=r"ActorCritic: dtype must be one of \('float32', 'float64'\), got 'float16'",
    ):
        ActorCritic((2,), "discrete", nvec=[2], dtype="float16")
    p = ActorCritic((2,), "discrete", nvec=[2], dtype=np.float64)
    assert p.params.dtype == np.float64 and p.spec()["dtype"] == "float64"
    assert ActorCritic.from_spec(p.spec()).params.dtype == np.float64
    assert ActorCritic((2,), "discrete", nvec=[2]).params.dtype == np.float32


def test_gradient_without_advantage_normalisation_and_clamped_log_std():
    rng = np.random.default_rng(5)
    p = make_policy("gauss")
    p.log_std[0] = 5.0  # beyond log_std_max = 2: clamped, no gradient
    batch = random_batch(p, "gauss", rng)
    cfg = PPOConfig(normalize_advantage=False, ent_coef=0.1)
    _, g, _ = loss_and_grad(p, batch, cfg)
    np.testing.assert_allclose(g, fd_grad(p, batch, cfg), rtol=1e-6, atol=1e-9)
    assert g[p._ls_off] == 0.0


def test_invalid_rows_do_not_change_loss_or_gradient():
    rng = np.random.default_rng(6)
    p = make_policy("discrete")
    batch = random_batch(p, "discrete", rng)
    cfg = PPOConfig()
    l1, g1, _ = loss_and_grad(p, batch, cfg)
    poisoned = RolloutBatch(**{**batch.__dict__})
    poisoned.advantages = batch.advantages.copy()
    poisoned.returns = batch.returns.copy()
    poisoned.advantages[~batch.valid] = 1e30
    poisoned.returns[~batch.valid] = np.nan
    l2, g2, _ = loss_and_grad(p, poisoned, cfg)
    assert l1 == l2
    assert np.array_equal(g1, g2)


def test_constant_and_poisoned_advantages_give_zero_policy_gradient():
    rng = np.random.default_rng(7)
    p = make_policy("discrete")
    batch = random_batch(p, "discrete", rng)
    batch.valid[:] = True
    cfg = PPOConfig(ent_coef=0.0, vf_coef=0.0)
    for adv in (np.full(12, 3.7), np.full(12, np.nan)):
        batch.advantages = adv
        loss, g, st = loss_and_grad(p, batch, cfg)
        assert np.isfinite(loss) and np.all(np.isfinite(g))
        assert st["losses/policy_loss"] == pytest.approx(0.0, abs=1e-12)
        assert np.abs(g).max() < 1e-9


# ---------------------------------------------------------------- Adam
def test_adam_matches_hand_computation():
    rng = np.random.default_rng(8)
    n = 5
    p = rng.normal(size=n)
    p0 = p.copy()
    opt = Adam(n, lr=0.1, betas=(0.8, 0.9), eps=1e-3, dtype="float64")
    grads = [rng.normal(size=n) for _ in range(3)]
    for g in grads:
        opt.step(p, g)
    # Kingma & Ba with torch's placement of eps:
    # p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    want2 = p0.copy()
    m = np.zeros(n)
    v = np.zeros(n)
    for t, g in enumerate(grads, start=1):
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        want2 -= 0.1 / (1 - 0.8**t) * m / (np.sqrt(v) / math.sqrt(1 - 0.9**t) + 1e-3)
    np.testing.assert_allclose(p, want2, rtol=1e-13)
    assert opt.step_count == 3


def test_adam_first_step_is_lr_times_sign():
    p = np.zeros(3)
    Adam(3, lr=0.01, eps=1e-12, dtype="float64").step(p, np.array([2.0, -0.5, 1e-3]))
    np.testing.assert_allclose(p, [-0.01, 0.01, -0.01], rtol=1e-6)


def test_global_norm_clipping_and_skipped_step():
    p = np.zeros(2)
    opt = Adam(2, lr=1.0, eps=1e-12, dtype="float64")
    norm = opt.step(p, np.array([3.0, 4.0]), max_grad_norm=1.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_allclose(opt.m, 0.1 * np.array([3.0, 4.0]) / (5.0 + 1e-6), rtol=1e-12)
    before = (p.copy(), opt.m.copy(), opt.v.copy(), opt.step_count)
    norm = opt.step(p, np.array([np.nan, 1.0]), max_grad_norm=1.0)
    assert not math.isfinite(norm)
    assert np.array_equal(p, before[0]) and np.array_equal(opt.m, before[1])
    assert np.array_equal(opt.v, before[2]) and opt.step_count == before[3]


def test_adam_state_dict_round_trip():
    rng = np.random.default_rng(9)
    a = Adam(4, lr=0.01, dtype="float64")
    p = rng.normal(size=4)
    a.step(p, rng.normal(size=4))
    b = Adam(4, lr=0.5, dtype="float64")
    b.load_state_dict(a.state_dict())
    g = rng.normal(size=4)
    pa, pb = p.copy(), p.copy()
    a.step(pa, g)
    b.step(pb, g)
    assert np.array_equal(pa, pb)


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_params": 0}, ValueError, "Adam: n_params must be >= 1, got 0"),
        ({"n_params": 3, "lr": -1.0}, ValueError, "Adam: lr must be in"),
        ({"n_params": 3, "betas": (1.0, 0.9)}, ValueError, r"Adam: betas\[0\] must be in"),
        ({"n_params": 3, "eps": 0.0}, ValueError, "Adam: eps must be"),
        ({"n_params": 2.5}, TypeError, "Adam: n_params must be an int"),
        ({"n_params": 3, "dtype": "float16"}, ValueError, "Adam: dtype must be one of"),
    ],
)
def test_adam_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Adam(**kwargs)


def test_adam_step_errors():
    opt = Adam(3, dtype="float64")
    with pytest.raises(
        ValueError, match=r"Adam.step: params must be shape \(3,\), got shape \(4,\)"
    ):
        opt.step(np.zeros(4), np.zeros(4))
    with pytest.raises(TypeError, match=r"Adam\.step: grad must be a float32 or float64 ndarray"):
        opt.step(np.zeros(3), np.zeros(3, np.int64))
    with pytest.raises(
        TypeError, match=r"Adam\.step: grad must be dtype float64 \(the optimizer's;"
    ):
        opt.step(np.zeros(3), np.zeros(3, np.float32))
    # float32 moments step float32 parameters only (no silent widening or rounding)
    with pytest.raises(
        TypeError,
        match=r"Adam\.step: params must be dtype float32 \(the optimizer's; "
        r"Adam\(\.\.\., dtype='float64'\) steps float64 parameters\), got dtype float64",
    ):
        Adam(3).step(np.zeros(3), np.zeros(3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_step_in_either_precision_matches_numpy(dtype):
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=50)
    p, g = p0.astype(dtype), rng.normal(size=50).astype(dtype)
    opt = Adam(50, lr=0.01, dtype=dtype)
    norm = opt.step(p, g, max_grad_norm=0.5)
    g64 = g.astype(np.float64)
    assert norm == pytest.approx(np.linalg.norm(g64), rel=1e-12)
    gc = g64 * 0.5 / (norm + 1e-6)
    m, v = 0.1 * gc, 0.001 * gc * gc
    want = p0.astype(dtype).astype(np.float64) - 0.01 / 0.1 * m / (
        np.sqrt(v) / np.sqrt(0.001) + 1e-5
    )
    assert p.dtype == dtype and opt.m.dtype == dtype and opt.v.dtype == dtype
    np.testing.assert_allclose(p, want, rtol=1e-6 if dtype == np.float32 else 1e-12)


# ---------------------------------------------------------------- spaces and errors
def test_from_spaces_heads():
    box = spaces.Box(-1, 1, (3,), np.float32)
    p = ActorCritic.from_spaces(box, spaces.Discrete(4, start=2))
    assert p.kind == "discrete" and p.n_logits == 4
    assert p.to_env(np.array([0, 3])).tolist() == [2, 5]
    p = ActorCritic.from_spaces(box, spaces.MultiDiscrete([2, 5]))
    assert p.kind == "multi_discrete" and p.n_logits == 7
    p = ActorCritic.from_spaces(box, spaces.Box(-2, 2, (2,), np.float32), log_std_init=-1.0)
    assert p.kind == "continuous" and np.all(p.log_std == -1.0)
    np.testing.assert_array_equal(p.to_env(np.array([[3.0, -0.5]], np.float32)), [[2.0, -0.5]])
    p = ActorCritic.from_spaces(box, spaces.Box(0, 4, (1,), np.float32), squash=True)
    np.testing.assert_allclose(
        p.to_env(np.array([[-1.0], [0.0], [1.0]], np.float32)), [[0], [2], [4]]
    )


@pytest.mark.parametrize(
    ("obs_space", "act_space", "opts", "exc", "match"),
    [
        (
            spaces.Dict({"a": spaces.Box(-1, 1, (2,))}),
            spaces.Discrete(2),
            {},
            TypeError,
            "ActorCritic.from_spaces: observation_space must be a gymnasium Box",
        ),
        (
            spaces.Box(-1, 1, (2,)),
            spaces.MultiBinary(3),
            {},
            TypeError,
            "action_space must be Discrete, MultiDiscrete or a 1-D Box",
        ),
        (
            spaces.Box(-1, 1, (2,)),
            spaces.Box(-1, 1, (2, 2)),
            {},
            TypeError,
            "action_space must be a 1-D Box",
        ),
        (
            spaces.Box(-1, 1, (2,)),
            spaces.Discrete(2),
            {"squash": True},
            ValueError,
            "head_options must be empty",
        ),
        (
            spaces.Box(-1, 1, (2,)),
            spaces.Box(-1, 1, (2,)),
            {"bogus": 1},
            TypeError,
            "head_options must be keys",
        ),
        (
            spaces.Box(-1, 1, (2,)),
            spaces.Box(-np.inf, np.inf, (2,)),
            {"squash": True},
            ValueError,
            "squash must be False when the action bounds are infinite",
        ),
        (
            spaces.Box(-1, 1, (2,)),
            spaces.Box(-1, 1, (2,)),
            {"log_std_min": 1.0, "log_std_max": 0.0},
            ValueError,
            "log_std_min must be < log_std_max",
        ),
    ],
)
def test_from_spaces_errors(obs_space, act_space, opts, exc, match):
    with pytest.raises(exc, match=match):
        ActorCritic.from_spaces(obs_space, act_space, **opts)


def test_constructor_errors():
    with pytest.raises(ValueError, match="ActorCritic: activation must be one of"):
        ActorCritic((2,), "discrete", nvec=[2], activation="gelu")
    with pytest.raises(
        ValueError, match=r"ActorCritic: hidden_sizes must be a sequence of ints in \[1, 65536\]"
    ):
        ActorCritic((2,), "discrete", nvec=[2], hidden_sizes=(64, 0))
    with pytest.raises(ValueError, match=r"ActorCritic: nvec must be .* ints in \[1, 65536\]"):
        ActorCritic((2,), "multi_discrete", nvec=[2, 0])
    with pytest.raises(ValueError, match=r"ActorCritic: nvec must be .* ints in \[1, 65536\]"):
        ActorCritic((2,), "multi_discrete", nvec=np.array([2**64 - 1, 3], np.uint64))


@pytest.mark.parametrize(
    "kw",
    [
        {"obs_shape": (65536, 65536)},
        {"hidden_sizes": (30000, 30000)},
        {"kind": "continuous", "action_dim": 10**12},
        {"kind": "multi_discrete", "nvec": [65536] * 2000},
    ],
)
def test_network_size_rule_comes_before_any_allocation(kw):
    # A checkpoint's spec must not make the constructor allocate gigabytes:
    # these raise at once (no orthogonal init of a 30000x30000 matrix).
    from fastppo.nn.policy import MAX_PARAMS

    args = {"obs_shape": (4,), "kind": "discrete", "nvec": [2], **kw}
    if args["kind"] == "continuous":
        args.pop("nvec")
    with pytest.raises(
        ValueError, match=rf"ActorCritic: .* must be (at most MAX_PARAMS = {MAX_PARAMS}|an int in)"
    ):
        ActorCritic(args.pop("obs_shape"), args.pop("kind"), **args)


def test_input_errors():
    p = make_policy("discrete")
    with pytest.raises(
        ValueError, match=r"ActorCritic.value: obs must be shape \[N, 4\], got shape \(3, 5\)"
    ):
        p.value(np.zeros((3, 5)))
    with pytest.raises(
        ValueError, match=r"ActorCritic\.value: obs must be finite, got .*nan.* at index"
    ):
        p.value(np.array([[0.0, np.nan, 0.0, 0.0]]))
    with pytest.raises(
        ValueError, match=r"ActorCritic.evaluate: actions must be in \[0, 3\), got 3 at row 1"
    ):
        p.evaluate(np.zeros((2, 4)), np.array([0, 3]))
    with pytest.raises(TypeError, match=r"ActorCritic\.evaluate: actions must be integer actions"):
        p.evaluate(np.zeros((2, 4)), np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"ActorCritic.set_params: flat must be shape"):
        p.set_params(np.zeros(3))
    with pytest.raises(ValueError, match=r"ActorCritic\.set_params: flat must be finite"):
        p.set_params(np.full(p.n_params, np.inf))


def test_get_set_params_copy_semantics():
    p = make_policy("gauss")
    q = make_policy("gauss", seed=2)
    flat = p.get_params()
    assert not np.shares_memory(flat, p.params)
    q.set_params(flat)
    obs = np.random.default_rng(0).normal(size=(3, 4))
    np.testing.assert_array_equal(q.head_outputs(obs), p.head_outputs(obs))
    assert q.log_std is not None and np.shares_memory(q.log_std, q.params)


def test_squash_density_agrees_everywhere_on_saturated_float32_actions():
    # One clip limit and one log-det (fastppo.kernels.squash): the sampler, the
    # public gaussian_logp_entropy and the MLP head's evaluate give the same
    # log-density for the same float32 actions, saturated ones included.
    from fastppo import sampling as S
    from fastppo.kernels.squash import A_LIMIT

    mean = np.array([0.0, 9.0, -30.0])  # dims 1 and 2 saturate in float32
    ls = np.array([-1.0, 0.5, -3.0])
    pol = ActorCritic((2,), "continuous", action_dim=3, hidden_sizes=(), squash=True,
                      action_low=-1.0, action_high=1.0, log_std_min=-5.0)  # fmt: skip
    w, b = pol.actor_layers[0]
    w[...] = 0.0
    b[...] = mean  # every observation gets these means
    pol.log_std[...] = ls
    n = 256
    obs = np.zeros((n, 2))
    means = np.broadcast_to(mean, (n, 3)).copy()
    act, slogp = S.sample_gaussian(means, ls, seed=4, counter=9, squash=True)
    assert (np.abs(act[:, 1:]) == 1.0).any(axis=0).all()  # both saturate to 1.0
    # actions at and just inside the clip limit (a caller's buffer may hold them)
    edge = np.float32([[0.5, 1.0, -1.0], [0.5, A_LIMIT, -A_LIMIT], [0.0, 1.0, A_LIMIT]])
    act, slogp = np.concatenate([act, edge]), np.concatenate([slogp, np.zeros(3, np.float32)])
    means = np.concatenate([means, means[:3]])
    obs = np.zeros((n + 3, 2))
    klogp, _ = S.gaussian_logp_entropy(means, ls, act, squash=True)
    plogp, _, _ = pol.evaluate(obs, act)
    assert np.all(np.isfinite(slogp)) and np.all(np.isfinite(klogp))
    np.testing.assert_allclose(slogp[:n], klogp[:n], rtol=2e-7)
    np.testing.assert_allclose(plogp, klogp, rtol=1e-6)
    assert klogp[n] == klogp[n + 1]  # +-1.0 is clipped to +-A_LIMIT
    # the trainer's step stores the sampler's logp: a PPO ratio starts at 1
    a2, l2, _ = pol.step(obs, seed=4, counter=9)
    np.testing.assert_allclose(pol.evaluate(obs, a2)[0], l2, rtol=1e-6)


def test_discrete_mode_is_the_samplers_deterministic_action() -> None:
    """ActorCritic.act(deterministic=True) takes a discrete head's mode in numpy;
    it is sample_categorical's deterministic action (the first largest logit),
    and the rows that sampler refuses raise its error."""
    pol = ActorCritic((5,), "discrete", nvec=[4], hidden_sizes=(8,), seed=1)
    logits = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    logits[:8] = np.round(logits[:8])  # ties: the first maximum wins
    logits[8, 1:3] = 7.0
    logits[9, 0] = -np.inf  # -inf is an impossible action, not an error
    want, _ = fastppo.sample_categorical(logits, seed=0, counter=0, deterministic=True)
    got = pol._mode("ActorCritic.act", logits)
    assert got.dtype == np.int64 and np.array_equal(got, want)
    for bad, msg in ((np.nan, "nan at env 3, action 2"), (np.inf, "inf at env 3, action 2")):
        x = logits.copy()
        x[3, 2] = bad
        with pytest.raises(ValueError, match=rf"^ActorCritic\.act: logits must be .*{msg}"):
            pol._mode("ActorCritic.act", x)
    x = logits.copy()
    x[5] = -np.inf
    with pytest.raises(ValueError, match=r"all -inf at env 5"):
        pol._mode("ActorCritic.act", x)
    obs = np.random.default_rng(1).standard_normal((6, 5))
    out = pol._forward(pol.obs_batch("t", obs), True, False)[0]
    ref, _ = fastppo.sample_categorical(out, seed=0, counter=0, deterministic=True)
    assert np.array_equal(pol.act(obs, deterministic=True), ref)
