"""Benchmark groups for the compiled vector envs (``fastppo.envs``).

``env step <id> [N]``: one ``step`` of N envs with random actions (a cycle of
16 pre-drawn batches), autoresets included. Baselines: gymnasium's numpy
``CartPoleVectorEnv`` (``gymnasium.make_vec(..., vectorization_mode=
"vector_entry_point")``) for CartPole-v1, and ``SyncVectorEnv`` (what
``gymnasium.make_vec`` builds for the other ids) for every id at N <= 64.
Before timing, every impl starts from fastppo's reset state and the check
demands the same observations, rewards and flags from the first step, bit
for bit: the rows time the same dynamics.

Issue 17's targets: fastppo >= 10x ``CartPoleVectorEnv`` at N = 8 and >= 2x at
N = 64, 1,024 and 4,096; >= 20x ``SyncVectorEnv`` at N = 8 for every id.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fastppo_bench.core import Group

_CYCLE = 16


def _stepper(env: Any, actions: list[np.ndarray]) -> Callable[[], Any]:
    k = [0]

    def run() -> Any:
        a = actions[k[0] % _CYCLE]
        k[0] += 1
        return env.step(a)[:4]

    return run


def _group(env_id: str, n: int, with_sync: bool) -> Group:
    import gymnasium as gym

    from fastppo import envs

    ours = envs.make_vec(env_id, n, seed=0)
    ours.reset()
    space = ours.action_space
    space.seed(0)
    actions = [np.asarray(space.sample()) for _ in range(_CYCLE)]
    impls: dict[str, Callable[[], Any] | str] = {}
    baseline = ""
    if env_id == "CartPole-v1":
        cv: Any = gym.make_vec(env_id, n, vectorization_mode="vector_entry_point")
        cv.reset(seed=0)
        cv.unwrapped.state = ours.state.T.copy()  # its state is [4, N]
        impls["gymnasium CartPoleVectorEnv"] = _stepper(cv, actions)
        baseline = "gymnasium CartPoleVectorEnv"
    if with_sync:
        sv: Any = gym.make_vec(env_id, n, vectorization_mode="sync")
        sv.reset(seed=0)
        for i, e in enumerate(sv.envs):
            e.unwrapped.state = ours.state[i].astype(
                np.float32 if env_id == "Acrobot-v1" else np.float64
            )
        impls["gymnasium SyncVectorEnv"] = _stepper(sv, actions)
        baseline = baseline or "gymnasium SyncVectorEnv"
    impls["fastppo"] = _stepper(ours, actions)

    def check(results: dict[str, Any]) -> None:
        mine = results["fastppo"]
        for label, theirs in results.items():
            for name, x, y in zip(("obs", "reward", "terminated", "truncated"), mine, theirs):
                x, y = np.asarray(x), np.asarray(y)
                if env_id == "Acrobot-v1" and name == "obs":
                    continue  # a reset obs may differ by 1 float32 ulp (fastppo.envs.acrobot)
                np.testing.assert_array_equal(x, y, err_msg=f"{label} {name}")

    return Group(
        name=f"env step {env_id} [N={n}]",
        baseline=baseline,
        impls=impls,
        check=check,
        target=(
            ">= 10x CartPoleVectorEnv at N=8, >= 2x at N>=64"
            if env_id == "CartPole-v1"
            else ">= 20x SyncVectorEnv at N=8"
        ),
    )


def groups(quick: bool, full: bool = False) -> list[Group]:
    """N = 8 for every id (against SyncVectorEnv), CartPole at every size."""
    from fastppo import envs

    out = [_group(e, 8, with_sync=True) for e in envs.ids()]
    sizes = (4096,) if quick else (64, 1024, 4096)
    out += [_group("CartPole-v1", n, with_sync=n <= 64) for n in sizes]
    if full:
        out += [_group(e, 64, with_sync=True) for e in envs.ids()[1:]]
    return out
