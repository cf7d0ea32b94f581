"""fastppo.compat.cleanrl against CleanRL's own GAE block (torch, verbatim)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fastppo.compat.cleanrl import cleanrl_gae  # noqa: E402


def cleanrl_block(rewards, values, dones, next_value, next_done, gamma, gae_lambda):  # type: ignore[no-untyped-def]
    """CleanRL ppo.py's GAE block, verbatim except `args.` and `device`."""
    num_steps = rewards.shape[0]
    with torch.no_grad():
        advantages = torch.zeros_like(rewards)
        lastgaelam = 0
        for t in reversed(range(num_steps)):
            if t == num_steps - 1:
                nextnonterminal = 1.0 - next_done
                nextvalues = next_value
            else:
                nextnonterminal = 1.0 - dones[t + 1]
                nextvalues = values[t + 1]
            delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
            advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
        returns = advantages + values
    return advantages, returns


def _rollout(seed: int, T: int, N: int, dtype: torch.dtype) -> tuple:
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(T, N, generator=g, dtype=dtype)
    values = torch.randn(T, N, generator=g, dtype=dtype)
    dones = (torch.rand(T, N, generator=g) < 0.1).to(dtype)  # CleanRL stores float dones
    next_value = torch.randn(1, N, generator=g, dtype=dtype)  # .reshape(1, -1) as in CleanRL
    next_done = (torch.rand(N, generator=g) < 0.3).to(dtype)
    return rewards, values, dones, next_value, next_done


@pytest.mark.parametrize(("T", "N"), [(1, 1), (128, 4), (300, 33)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.5, 0.0), (1.0, 1.0)])
def test_matches_cleanrl_block(
    T: int, N: int, dtype: torch.dtype, gamma: float, lam: float
) -> None:
    args = _rollout(T + N, T, N, dtype)
    ref_adv, ref_ret = cleanrl_block(*args, gamma, lam)
    adv, ret = cleanrl_gae(*args, gamma=gamma, gae_lambda=lam)
    assert isinstance(adv, torch.Tensor) and adv.dtype == dtype and adv.shape == (T, N)
    tol = (3e-6 if dtype == torch.float32 else 1e-12) * max(1.0, float(ref_ret.abs().max()))
    torch.testing.assert_close(adv, ref_adv, rtol=0, atol=tol)
    torch.testing.assert_close(ret, ref_ret, rtol=0, atol=tol)


def test_numpy_in_numpy_out_and_bool_dones() -> None:
    rewards, values, dones, next_value, next_done = _rollout(1, 64, 8, torch.float32)
    ref_adv, ref_ret = cleanrl_block(rewards, values, dones, next_value, next_done, 0.99, 0.95)
    adv, ret = cleanrl_gae(
        rewards.numpy(),
        values.numpy(),
        dones.numpy().astype(bool),
        next_value.numpy()[0],
        next_done.numpy().astype(bool),
    )
    assert isinstance(adv, np.ndarray) and isinstance(ret, np.ndarray)
    np.testing.assert_allclose(adv, ref_adv.numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(ret, ref_ret.numpy(), rtol=0, atol=1e-5)


def test_out_torch_tensors_written_in_place() -> None:
    args = _rollout(2, 32, 4, torch.float32)
    ref_adv, ref_ret = cleanrl_block(*args, 0.99, 0.95)
    adv_out = torch.full((32, 4), float("nan"))
    ret_out = torch.full((32, 4), float("nan"))
    adv, ret = cleanrl_gae(*args, out=(adv_out, ret_out))
    assert adv is adv_out and ret is ret_out
    torch.testing.assert_close(adv_out, ref_adv, rtol=0, atol=1e-5)
    torch.testing.assert_close(ret_out, ref_ret, rtol=0, atol=1e-5)


def test_outputs_share_memory_with_kernel_results() -> None:
    """Returned tensors wrap fastppo's arrays: no copy on the way back to torch."""
    args = _rollout(3, 16, 2, torch.float32)
    adv, ret = cleanrl_gae(*args)
    assert not np.shares_memory(adv.numpy(), ret.numpy())
    a_np = adv.numpy()
    a_np[0, 0] = 123.0
    assert float(adv[0, 0]) == 123.0


def test_rejects_bad_input() -> None:
    r = torch.zeros(5, 3)
    with pytest.raises(ValueError, match=r"cleanrl_gae: dones must be shape \(5, 3\)"):
        cleanrl_gae(r, r, torch.zeros(4, 3), torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"cleanrl_gae: dones must be 0/1 flags"):
        cleanrl_gae(r, r, torch.full((5, 3), 0.5), torch.zeros(3), torch.zeros(3))
    with pytest.raises(ValueError, match=r"cleanrl_gae: next_done must be shape \(3,\)"):
        cleanrl_gae(r, r, torch.zeros(5, 3), torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match=r"cleanrl_gae: rewards must be 2-D"):
        cleanrl_gae(torch.zeros(5), r, torch.zeros(5, 3), torch.zeros(3), torch.zeros(3))
    with pytest.raises(TypeError, match=r"gae: values must be float32 like the other"):
        cleanrl_gae(r, r.double(), torch.zeros(5, 3), torch.zeros(3), torch.zeros(3))
