"""Type stub for the compiled ``fastppo._cy._stats`` (see ``_stats.pyx``).

Each method has a float32 and a float64 twin with the same parameters.
"""

import numpy as np

class Updater:
    def __init__(
        self, mean: np.ndarray, var: np.ndarray, rows_per_super: int, rows_per_block: int
    ) -> None: ...
    def update_f64(
        self, x: np.ndarray, valid: np.ndarray | None, count_a: float, n_threads: int = 1
    ) -> int: ...
    def affine_f64(
        self,
        x: np.ndarray,
        out: np.ndarray,
        epsilon: float,
        normalize: bool,
        clip: float,
        n_threads: int = 1,
        columns: bool = False,
    ) -> None: ...
    update_f32 = update_f64
    affine_f32 = affine_f64

RETURN_LIMIT: float

class ReturnScaler:
    def __init__(self, ret: np.ndarray, mean: np.ndarray, var: np.ndarray) -> None: ...
    def step_f64(
        self,
        r: np.ndarray,
        term: np.ndarray,
        trunc: np.ndarray,
        valid: np.ndarray | None,
        out: np.ndarray,
        gamma: float,
        clip: float,
        epsilon: float,
        count_a: float,
    ) -> int: ...
    step_f32 = step_f64
    step1_f32 = step_f64  # the [N] forms of one step
    step1_f64 = step_f64
