"""harness/measure/native_log.profiler_quiet: what C++ writes to fd 2 inside a profiled block is
filtered line by line; the profiler's own lines are dropped, every other line comes back."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def test_profiler_lines_dropped_other_native_lines_kept():
    code = ("import os\nfrom harness.measure.native_log import profiler_quiet\n"
            "with profiler_quiet():\n"
            "    os.write(2, b'USDT:2026 SyncActivityProfilerHandler.cpp:52] profiler_start\\n')\n"
            "    os.write(2, b'a real warning\\n')\n"
            "    os.write(2, b'[W] Memory block of unknown size was allocated before the profiling started\\n')\n"
            "os.write(2, b'after\\n')\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == ["a real warning", "after"]
