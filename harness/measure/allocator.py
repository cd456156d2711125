"""The host allocator held steady while the harness times anything.

glibc's malloc adapts its mmap threshold as a process runs (mallopt(3), "dynamic mmap
threshold"): a block above the threshold is mmap'd, and every time the process frees an mmap'd
block larger than the threshold, the threshold rises to that size (up to 32 MiB on 64-bit) and the
trim threshold to twice it. Whether a step's activations come from fresh pages (a page fault per
4 KiB, zeroed by the kernel, and an munmap when freed) or from memory the heap kept therefore
depends on which sizes the process happened to free first, and it can change partway through a
run. Measured here (AMD EPYC, 2 cores, CosmoFlow tiny, +channels_last interleaved in one
process, 12 s each): six processes with glibc's defaults gave 1.27-1.79x, the variant's median
step 22.8 ms in one process and 32.5-38.0 ms in the others, and one 90 s process moved from 1.25x
to 1.60x partway through as its baseline's step went from 40 to 55 ms; six with the thresholds
fixed gave 1.77-1.87x, every variant step 21.8-22.7 ms, and a fifth of the system time.

So every harness process fixes both thresholds before it builds anything (`hold`, called once
from the CLI). Setting either one turns glibc's adaptation off. Blocks under 32 MiB then come
from the heap, and the heap keeps up to 1 GiB it freed instead of returning it: what CUDA's
caching allocator does on a GPU. HARNESS_MALLOC=dynamic keeps glibc's defaults (to measure what
the setting buys); every record's environment says which was in force."""
from __future__ import annotations

import ctypes
import ctypes.util
import os

from harness.config.errors import UsageError

ENV = "HARNESS_MALLOC"
CHOICES = ("fixed", "dynamic")
# <malloc.h>: the mallopt parameters
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # bytes: glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit, the most it adapts to
TRIM_THRESHOLD = 1 << 30  # bytes of free memory at the heap's top kept rather than returned (a C int)

_state: dict | None = None


def choice() -> str:
    """HARNESS_MALLOC's value (fixed when unset); UsageError naming the choices otherwise."""
    value = os.environ.get(ENV, "fixed").strip().lower() or "fixed"
    if value not in CHOICES:
        raise UsageError(f"{ENV}={value!r} is not a choice; valid choices: {', '.join(CHOICES)}")
    return value


def hold() -> dict:
    """Fix glibc's thresholds in this process (once; later calls return what the first did).
    Raises UsageError on a bad HARNESS_MALLOC; anything else is recorded, not raised."""
    global _state
    if _state is not None:
        return _state
    wanted = choice()
    if wanted == "dynamic":
        _state = {"malloc": "dynamic", "why": f"{ENV}=dynamic: glibc's adaptive thresholds"}
        return _state
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError) as e:  # not glibc (musl has no mallopt): nothing adapts to fix
        _state = {"malloc": "unchanged", "why": f"no mallopt in this C library ({e})"}
        return _state
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    _state = ({"malloc": "fixed", "mmap_threshold": MMAP_THRESHOLD, "trim_threshold": TRIM_THRESHOLD} if ok
              else {"malloc": "unchanged", "why": "mallopt refused the thresholds"})
    return _state


def state() -> dict:
    """What `hold` did in this process, or that it was not called."""
    return _state if _state is not None else {"malloc": "dynamic", "why": "harness.measure.allocator.hold not called"}
