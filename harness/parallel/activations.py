"""Activation bytes a forward keeps for backward, per block, measured on the real forward.

Each block the workload names (`recompute_units`) runs inside a profiler range; the profiler's
allocation and free events ([memory], profile_memory=True) added up inside a block's range give
the bytes it allocated and did not free by its end: what autograd keeps of it for backward
plus its output (the next block's input, which full recomputation keeps and nothing else).
Run after the timed steps, on one forward with gradients on and no backward.

Beside it, Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", eq. 1-2; ../shared/reference/parallelism.md): a transformer layer keeps
34*s*b*h + 5*a*s^2*b bytes at 16-bit activations with dropout (1-byte masks), 2*s*b*h with
full recomputation. Our fp32 layer without dropout, with CPU's fused (flash) attention,
which keeps its output and a log-sum-exp instead of the s^2 scores, keeps 16 fp32 values per
token and channel (LN1 output, Q K V, attention output (already in the layout c_proj reads:
no copy), LN2 input and output, MLP 4h twice, the block's output) plus LayerNorm's mean and
rstd and the log-sum-exp: 64*s*b*h + 16*s*b + 4*a*s*b bytes, Korthikanti's 34*s*b*h (17 values
at 2 bytes) at 4 bytes a value, less the dropout masks and the s^2 terms the fused kernel
avoids. With full recomputation: the block's output, 4*s*b*h, plus the CPU RNG state
torch.utils.checkpoint keeps per block (5056 bytes) so dropout can recompute its mask.
"""
from __future__ import annotations

import torch

_RANGE = "harness::recompute_unit"


def forward_kept_bytes(model: torch.nn.Module, units: list, loss_fn, x: torch.Tensor, y: torch.Tensor) -> list[int]:
    """Bytes each unit's forward allocated and still holds at its end (CPU: profiler events;
    CUDA: the allocator's counter at the unit's entry and exit)."""
    firsts = [u[0] if isinstance(u, tuple) else u for u in units]
    lasts = [u[-1] if isinstance(u, tuple) else u for u in units]
    cuda = x.device.type == "cuda"
    marks: list[list] = []  # per unit: [enter, exit] (CUDA: allocated bytes; CPU: record_function)
    handles = []

    def enter(i):
        def hook(*_):
            if cuda:
                marks.append([torch.cuda.memory_allocated(), None])
            else:
                rf = torch.profiler.record_function(_RANGE)
                rf.__enter__()
                marks.append([rf, None])
        return hook

    def leave(i):
        def hook(*_):
            if cuda:
                marks[-1][1] = torch.cuda.memory_allocated()
            else:
                marks[-1][0].__exit__(None, None, None)
        return hook

    for i, (f, l) in enumerate(zip(firsts, lasts)):
        # a recomputed tuple runs its chain in the first module and passes through the rest
        # (harness/parallel/recompute.py): the last module's hook still fires after all of it
        handles.append(f.register_forward_pre_hook(enter(i)))
        handles.append(l.register_forward_hook(leave(i)))
    import gc
    gc.collect()  # a cycle collected inside a block's range would count its frees there
    gc.disable()  # (measured: -62 KB for a block, in a test session with earlier tests' garbage)
    try:
        if cuda:
            out = model(x)
            loss_fn(out, y)
            return [b - a for a, b in marks]
        from torch.profiler import ProfilerActivity, profile
        from harness.measure.native_log import profiler_quiet
        with profiler_quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = model(x)
            loss_fn(out, y)
    finally:
        gc.enable()
        for h in handles:
            h.remove()
    events = list(prof.profiler.kineto_results.events())
    ranges = sorted((e.start_ns(), e.end_ns()) for e in events if e.name() == _RANGE)
    mem = [(e.start_ns(), e.nbytes()) for e in events
           if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU]
    return [sum(n for t, n in mem if a <= t <= b) for a, b in ranges]


def layer_theory(s: int, b: int, h: int, a: int, value_bytes: int = 4) -> dict[str, float]:
    """Bytes per transformer layer for sequence s, micro-batch b, hidden h, heads a:
    Korthikanti's formulas (16-bit, dropout) and our layer's count (module docstring)."""
    return {"korthikanti_none": 34 * s * b * h + 5 * a * s * s * b,
            "korthikanti_full": 2 * s * b * h,
            "ours_none": 16 * s * b * h * value_bytes + 16 * s * b + 4 * a * s * b,
            "ours_full": s * b * h * value_bytes + CPU_RNG_STATE_BYTES}


CPU_RNG_STATE_BYTES = 5056  # torch.get_rng_state().numel(): kept per checkpointed block (preserve_rng_state)


def measure(ts, batch) -> dict:
    """Per-unit bytes kept by one forward of this rank's model on `batch` (a loader batch), as
    the training step runs it (context parallel: this rank's part of the sequences). Every rank
    calls it (a sharded or context-parallel forward talks to its peers)."""
    import contextlib
    units = ts.workload.recompute_units(ts.eval_model)
    x, y = ts.prepare(*batch)
    scope = contextlib.nullcontext()
    if ts.context is not None:
        x, y = ts.context.shard(x, y)
        scope = ts.context.active()
    with scope, ts.autocast():
        kept = forward_kept_bytes(ts.eval_model, units, ts.loss_fn, x, y)
    return {"recompute": ts.cfg.parallel.recompute, "per_unit": kept,
            "mean_per_unit": sum(kept) / len(kept) if kept else 0, "units": len(kept)}
