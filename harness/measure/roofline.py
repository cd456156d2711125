"""Device ceilings for the roofline: peak FLOP/s per dtype (harness/measure/peak.py's matmul benchmark)
and peak memory bandwidth (harness/measure/membw.py's STREAM copy and triad), measured once per device
and thread count and cached, with the vendor's datasheet figures beside them where known.

The roof at arithmetic intensity I (FLOP per byte moved) is min(peak FLOP/s, I x bandwidth)
(Williams, Waterman & Patterson 2009); the ridge point I* = peak / bandwidth separates
memory-bound (I < I*) from compute-bound. The bandwidth roof is the STREAM triad (read b and c,
write a: 3 arrays per pass) at the threads the rank runs with; triad, not copy, because it
also has a read:write mix of 2:1 like most training kernels.
"""
from __future__ import annotations

import os

import torch

from harness.measure import membw
from harness.measure import peak
from harness.measure.cache import cached

DTYPES = {"cpu": ("fp32", "bf16"), "cuda": ("fp32", "bf16", "fp16")}


def bandwidth(device: str, threads: int) -> dict[str, float]:
    """STREAM copy and triad (bytes/s, STREAM's accounting), cached per device and thread count."""
    name = membw.device_key(device)
    return {k: cached("membw.json", f"{name}|stream_{k}|{threads}",
                      lambda k=k: membw.stream(k, device, threads if device == "cpu" else None)["gb_per_s"]) * 1e9
            for k in membw.STREAM_ARRAYS}


def vendor_bandwidth(device: str) -> float | None:
    """Datasheet device-memory bandwidth, bytes/s (GPUs in membw.VENDOR_HBM_GB_PER_S), else None."""
    if device != "cuda":
        return None
    name = torch.cuda.get_device_name()
    return next((gbs * 1e9 for model, gbs in membw.VENDOR_HBM_GB_PER_S.items() if model in name), None)


def ceilings(device: str, dtype: str, threads: int | None = None) -> dict:
    """The run's roofs: measured peak at `dtype`, triad bandwidth at the rank's threads, ridge."""
    threads = threads or torch.get_num_threads()
    bw = bandwidth(device, threads)
    out = {"device_name": peak.device_name(device), "dtype": dtype, "threads": threads,
           "peak_flop_per_s": peak.measured_peak(device, dtype),
           "bw_bytes_per_s": bw["triad"], "bw_copy_bytes_per_s": bw["copy"]}
    out["ridge_flop_per_byte"] = out["peak_flop_per_s"] / out["bw_bytes_per_s"]
    vb, vp = vendor_bandwidth(device), peak.vendor_peak(device, dtype)
    if vb:
        out["bw_vendor_bytes_per_s"] = vb
    if vp:
        out["peak_vendor_flop_per_s"] = vp
    return out


def roof(intensity: float, ceil: dict) -> float:
    """Attainable FLOP/s at `intensity` FLOP/byte under `ceil`'s two roofs."""
    return min(ceil["peak_flop_per_s"], intensity * ceil["bw_bytes_per_s"])


def bound(intensity: float, ceil: dict) -> str:
    """compute_bound at or past the ridge, memory_bound below it."""
    return "compute_bound" if intensity >= ceil["ridge_flop_per_byte"] else "memory_bound"


def main(device: str) -> int:
    """`python -m harness roofline`: this machine's ceilings (measured now if not cached)."""
    threads = torch.get_num_threads()
    counts = sorted({1, threads, len(os.sched_getaffinity(0))}) if device == "cpu" else [0]
    print(f"device: {peak.device_name(device)}")
    for t in counts:
        bw = bandwidth(device, t)
        who = f"{t} thread{'s' * (t > 1)}" if device == "cpu" else "device memory"
        print(f"  memory bandwidth ({who}): copy {bw['copy'] / 1e9:,.1f} GB/s, triad {bw['triad'] / 1e9:,.1f} GB/s"
              " (STREAM bytes: copy 2x, triad 3x the array)")
    if vendor_bandwidth(device):
        print(f"  datasheet bandwidth: {vendor_bandwidth(device) / 1e9:,.0f} GB/s")
    for dt in DTYPES[device]:
        c = ceilings(device, dt, threads)
        vendor = f"  datasheet {c['peak_vendor_flop_per_s'] / 1e12:,.1f} TFLOP/s" if "peak_vendor_flop_per_s" in c else ""
        print(f"  {dt:<5} peak {c['peak_flop_per_s'] / 1e9:,.1f} GFLOP/s ({peak.peak_source(device, dt)}, "
              f"{threads} threads){vendor}  "
              f"ridge {c['ridge_flop_per_byte']:.1f} FLOP/byte (vs triad)")
    print("  below the ridge an op is memory-bound: its roof is intensity x bandwidth")
    return 0
