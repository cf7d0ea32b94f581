"""Orthogonal initialisation (Saxe et al. 2013), as PPO implementations use it."""

from __future__ import annotations

import numpy as np


def orthogonal(n_in: int, n_out: int, gain: float, rng: np.random.Generator) -> np.ndarray:
    """An ``[n_in, n_out]`` float64 weight whose torch-layout transpose is orthogonal.

    Same recipe as ``torch.nn.init.orthogonal_`` on a ``[n_out, n_in]`` weight: QR of
    a standard normal matrix, with the signs of ``R``'s diagonal folded into ``Q``
    so the result is uniformly (Haar) distributed, then scaled by ``gain``. Rows
    (or columns, whichever are fewer) are orthonormal times ``gain``.

    Parameters
    ----------
    n_in, n_out : int
        Layer fan-in and fan-out.
    gain : float
        Scale: ``sqrt(2)`` for hidden layers, 0.01 for a policy output, 1.0 for a
        value output (Engstrom et al. 2020, "Implementation Matters", arXiv 2005.12729).
    rng : numpy.random.Generator
        Source of the normal draws (seeded by the caller for determinism).

    Returns
    -------
    numpy.ndarray
        float64 ``[n_in, n_out]``.

    References
    ----------
    Saxe, McClelland & Ganguli, "Exact solutions to the nonlinear dynamics of
    learning in deep linear neural networks", arXiv 1312.6120.
    """
    rows, cols = n_out, n_in
    flat = rng.standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return np.ascontiguousarray((gain * q).T)
