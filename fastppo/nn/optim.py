"""Adam on a flat float32 or float64 parameter vector, with global-norm gradient clipping."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastppo._checks import check_positive, check_range, fail
from fastppo.kernels.mlp import clip_adam_step
from fastppo.nn.layout import check_dtype


def moment_dtypes(dtype: np.dtype) -> tuple[np.dtype, ...]:
    """The dtypes a checkpoint may hold Adam's moments in, for parameters of ``dtype``:
    that dtype, or float64 (files written before the moments followed the parameters'
    dtype, on 2026-12-05); :meth:`Adam.load_state_dict` casts them."""
    return (np.dtype(dtype), np.dtype(np.float64))


class Adam:
    """Adam with bias correction over one flat float32 or float64 vector (Kingma & Ba 2014).

    ``m <- b1 m + (1 - b1) g``; ``v <- b2 v + (1 - b2) g^2``;
    ``p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``,
    the same arithmetic as ``torch.optim.Adam``. The moments are contiguous
    vectors of the parameters' dtype (as torch keeps them), so the PPO update
    kernel steps them in place; the gradient norm is summed in float64.

    Parameters
    ----------
    n_params : int
        Length of the parameter vector.
    lr : float
        Learning rate (``step(..., lr=...)`` overrides it per call, for annealing).
    betas : tuple of float
        ``(beta1, beta2)`` in [0, 1).
    eps : float
        Denominator constant; 1e-5 as in CleanRL's PPO (torch's default is 1e-8).
    dtype : {"float32", "float64"}
        dtype of the moments, which must be that of the parameters it steps
        (``ActorCritic.dtype``; float32 is the trainer's default).

    References
    ----------
    Kingma & Ba, "Adam: A Method for Stochastic Optimization", arXiv 1412.6980.
    """

    def __init__(
        self,
        n_params: int,
        lr: float = 3e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-5,
        dtype: str | np.dtype = "float32",
    ) -> None:
        if isinstance(n_params, bool) or not isinstance(n_params, (int, np.integer)):
            fail("Adam", "n_params", "an int", repr(n_params), exc=TypeError)
        if n_params < 1:
            fail("Adam", "n_params", ">= 1", repr(n_params))
        self.lr = check_positive("Adam", "lr", lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            fail("Adam", "betas", "a pair (beta1, beta2)", repr(betas), exc=TypeError)
        b1 = check_range("Adam", "betas[0]", betas[0], 0.0, 1.0, hi_open=True)
        b2 = check_range("Adam", "betas[1]", betas[1], 0.0, 1.0, hi_open=True)
        self.betas = (b1, b2)
        self.eps = check_positive("Adam", "eps", eps)
        self.dtype = np.dtype(check_dtype("Adam", dtype))
        self.m = np.zeros(int(n_params), dtype=self.dtype)
        self.v = np.zeros(int(n_params), dtype=self.dtype)
        # A 1-element array so kernels can advance the step count in place.
        self.t = np.zeros(1, dtype=np.int64)

    @property
    def n_params(self) -> int:
        return int(self.m.shape[0])

    @property
    def step_count(self) -> int:
        """Number of steps applied (skipped non-finite steps are not counted)."""
        return int(self.t[0])

    def step(
        self,
        params: np.ndarray,
        grad: np.ndarray,
        lr: float | None = None,
        max_grad_norm: float | None = None,
    ) -> float:
        """Clip ``grad`` to ``max_grad_norm`` (global L2 norm), then update ``params`` in place.

        Parameters
        ----------
        params : numpy.ndarray
            ``[n_params]`` of the optimizer's dtype, C-contiguous, writeable; updated
            in place.
        grad : numpy.ndarray
            ``[n_params]`` of the same dtype; not modified.
        lr : float, optional
            Learning rate for this step (default: ``self.lr``).
        max_grad_norm : float, optional
            Clip threshold; ``None`` means no clipping.

        Returns
        -------
        float
            The gradient norm before clipping. When it is NaN or inf the step is
            skipped: params, moments and the step count are left unchanged.
        """
        fn = "Adam.step"
        for name, a in (("params", params), ("grad", grad)):
            if not isinstance(a, np.ndarray) or a.dtype not in (np.float32, np.float64):
                fail(fn, name, "a float32 or float64 ndarray", _desc(a), exc=TypeError)
            if a.shape != self.m.shape:
                fail(fn, name, f"shape {self.m.shape}", f"shape {a.shape}")
            if a.dtype != self.dtype:
                fail(
                    fn,
                    name,
                    f"dtype {self.dtype} (the optimizer's; Adam(..., dtype='{a.dtype}') "
                    f"steps {a.dtype} parameters)",
                    f"dtype {a.dtype}",
                    exc=TypeError,
                )
        if not params.flags.c_contiguous or not params.flags.writeable:
            fail(fn, "params", "C-contiguous and writeable", "an array that is not")
        lr_ = self.lr if lr is None else check_positive(fn, "lr", lr)
        mg = 0.0 if max_grad_norm is None else check_positive(fn, "max_grad_norm", max_grad_norm)
        g = np.ascontiguousarray(grad)
        b1, b2 = self.betas
        return float(clip_adam_step(params, g, self.m, self.v, self.t, lr_, b1, b2, self.eps, mg))

    def state_dict(self) -> dict[str, Any]:
        """Copies of the moments and scalars (npz/JSON friendly: no objects)."""
        return {
            "m": self.m.copy(),
            "v": self.v.copy(),
            "t": int(self.t[0]),
            "lr": self.lr,
            "beta1": self.betas[0],
            "beta2": self.betas[1],
            "eps": self.eps,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict` (shapes must match this optimizer)."""
        fn = "Adam.load_state_dict"
        for key in ("m", "v", "t", "lr", "beta1", "beta2", "eps"):
            if key not in state:
                fail(fn, "state", f"a dict with key {key!r}", sorted(state))
        for key in ("m", "v"):
            # moments saved in another precision (float64 before 2026-12-05) are cast
            a = np.asarray(state[key], dtype=self.dtype)
            if a.shape != self.m.shape:
                fail(fn, f"state[{key!r}]", f"shape {self.m.shape}", f"shape {a.shape}")
            getattr(self, key)[...] = a
        self.t[0] = int(state["t"])
        self.lr = float(state["lr"])
        self.betas = (float(state["beta1"]), float(state["beta2"]))
        self.eps = float(state["eps"])


def _desc(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"array(dtype={a.dtype})"
    return type(a).__name__
