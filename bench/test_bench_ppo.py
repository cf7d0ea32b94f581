"""fastppo's PPO update against the identical update written in PyTorch (CPU).

Correctness first: on the same weights and batch, in float64, the two give the
same gradients (rel. 1e-5; in practice ~1e-13) and the same parameters after
a full update. Then speed: one full update of 2048 samples, minibatch 64, 10
epochs, 64x64 tanh MLP on CartPole shapes, timed in interleaved rounds in one
run (ratio = torch median / fastppo median; target >= 3x).

Run: ``pytest bench/test_bench_ppo.py --benchmark-enable -s`` (needs
``pip install torch==2.13.0``). End to end: ``python bench/torch_ppo.py --e2e``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ppo_update_matrix import interleaved, random_batch, tensors  # noqa: E402
from torch_ppo import TorchActorCritic, torch_ppo_loss, torch_ppo_update  # noqa: E402

from fastppo.nn import ActorCritic, Adam  # noqa: E402
from fastppo.ppo import PPOConfig, RolloutBatch, loss_and_grad, ppo_update  # noqa: E402

B = 2048
CFG = PPOConfig(batch_size=64, n_epochs=10, ent_coef=0.01, clip_range_vf=0.2)


def _setup(
    kind: str = "discrete", seed: int = 0, dtype: str = "float64"
) -> tuple[ActorCritic, RolloutBatch]:
    rng = np.random.default_rng(seed)
    if kind == "discrete":
        p = ActorCritic((4,), "discrete", nvec=[2], seed=seed, dtype=dtype)
    else:
        p = ActorCritic((3,), "continuous", action_dim=1, seed=seed, log_std_init=-0.5, dtype=dtype)
    p.params[:] += rng.normal(0, 0.05, p.n_params)
    return p, random_batch(p, B, rng)


@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_gradients_match_torch_float64(kind):
    p, batch = _setup(kind)
    rows = np.arange(64, dtype=np.int64)
    _, g, _ = loss_and_grad(p, batch, CFG, rows)
    model = TorchActorCritic(p, torch.float64)
    t = [x[:64] for x in tensors(batch, torch.float64)]
    torch_ppo_loss(model, *t, CFG).backward()
    tg = model.flat_grad()
    assert np.max(np.abs(g - tg)) <= 1e-5 * np.max(np.abs(tg))


@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_gradients_match_torch_float32(kind):
    """float32 (the trainer's default) against torch float32 on the same weights: rel 1e-4."""
    p, batch = _setup(kind, dtype="float32")
    batch.obs = np.asarray(batch.obs, np.float32)
    rows = np.arange(64, dtype=np.int64)
    _, g, _ = loss_and_grad(p, batch, CFG, rows)
    assert g.dtype == np.float32
    model = TorchActorCritic(p, torch.float32)
    t = [x[:64] for x in tensors(batch, torch.float32)]
    torch_ppo_loss(model, *t, CFG).backward()
    tg = model.flat_grad()
    assert np.linalg.norm(g - tg) <= 1e-4 * np.linalg.norm(tg)


def test_full_update_matches_torch_float64():
    p, batch = _setup()
    cfg = CFG.replace(n_epochs=2)
    model = TorchActorCritic(p, torch.float64)
    opt_t = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate, eps=cfg.adam_eps)
    perms = np.stack([np.random.default_rng(1).permutation(B) for _ in range(2)])
    torch_ppo_update(model, opt_t, tensors(batch, torch.float64), cfg, perms)

    class FixedPerm(np.random.Generator):
        """Hands ppo_update the same permutations the torch loop used."""

        def __init__(self) -> None:
            super().__init__(np.random.PCG64(0))
            self.k = 0

        def permutation(self, x):  # type: ignore[override]
            out = np.asarray(x)[perms[self.k]]
            self.k += 1
            return out

    opt = Adam(p.n_params, cfg.learning_rate, eps=cfg.adam_eps, dtype=p.dtype)
    ppo_update(p, opt, batch, cfg, FixedPerm())
    theirs = np.concatenate(
        [
            np.concatenate([m.weight.detach().numpy().T.ravel(), m.bias.detach().numpy()])
            for seq in (model.actor, model.critic)
            for m in seq
            if isinstance(m, torch.nn.Linear)
        ]
    )
    np.testing.assert_allclose(p.params, theirs, rtol=1e-6, atol=1e-8)


def test_update_speed_vs_torch(benchmark):
    """One full PPO update (2048 x 10 epochs, minibatch 64): fastppo vs PyTorch, both float32."""
    torch.set_num_threads(1)
    p, batch = _setup(dtype="float32")
    opt = Adam(p.n_params, CFG.learning_rate, eps=CFG.adam_eps, dtype=p.dtype)
    rng = np.random.default_rng(0)
    model = TorchActorCritic(p, torch.float32)
    opt_t = torch.optim.Adam(model.parameters(), lr=CFG.learning_rate, eps=CFG.adam_eps)
    tt = tensors(batch, torch.float32)
    perms = np.stack([np.random.default_rng(e).permutation(B) for e in range(CFG.n_epochs)])

    def ours() -> None:
        ppo_update(p, opt, batch, CFG, rng)

    def theirs() -> None:
        torch_ppo_update(model, opt_t, tt, CFG, perms)

    ours()  # compile / warm
    theirs()
    med = interleaved({"fastppo": ours, "torch": theirs}, rounds=5)
    ratio = med["torch"] / med["fastppo"]
    benchmark.extra_info.update(
        fastppo_s=med["fastppo"], torch_s=med["torch"], ratio=ratio, target=">= 3x"
    )
    print(
        f"\nPPO update 2048x10 epochs mb 64, 64x64 tanh: fastppo {med['fastppo'] * 1e3:.1f} ms, "
        f"torch {med['torch'] * 1e3:.1f} ms, ratio {ratio:.1f}x (target >= 3x)"
    )
    benchmark.pedantic(ours, rounds=3, iterations=1)


def test_end_to_end_cartpole_vs_cleanrl(benchmark):
    """CartPole-v1, 100k steps, the CLI's hyperparameters: fastppo vs CleanRL-style torch PPO.

    Minutes on 2 cores; the same comparison as ``python bench/torch_ppo.py --e2e``.
    """
    import os

    from torch_ppo import cleanrl_train

    from fastppo.ppo import PPOTrainer
    from fastppo.ppo.defaults import env_defaults

    torch.set_num_threads(1)
    steps = int(os.environ.get("FASTPPO_E2E_STEPS", "100000"))
    d = env_defaults("CartPole-v1")
    d.pop("total_timesteps")
    cfg = PPOConfig(**d, seed=1)
    with PPOTrainer("CartPole-v1", cfg.replace(n_steps=8, batch_size=64)) as warm:
        warm.learn(64)  # compile outside the timed run, as torch's kernels are prebuilt

    def ours() -> float:
        t0 = time.perf_counter()
        with PPOTrainer("CartPole-v1", cfg) as tr:
            tr.learn(steps)
        return time.perf_counter() - t0

    t_ours = benchmark.pedantic(ours, rounds=1, iterations=1)
    t_theirs = cleanrl_train("CartPole-v1", steps, cfg)["wall_s"]
    ratio = t_theirs / t_ours
    benchmark.extra_info.update(fastppo_s=t_ours, cleanrl_s=t_theirs, ratio=ratio, target=">= 2x")
    print(
        f"\nCartPole {steps} steps: fastppo {t_ours:.1f} s, CleanRL-style torch "
        f"{t_theirs:.1f} s, ratio {ratio:.2f}x (target >= 2x)"
    )


def test_gemm_floor_counts_the_products_of_an_update_and_a_forward() -> None:
    """bench/gemm_floors.py: 8 products per network for an update (3 forward,
    3 weight gradients, 2 input gradients), 3 for a forward, each conformable."""
    from gemm_floors import shapes

    update = shapes(256, 4, 64, (2, 1), True)
    assert len(update) == 16 and len(shapes(4096, 17, 256, (6,), False)) == 3
    assert all(sa[1] == sb[0] for sa, sb in update)
    # every weight gradient has its layer's weight shape; rows are the minibatch
    weights = {(4, 64), (64, 64), (64, 2), (64, 1)}
    assert {(sa[0], sb[1]) for sa, sb in update if sa[1] == 256} == weights
