"""The fuzz suite (tests/fuzz_cases.py), run in a child process.

A crash in a kernel (SIGSEGV, abort) would kill the test process; in a child
it fails this test with the child's exit status instead. The child writes how
many cases each function ran and refused; every function must get its share.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLES = 300


@pytest.mark.slow
def test_fuzz_suite_in_a_child_process(tmp_path: Path) -> None:
    counts = tmp_path / "counts.json"
    env = dict(os.environ, FASTPPO_FUZZ_EXAMPLES=str(EXAMPLES), FASTPPO_FUZZ_COUNTS=str(counts))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(HERE / "fuzz_cases.py"),
        ],
        cwd=HERE.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    got = json.loads(counts.read_text())
    per_fn: dict[str, int] = {}
    for key, n in got.items():
        fn = key.rsplit(" ", 1)[0]
        per_fn[fn] = per_fn.get(fn, 0) + n
    assert len(per_fn) >= 23, sorted(per_fn)
    for fn, n in per_fn.items():
        assert n >= EXAMPLES, f"{fn}: only {n} cases"
    # every function both ran and refused some hostile call (the cases bite)
    refused = {k.rsplit(" ", 1)[0] for k in got if k.endswith("refused")}
    assert refused == set(per_fn), sorted(set(per_fn) - refused)
    print("fuzz cases:", json.dumps(got, sort_keys=True))
