"""Device peak FLOP/s for MFU: measured once per device and dtype by a matmul microbenchmark
and cached, plus the vendor's datasheet peak where the device is known.

Measured peak = best of a few timed square matmuls (2 n^3 FLOP each) with a device sync around
each; it is what this software stack can reach, so "MFU vs measured peak" says how far the
workload is from the matmul roofline here. HARNESS_PEAK_TFLOPS overrides the vendor peak for
devices not in the table (or to use a different figure).

Two guards, both measured on an AMD EPYC (Zen 3, no bf16 instructions; 2026-12-03): its bf16
matmul ran at 0.84 GFLOP/s, against ~100 GFLOP/s in fp32.
- A dtype's ceiling is at least fp32's: any dtype can be computed in fp32 after an upcast, and
  autocast's convolutions did (tiny CosmoFlow under bf16 reached 1.2 GFLOP/s: "MFU 141%" of the
  bf16 matmul). peak_source() says which matmul set the figure.
- The matmul's edge is calibrated to time (doubling from 128 until one product takes MIN_S or the
  edge reaches SIDE): six 1024-edge bf16 products took 15 s there; a fast dtype still reaches SIDE.
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
SIDE = {"cpu": 1024, "cuda": 8192}  # largest matmul edge: big enough to be compute-bound, quick on CPU
MIN_S = 0.05  # s: a product this long is timed well by perf_counter; a slower dtype stops growing there
REPS = 5
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    from harness.measure.envinfo import _cpu_model
    return f"{_cpu_model()} x{torch.get_num_threads()} threads"


def _timed(a: torch.Tensor, b: torch.Tensor, device: str) -> float:
    sync(torch.device(device))  # device sync point
    t0 = time.perf_counter()
    a @ b
    sync(torch.device(device))  # device sync point
    return time.perf_counter() - t0


def edge(device: str, dtype: str, timed=_timed) -> int:
    """The matmul edge to measure at: doubling from 128 (CPU) until one product takes MIN_S or the
    edge reaches SIDE. `timed(a, b, device)` is the clock (a test passes a fake one)."""
    n = SIDE[device] if device != "cpu" else 128
    while n < SIDE[device]:
        a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
        a @ a  # warm-up: library init
        if timed(a, a, device) >= MIN_S:
            break
        n *= 2
    return n


def measure(device: str, dtype: str) -> float:
    """FLOP/s of the best of REPS timed n x n matmuls, n from edge()."""
    n = edge(device, dtype)
    a = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    b = torch.randn(n, n, device=device, dtype=DTYPES[dtype])
    a @ b  # warm-up: library init, autotuning
    return 2 * n ** 3 / min(_timed(a, b, device) for _ in range(REPS))


def _own(device: str, dtype: str) -> float:
    return cached("peak_flops.json", f"{device_name(device)}|{dtype}", lambda: measure(device, dtype))


def peak_source(device: str, dtype: str) -> str:
    """Which matmul sets the dtype's measured peak: its own, or fp32's when that is faster."""
    if dtype == "fp32" or _own(device, dtype) >= _own(device, "fp32"):
        return f"{dtype} matmul"
    return f"fp32 matmul; {dtype}'s own reached {_own(device, dtype) / 1e9:.2f} GFLOP/s"


def measured_peak(device: str, dtype: str) -> float:
    """FLOP/s: the best of the dtype's own matmul and fp32's (see the module's docstring)."""
    own = _own(device, dtype)
    return own if dtype == "fp32" else max(own, _own(device, "fp32"))


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
    out = {"peak_dtype": dtype, "peak_flop_per_s_measured": measured_peak(device, dtype),
           "peak_source": peak_source(device, dtype)}
    vendor = vendor_peak(device, dtype)
    if vendor:
        out["peak_flop_per_s_vendor"] = vendor
    return out
