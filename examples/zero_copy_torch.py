"""fastppo kernels on torch CPU tensors: no copies in, results straight into tensors.

    python examples/zero_copy_torch.py

Every fastppo kernel views a torch CPU tensor's memory directly (also numpy
arrays, ``__array__``/``__dlpack__``/buffer-protocol objects), and ``out=``
accepts torch tensors, so a torch training loop can keep its own buffers.
A CUDA tensor is refused with a TypeError instead of being copied silently.
Needs ``pip install torch``.
"""

from __future__ import annotations

import torch

import fastppo


def main() -> None:
    T, N = 2048, 64
    g = torch.Generator().manual_seed(0)
    rewards = torch.randn(T, N, generator=g)
    values = torch.randn(T, N, generator=g, requires_grad=True)  # detached, not copied
    last_values = torch.randn(N, generator=g)
    terminated = torch.rand(T, N, generator=g) < 0.01

    advantages = torch.empty(T, N)  # the training loop's own buffers
    returns = torch.empty(T, N)
    adv, ret = fastppo.gae(rewards, values, last_values, terminated, out=(advantages, returns))
    print(
        "results written into the torch tensors:",
        adv.ctypes.data == advantages.data_ptr() and ret.ctypes.data == returns.data_ptr(),
    )
    print("advantages[:3, 0] =", advantages[:3, 0].tolist())

    if torch.cuda.is_available():
        try:
            fastppo.gae(rewards.cuda(), values, last_values, terminated)
        except TypeError as e:
            print("refused:", e)


if __name__ == "__main__":
    main()
