"""Where a training step's time goes, from torch.profiler: data wait, compute-bound ops (matmul,
convolution, attention), memory-bound ops (normalisation, pointwise, softmax, copies and layout
transforms), optimizer, communication (c10d / gloo / NCCL collectives and their waits: what the
calling thread spends in them; collectives that overlap backward in other threads or streams
cost only their waits here), and other (framework overhead, Python, idle).

It runs as a short profiled phase after the timed steps, never during them (the profiler's own
overhead would pollute the step times). The point, from MLPerf HPC and "Data Movement Is All You
Need" (Ivanov et al. 2021, table 1: matmuls were 99.8% of a BERT layer's FLOPs but 61% of its
runtime): it explains a toggle's gain - compile should shrink memory-bound time, NHWC should
remove layout copies, DALI should shrink data wait.

Each profiler event's *self* time (its duration minus its children's) is assigned to one class,
so nothing is counted twice. On CUDA the self device time of the kernels an op launched is used.
"""
from __future__ import annotations

import re
import time
from typing import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from harness.measure.native_log import profiler_quiet

DATA_RANGE = "harness.data_wait"
CLASSES = ("data_wait", "compute_bound", "memory_bound", "optimizer", "communication", "other")
# not bare "broadcast": aten::broadcast_tensors is a memory op in the losses
_COMM = re.compile(r"c10d|gloo|nccl|record_param_comms|wait_tensor|allreduce|all_reduce|allgather|all_gather|"
                   r"reduce_scatter|alltoall|all_to_all", re.I)
_COMPUTE = re.compile(r"(^|::|_)(mm|addmm|bmm|baddbmm|matmul|linear|conv\w*|convolution\w*|_convolution\w*|"
                      r"mkldnn_convolution\w*|cudnn_convolution\w*|scaled_dot_product\w*|\w*flash_attention\w*|"
                      r"\w*efficient_attention\w*|gemm\w*|\w*sgemm\w*)$|gemm|cutlass|xmma|wgrad|dgrad|fprop",
                      re.I)
# torch.compile's generated kernels (harness/run/build.py turns on their profiler ranges): inductor
# fuses pointwise ops, reductions and normalisations into them, while matmuls and convolutions stay
# library calls (aten::mm, mkldnn/cuDNN convolution) - so a fused kernel is memory-bound work, even
# when its name lists the convolution_backward whose bias-gradient sum it absorbed.
_FUSED = re.compile(r"cpp_fused_|triton_(poi|red|per)_fused", re.I)
_MEMORY = re.compile(r"norm|softmax|copy|contiguous|clone|cat|stack|reorder|transpose|permute|to_dense|"
                     r"relu|gelu|silu|sigmoid|tanh|elu|leaky|dropout|add|sub|mul|div|exp|log|pow|sqrt|rsqrt|"
                     r"where|fill|zero|clamp|max_pool|avg_pool|pool|mean|sum|embedding|index|gather|scatter|"
                     r"cross_entropy|nll_loss|mse_loss|l1_loss|masked|elementwise|vectorized|reduce", re.I)


def classify(name: str) -> str:
    """communication | compute_bound | memory_bound | other, from an aten op or kernel name."""
    if _COMM.search(name):
        return "communication"
    if _FUSED.search(name):
        return "memory_bound"
    if _COMPUTE.search(name):
        return "compute_bound"
    if _MEMORY.search(name):
        return "memory_bound"
    return "other"


def _under(evt, prefix: str) -> bool:
    p = evt.cpu_parent
    while p is not None:
        if p.name.startswith(prefix):
            return True
        p = p.cpu_parent
    return False


def _is_op(name: str) -> bool:
    return name.startswith("aten::") or bool(_FUSED.search(name))


def _ancestry(evt) -> tuple[str, ...]:
    """The event's name and its parents' names, innermost first."""
    names, p = [evt.name], evt.cpu_parent
    while p is not None:
        names.append(p.name)
        p = p.cpu_parent
    return tuple(names)


def shares(prof, wall_s: float, device: str, steps: int = 1, top: int = 8) -> tuple[dict, dict]:
    """Split `wall_s` of profiled steps into CLASSES (fractions summing to 1) plus the top ops and
    the ops run per step; and the self seconds per ancestry (event name and its parents'), which
    harness/measure/op_roofline.py joins with the op counts."""
    use_device = device == "cuda"
    secs = dict.fromkeys(CLASSES, 0.0)
    per_op: dict[str, float] = {}
    chains: dict[tuple[str, ...], float] = {}
    ops = fused = 0
    for evt in prof.events():
        if evt.name == DATA_RANGE:
            secs["data_wait"] += evt.cpu_time_total / 1e6  # wall time of the range, in s
            continue
        chain = _ancestry(evt)
        if DATA_RANGE in chain:
            continue  # loader work is inside data_wait already
        if _is_op(evt.name) and not any(_is_op(n) for n in chain[1:]):
            ops += 1  # a top-level op or generated kernel: one the step dispatched, not a sub-call
            fused += bool(_FUSED.search(evt.name))
        t = (evt.self_device_time_total if use_device else evt.self_cpu_time_total) / 1e6
        if t <= 0 or evt.name.startswith(("ProfilerStep", "Optimizer.step", "Optimizer.zero_grad")) and not use_device:
            continue
        cls = "optimizer" if evt.name.startswith("Optimizer.") or _under(evt, "Optimizer.step") else classify(evt.name)
        secs[cls] += t
        per_op[evt.name] = per_op.get(evt.name, 0.0) + t
        chains[chain] = chains.get(chain, 0.0) + t
    busy = sum(secs.values())
    secs["other"] += max(0.0, wall_s - busy)  # framework overhead, Python, idle
    total = sum(secs.values()) or 1.0
    ranked = sorted(per_op.items(), key=lambda kv: -kv[1])[:top]
    return {"shares": {k: v / total for k, v in secs.items()}, "profiled_s": wall_s, "steps": steps,
            "ops_per_step": ops / steps, "fused_kernels_per_step": fused / steps,
            "top_ops": [{"op": k, "s": v, "class": "optimizer" if k.startswith("Optimizer.") else classify(k)}
                        for k, v in ranked]}, chains


def profile_steps(step: Callable[[object], object], batches: Iterator, steps: int, device: str) -> tuple[dict, dict]:
    """Run `steps` calls of step(batch) under the profiler; fetching a batch is the data wait.
    Returns shares()'s breakdown and its self seconds per ancestry."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    dev = torch.device(device)
    with profiler_quiet(), profile(activities=acts) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            with record_function(DATA_RANGE):
                batch = next(batches)
            step(batch)
        if dev.type == "cuda":
            torch.cuda.synchronize()  # device sync point: all profiled kernels have finished
        wall = time.perf_counter() - t0
    return shares(prof, wall, device, steps)
