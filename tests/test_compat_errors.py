"""Errors from the compat adapters name the function the user called (issue 13, class 9).

The adapters delegate to :func:`fastppo.gae`; its errors must still read
``cleanrl_gae: next_value ...`` (or ``sb3_gae: ...``), not ``gae: last_values``.
No peer library is needed: the adapters' argument handling is fastppo's own.
"""

from __future__ import annotations

import numpy as np
import pytest

import fastppo
from fastppo.compat.cleanrl import cleanrl_gae
from fastppo.compat.sb3 import sb3_gae


def test_errors_name_cleanrl_gae_and_its_own_arguments() -> None:
    """Issue 13 class 9: not ``gae:`` nor ``last_values`` (the user passed next_value)."""
    r = np.zeros((4, 2), np.float32)
    dones, nd = np.zeros((4, 2), bool), np.zeros(2, bool)
    with pytest.raises(TypeError, match=r"^cleanrl_gae: next_value must be float32 like rewards"):
        cleanrl_gae(r, r, dones, np.zeros(2), nd)
    with pytest.raises(ValueError, match=r"^cleanrl_gae: values must be finite, got nan"):
        cleanrl_gae(r, np.full((4, 2), np.nan, np.float32), dones, np.zeros(2, np.float32), nd)
    with pytest.raises(ValueError, match=r"^cleanrl_gae: next_value must be shape \(2,\)"):
        cleanrl_gae(r, r, dones, np.zeros(3, np.float32), nd)
    with pytest.raises(ValueError, match=r"^cleanrl_gae: gamma must be in \[0, 1\]"):
        cleanrl_gae(r, r, dones, np.zeros(2, np.float32), nd, gamma=2.0)
    with pytest.raises(
        ValueError, match=r"^cleanrl_gae: rewards must be non-empty \[num_steps, num_envs\]"
    ):
        z = np.zeros((0, 2), np.float32)
        cleanrl_gae(z, z, np.zeros((0, 2), bool), np.zeros(2, np.float32), nd)
    # outside the adapter, gae's own names come back
    with pytest.raises(TypeError, match=r"^gae: last_values must be float32"):
        fastppo.gae(r, r, np.zeros(2), dones)


def test_errors_name_sb3_gae_and_its_own_arguments() -> None:
    r = np.zeros((4, 2), np.float32)
    starts, d = np.zeros((4, 2), bool), np.zeros(2, bool)
    with pytest.raises(TypeError, match=r"^sb3_gae: values must be float32 like rewards"):
        sb3_gae(r, r.astype(np.float64), starts, np.zeros(2, np.float32), d)
    with pytest.raises(ValueError, match=r"^sb3_gae: last_values must be shape \(2,\)"):
        sb3_gae(r, r, starts, np.zeros(3, np.float32), d)
    with pytest.raises(ValueError, match=r"^sb3_gae: rewards must be non-empty"):
        z = np.zeros((0, 2), np.float32)
        sb3_gae(z, z, np.zeros((0, 2), bool), np.zeros(2, np.float32), d)


def test_nested_adapters_report_the_outermost_call() -> None:
    from fastppo import _checks as C

    with C.reported_as("outer", {"values": "buffer.values"}):
        with pytest.raises(TypeError, match=r"^outer: buffer.values must be float32"):
            sb3_gae(np.zeros((4, 2), np.float32), np.zeros((4, 2)), np.zeros((4, 2), bool),
                    np.zeros(2, np.float32), np.zeros(2, bool))  # fmt: skip
    with pytest.raises(TypeError, match=r"^gae: values"):  # the context is gone
        fastppo.gae(np.zeros(2, np.float32), np.zeros(2), 0.0, np.zeros(2, bool))
