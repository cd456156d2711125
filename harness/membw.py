"""Memory copy bandwidth: the ceiling of collectives inside one node.

On one node gloo and MPI move bytes through shared memory: every byte a rank receives is at
least one copy (read from the sender's buffer, written to the receiver's), so no collective's
bus bandwidth can beat a plain memory copy on the same cores. Measured STREAM-style on large
torch tensors (64 MiB per array on CPU, far beyond the caches; 1 GiB on a GPU), best of REPS,
with one thread and with all of the process's threads, and cached per device.

Units: copy_gb_per_s = bytes copied / s (each byte read once and written once): the figure a
busbw is compared with. STREAM prints its Copy as 2x that (it counts read + write bytes);
stream_copy_gb_per_s keeps that convention beside it.
"""
from __future__ import annotations

import time

import torch

from harness.measure_cache import cached
from harness.timing import sync

ARRAY_BYTES = {"cpu": 64 * 2 ** 20, "cuda": 2 ** 30}
REPS = 7


def measure_copy(device: str, threads: int | None = None) -> float:
    """Bytes copied per second (1e9 = GB/s) of the best of REPS dst.copy_(src)."""
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        n = ARRAY_BYTES[device] // 4
        src = torch.ones(n, device=device)
        dst = torch.empty_like(src)
        dst.copy_(src)  # warm-up: page faults, thread pool start
        best = float("inf")
        for _ in range(REPS):
            sync(torch.device(device))  # device sync point
            t0 = time.perf_counter()
            dst.copy_(src)
            sync(torch.device(device))  # device sync point
            best = min(best, time.perf_counter() - t0)
        return n * 4 / best
    finally:
        torch.set_num_threads(old)


def ceilings(device: str) -> dict[str, float]:
    """Copy bandwidth (GB/s) with one thread and all of this process's threads, cached."""
    from harness.peak import device_name
    threads = torch.get_num_threads()
    key = f"{device_name(device)}|copy"
    one = cached("membw.json", f"{key}|1", lambda: measure_copy(device, 1)) if device == "cpu" else None
    every = cached("membw.json", f"{key}|{threads}", lambda: measure_copy(device, threads))
    out = {"copy_gb_per_s_all_threads": every / 1e9, "stream_copy_gb_per_s_all_threads": 2 * every / 1e9,
           "membw_threads": threads}
    if one is not None:
        out.update(copy_gb_per_s_one_thread=one / 1e9, stream_copy_gb_per_s_one_thread=2 * one / 1e9)
    return out
