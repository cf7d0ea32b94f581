"""The Ray backend's tests, each module in a child pytest process.

A Ray driver outlives ``ray.shutdown()`` in its process: after the two modules
below, the process still held 20 native threads of Ray's (gRPC pollers and
timers, the GCS client's io_service), more with every init/shutdown cycle, and
Ray does not support such cycles in one process with threads running
(ray-project/ray#31145). In the main test process those threads lived through
the other 1,500 tests to interpreter exit, where CI once died of SIGSEGV after
every test had passed. In a child the driver ends with its own tests, and a
crash, even one at exit, fails the test that ran it, with the child's output.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# Ray start-up and node failures take seconds each: the full run only.
pytestmark = pytest.mark.slow

pytest.importorskip("ray", reason="the Ray backend needs the ray extra: pip install '.[ray]'")

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize(("module", "tests"), [("ray_cases.py", 8), ("ray_cluster_cases.py", 4)])
def test_ray_backend_in_a_child_process(module: str, tests: int) -> None:
    res = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-rfEs", str(HERE / module)],
        cwd=HERE.parent,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    report = f"exit {res.returncode}\n{res.stdout[-6000:]}\n{res.stderr[-4000:]}"
    assert res.returncode == 0, report
    # every case ran (none skipped or deselected on the way)
    assert re.search(rf"\b{tests} passed\b", res.stdout), report
    assert "skipped" not in res.stdout and "deselected" not in res.stdout, report
