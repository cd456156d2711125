"""Step timing. Every timing boundary is a device sync point: CUDA kernels are asynchronous,
so a host clock read without synchronize() would time the launch, not the work."""
from __future__ import annotations

import time

import torch

now = time.perf_counter  # seconds, monotonic, highest resolution available


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # device sync point
