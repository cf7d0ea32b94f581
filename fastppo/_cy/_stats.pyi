"""Type stub for the compiled ``fastppo._cy._stats`` (see ``_stats.pyx``)."""

import numpy as np

class Updater:
    def __init__(
        self, mean: np.ndarray, var: np.ndarray, rows_per_super: int, rows_per_block: int
    ) -> None: ...
    def update_f32(self, x: np.ndarray, valid: np.ndarray | None, count_a: float) -> int: ...
    def update_f64(self, x: np.ndarray, valid: np.ndarray | None, count_a: float) -> int: ...
