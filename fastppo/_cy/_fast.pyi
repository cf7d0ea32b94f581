"""Type stub for the compiled ``fastppo._cy._fast`` (see ``_fast.pyx``)."""

from collections.abc import Callable
from typing import Any

import numpy as np

def configure(loader: Callable[[int, int], int], options: tuple[int, ...]) -> None: ...
def set_limit(kind: int, size: int) -> None: ...
def set_blocks(rule: Callable[[int, int, int, bool], tuple[int, int]]) -> None: ...

SCRATCH_SLOTS: int
SCRATCH_MIN: int
SCRATCH_MAX: int

class _Block: ...

def scratch_cached() -> tuple[int, int]: ...
def c_contiguous(a: np.ndarray) -> np.ndarray: ...
def row_readable(a: np.ndarray) -> bool: ...
def ndarray_of(x: Any) -> np.ndarray | None: ...
def set_as_array_rest(rest: Callable[[str, str, Any], np.ndarray]) -> None: ...
def as_array(fn: str, name: str, x: Any) -> np.ndarray: ...
def flag_bytes(a: np.ndarray) -> np.ndarray | None: ...
def float_flags(a: np.ndarray) -> tuple[np.ndarray | None, int]: ...
def next_valid(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None: ...
def may_share_memory(a: np.ndarray, b: np.ndarray) -> bool: ...
def gae(
    rewards: Any,
    values: Any,
    last_values: Any,
    terminated: Any,
    truncated: Any,
    final_values: Any,
    valid: Any,
    gamma: Any,
    gae_lambda: Any,
    out: Any,
) -> tuple[np.ndarray, np.ndarray] | None: ...
def vtrace(
    behavior_logp: Any,
    target_logp: Any,
    rewards: Any,
    values: Any,
    last_values: Any,
    terminated: Any,
    truncated: Any,
    final_values: Any,
    valid: Any,
    gamma: Any,
    lam: Any,
    rho_bar: Any,
    c_bar: Any,
    pg_rho_bar: Any,
    out: Any,
) -> tuple[np.ndarray, np.ndarray] | None: ...
def discounted_returns(
    rewards: Any,
    last_values: Any,
    terminated: Any,
    truncated: Any,
    final_values: Any,
    valid: Any,
    gamma: Any,
    out: Any,
) -> np.ndarray | None: ...
def sample_categorical(
    logits: Any,
    mask: Any,
    seed: Any,
    counter: Any,
    env_offset: Any,
    deterministic: Any,
    out: Any,
) -> tuple[np.ndarray, np.ndarray] | None: ...
def same_rows(a: np.ndarray) -> bool: ...
def sample_gaussian(
    mean: Any,
    log_std: Any,
    seed: Any,
    counter: Any,
    env_offset: Any,
    squash: Any,
    deterministic: Any,
    out: Any,
) -> tuple[np.ndarray, np.ndarray] | None: ...
def env_step(
    entry: int,
    state: np.ndarray,
    book: np.ndarray,
    actions: Any,
    discrete: bool,
    max_steps: int,
    same_step: bool,
    obs_dim: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, int] | None: ...
