"""Compiled, gymnasium-identical vector envs for classic control.

``make_vec(env_id, num_envs, seed=, autoreset_mode=)`` returns a
:class:`CompiledVectorEnv` (a ``gymnasium.vector.VectorEnv``) whose ``step``
is one compiled call for the whole batch; ``ids()`` lists the env ids there
are. One env per file; the loop they share is :mod:`fastppo.envs._loop`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastppo.envs._vector import CompiledVectorEnv

__all__ = ["CompiledVectorEnv", "compiled_for", "ids", "make_vec"]

#: Compiled env ids and the module of each. The env modules (their kernels)
#: import neither gymnasium nor the vector env, so a build without gymnasium
#: (``pip install``'s kernel step, in its isolated build) can compile them;
#: ``CompiledVectorEnv`` is imported on first use.
MODULES = {
    "CartPole-v1": "fastppo.envs.cartpole",
    "Acrobot-v1": "fastppo.envs.acrobot",
    "MountainCar-v0": "fastppo.envs.mountain_car",
    "MountainCarContinuous-v0": "fastppo.envs.mountain_car_continuous",
    "Pendulum-v1": "fastppo.envs.pendulum",
}


def __getattr__(name: str) -> Any:
    if name == "CompiledVectorEnv":
        from fastppo.envs._vector import CompiledVectorEnv

        return CompiledVectorEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compiled_for(env_id: Any, env_backend: str = "compiled", env_kwargs: Any = None) -> bool:
    """Whether an env given by id steps as its compiled env here: the id is one
    of :func:`ids`, ``env_backend`` (``PPOConfig.env_backend``) is ``"compiled"``
    and no ``gymnasium.make`` keyword arguments ask for something else. The one
    rule the trainer and the actor-learner's actors follow."""
    return env_backend == "compiled" and env_id in MODULES and not env_kwargs


def ids() -> tuple[str, ...]:
    """The env ids ``make_vec`` compiles: CartPole-v1, Acrobot-v1, MountainCar-v0,
    MountainCarContinuous-v0, Pendulum-v1."""
    return tuple(MODULES)


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    seed: int | None = None,
    autoreset_mode: Any = "next_step",
    render_mode: str | None = None,
) -> CompiledVectorEnv:
    """``num_envs`` copies of ``env_id`` stepped by one compiled call.

    The same spaces, time limit and autoreset semantics as
    ``gymnasium.make_vec(env_id, num_envs)`` (``autoreset_mode`` is
    ``"next_step"``, gymnasium's default, or ``"same_step"``; gymnasium's
    ``AutoresetMode`` values work too), and the same dynamics bit for bit.
    ``seed`` keys the reset streams (env ``i`` draws from ``(seed, i)``);
    ``None`` takes a seed from the OS. Call ``reset()`` before ``step()``.
    ``render_mode="rgb_array"``: ``render()`` returns each env's frame, drawn
    by gymnasium's renderer (needs pygame: ``pip install 'fastppo[render]'``).
    """
    from fastppo.envs._vector import CompiledVectorEnv

    return CompiledVectorEnv(
        env_id, num_envs, seed=seed, autoreset_mode=autoreset_mode, render_mode=render_mode
    )
