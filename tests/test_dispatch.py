"""fastppo._dispatch: every size threshold in one module, with environment overrides."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fastppo import _dispatch


def test_defaults_and_override(monkeypatch):
    monkeypatch.delenv("FASTPPO_X", raising=False)
    assert _dispatch.env_int("X", 7) == 7
    monkeypatch.setenv("FASTPPO_X", "123")
    assert _dispatch.env_int("X", 7) == 123


@pytest.mark.parametrize("raw", ["-1", "lots", "1.5", ""])
def test_bad_override_names_the_variable(monkeypatch, raw):
    monkeypatch.setenv("FASTPPO_X", raw)
    with pytest.raises(ValueError, match=r"FASTPPO_X must be an int >= 0, got"):
        _dispatch.env_int("X", 7)


def test_thresholds_are_read_at_import_and_used_by_the_fast_path():
    # sample_categorical's fast path takes problems below its limit: with the
    # limit at 0 it declines everything, and the general path answers.
    script = (
        "import numpy as np\n"
        "from fastppo import _dispatch, sampling\n"
        "from fastppo._fastpath import fast, CATEGORICAL\n"
        "x = np.zeros((1, 3), np.float32)\n"
        "print(_dispatch.PARALLEL_MIN_LOGITS, _dispatch.SERIAL_MAX_THREADS,\n"
        "      fast.sample_categorical(x, None, 0, 0, 0, False, None) is None)\n"
    )
    env = dict(os.environ, FASTPPO_PARALLEL_MIN_LOGITS="0", FASTPPO_SERIAL_MAX_THREADS="9")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "9", "True"]
