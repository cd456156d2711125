"""The host allocator the harness times under (harness/measure/allocator.py): with glibc's
thresholds fixed, a 16 MiB block comes from the heap below the program break; with glibc's own
adaptive ones (128 KiB at a process's start) it is mmap'd above it. A bad choice is one line."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, harness

# where a fresh process's 16 MiB malloc lands, after the harness's allocator setting (if any)
PROBE = """
import ctypes
from harness.measure import allocator
print(allocator.hold())
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = libc.sbrk.restype = ctypes.c_void_p
libc.malloc.argtypes, libc.sbrk.argtypes = [ctypes.c_size_t], [ctypes.c_ssize_t]
block = libc.malloc(16 << 20)
print("heap" if block < libc.sbrk(0) else "mmap")
"""


def _probe(choice: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_MALLOC": choice}
    p = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split("\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_fixed_thresholds_serve_a_16mib_block_from_the_heap_and_glibcs_own_mmap_it():
    state, where, _ = _probe("fixed")
    assert "'malloc': 'fixed'" in state and "'mmap_threshold': 33554432" in state
    assert where == "heap"
    state, where, _ = _probe("dynamic")
    assert "'malloc': 'dynamic'" in state
    assert where == "mmap"


def test_a_bad_allocator_choice_is_one_line_naming_the_choices(env):
    p = harness({**env, "HARNESS_MALLOC": "jemalloc"}, "list", timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "harness: error: HARNESS_MALLOC='jemalloc' is not a choice; valid choices: fixed, dynamic"]
