"""Device peak FLOP/s for MFU: measured once per device and dtype by a matmul microbenchmark
and cached, plus the vendor's datasheet peak where the device is known.

Measured peak = best of a few timed square matmuls (2 n^3 FLOP each) with a device sync around
each; it is what this software stack can reach, so "MFU vs measured peak" says how far the
workload is from the matmul roofline here. HARNESS_PEAK_TFLOPS overrides the vendor peak for
devices not in the table (or to use a different figure).
"""
from __future__ import annotations

import os
import time

import torch

from harness.measure.cache import cached
from harness.measure.timing import sync

# Dense (no sparsity) TFLOP/s per GPU from NVIDIA's datasheets (SXM parts).
VENDOR_TFLOPS = {
    "H200": {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
    "H100": {"bf16": 989.4, "fp16": 989.4, "fp32": 66.9},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
}
SIDE = {"cpu": 1024, "cuda": 8192}  # matmul edge: big enough to be compute-bound, quick on CPU
REPS = 5


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    from harness.measure.envinfo import _cpu_model
    return f"{_cpu_model()} x{torch.get_num_threads()} threads"


def measure(device: str, dtype: str) -> float:
    """FLOP/s of the best of REPS timed n x n matmuls."""
    n = SIDE[device]
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = torch.randn(n, n, device=device, dtype=dt)
    b = torch.randn(n, n, device=device, dtype=dt)
    a @ b  # warm-up: library init, autotuning
    best = float("inf")
    for _ in range(REPS):
        sync(torch.device(device))  # device sync point
        t0 = time.perf_counter()
        a @ b
        sync(torch.device(device))  # device sync point
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def measured_peak(device: str, dtype: str) -> float:
    return cached("peak_flops.json", f"{device_name(device)}|{dtype}", lambda: measure(device, dtype))


def vendor_peak(device: str, dtype: str) -> float | None:
    if os.environ.get("HARNESS_PEAK_TFLOPS"):
        return float(os.environ["HARNESS_PEAK_TFLOPS"]) * 1e12
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    for model, peaks in VENDOR_TFLOPS.items():
        if model in name:
            return peaks[dtype] * 1e12
    return None


def for_run(device: str, dtype: str) -> dict:
    """Peaks for the run's device and compute dtype (TrainStep.dtype), per device (FLOP/s)."""
    out = {"peak_dtype": dtype, "peak_flop_per_s_measured": measured_peak(device, dtype)}
    vendor = vendor_peak(device, dtype)
    if vendor:
        out["peak_flop_per_s_vendor"] = vendor
    return out
