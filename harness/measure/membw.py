"""Memory copy bandwidth: the ceiling of collectives inside one node.

On one node gloo and MPI move bytes through shared memory: every byte a rank receives is at
least one copy (read from the sender's buffer, written to the receiver's), so no collective's
bus bandwidth can beat a plain memory copy on the same cores. Measured STREAM-style on large
torch tensors (64 MiB per array on CPU, far beyond the caches; 1 GiB on a GPU), best of REPS,
with one thread, a rank's threads and all cores, and cached per device.

The roofline's bandwidth roof (harness/measure/roofline.py) uses STREAM's own accounting instead: bytes
read + written per pass, copy = 2 x the array (a = b), triad = 3 x (a = b + s*c, one fused
kernel: torch.add(b, c, alpha=s, out=a)); stream() measures both with that count.

Units: copy_gb_per_s = bytes copied / s (each byte read once and written once): the figure a
busbw is compared with. STREAM prints its Copy as 2x that (it counts read + write bytes);
stream_copy_gb_per_s keeps that convention beside it. Measured here (2-core Xeon VM): one
thread ~6 GB/s, both cores ~9 GB/s.
"""
from __future__ import annotations

import time

import torch

from harness.measure.cache import cached
from harness.measure.timing import sync

ARRAY_BYTES = {"cpu": 64 * 2 ** 20, "cuda": 2 ** 30}
# NVLink bandwidth per GPU and direction (GB/s), from NVIDIA's datasheets: NVLink 4 on H100/H200
# SXM is 900 GB/s bidirectional. nccl-tests all-reduce busbw on 8 of them: ~370 GB/s (ring),
# ~480 GB/s with NVLink SHARP (../shared/reference/parallelism.md, section 2).
NVLINK_GB_PER_S = {"H200": 450.0, "H100": 450.0, "A100": 300.0}
REPS = 7
# Arrays each STREAM kernel touches per element: copy reads b, writes a; triad reads b and c, writes a.
STREAM_ARRAYS = {"copy": 2, "triad": 3}
# Device-memory bandwidth (GB/s) from NVIDIA's datasheets, SXM parts: H200 141 GB HBM3e 4.8 TB/s,
# H100 80 GB HBM3 3.35 TB/s, A100 80 GB HBM2e 2.039 TB/s.
VENDOR_HBM_GB_PER_S = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}


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


def stream(kernel: str, device: str, threads: int | None = None, nbytes: int | None = None) -> dict:
    """STREAM copy or triad on torch tensors of `nbytes` each (default ARRAY_BYTES): best time of
    REPS passes and the bytes one pass moves, STREAM's way (STREAM_ARRAYS x the array)."""
    if kernel not in STREAM_ARRAYS:
        raise ValueError(f"unknown STREAM kernel {kernel!r}; valid: {', '.join(STREAM_ARRAYS)}")
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        n = (nbytes or ARRAY_BYTES[device]) // 4
        a, b, c = (torch.full((n,), v, device=device) for v in (0.0, 1.0, 2.0))
        run = (lambda: a.copy_(b)) if kernel == "copy" else (lambda: torch.add(b, c, alpha=3.0, out=a))
        run()  # warm-up: page faults, thread pool start
        best = float("inf")
        for _ in range(REPS):
            sync(torch.device(device))  # device sync point
            t0 = time.perf_counter()
            run()
            sync(torch.device(device))  # device sync point
            best = min(best, time.perf_counter() - t0)
        moved = STREAM_ARRAYS[kernel] * a.numel() * a.element_size()
        return {"kernel": kernel, "bytes": moved, "best_s": best, "gb_per_s": moved / best / 1e9,
                "result_first": float(a[0])}
    finally:
        torch.set_num_threads(old)


def device_key(device: str) -> str:
    """The cache key of a device's memory: the CPU model (not its thread count) or the GPU name."""
    from harness.measure.peak import device_name
    return device_name("cpu").rsplit(" x", 1)[0] if device == "cpu" else torch.cuda.get_device_name()


def ceilings(rank_threads: int) -> dict[str, float]:
    """CPU copy bandwidth (GB/s, cached): one thread, the threads one rank runs with (the rank's
    own ceiling: the figure its busbw is held against), and all of the node's cores."""
    import os

    key = f"{device_key('cpu')}|copy"
    cores = len(os.sched_getaffinity(0))
    get = lambda t: cached("membw.json", f"{key}|{t}", lambda: measure_copy("cpu", t)) / 1e9  # noqa: E731
    out = {"copy_gb_per_s_one_thread": get(1), "copy_gb_per_s_rank": get(rank_threads),
           "copy_gb_per_s_all_cores": get(cores), "copy_threads_rank": rank_threads, "copy_threads_all": cores}
    out["stream_copy_gb_per_s_all_cores"] = 2 * out["copy_gb_per_s_all_cores"]  # STREAM's convention
    return out


def gpu_ceilings() -> dict[str, float]:
    """The GPU's device-memory copy bandwidth (measured, cached) and its NVLink figure per
    direction where the datasheet is known."""
    out = {"copy_gb_per_s_device": cached("membw.json", f"{device_key('cuda')}|copy",
                                          lambda: measure_copy("cuda")) / 1e9}
    for model, gbs in NVLINK_GB_PER_S.items():
        if model in torch.cuda.get_device_name():
            out["nvlink_gb_per_s_vendor"] = gbs
    return out
