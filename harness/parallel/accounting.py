"""What a parallel strategy costs, measured beside the theory: collectives per step (calls and
nccl-tests' size S, counted on the real calls), their analytic volume for the strategy and
size, and per rank the model state held and the peak memory. Runs after the timed steps
(harness/run/loop.py), never inside them.

Volumes follow ../shared/reference/parallelism.md §1 (ring all-reduce 2(n-1)/n x S per rank,
reduce-scatter and all-gather (n-1)/n x S, broadcast S); S is the whole array, as nccl-tests
counts it.
"""
from __future__ import annotations

from collections import defaultdict

import torch

from harness.config.run_config import RunConfig
from results.record.comm import BUS_FACTOR  # nccl-tests' bus factors, one definition

# c10d op -> (collective, index of the argument whose tensors make nccl-tests' size S)
_C10D = {"allreduce_": ("all_reduce", 0), "allreduce_coalesced_": ("all_reduce", 0),
         "_allgather_base_": ("all_gather", 0), "allgather_": ("all_gather", 0),
         "allgather_into_tensor_coalesced_": ("all_gather", 0), "allgather_coalesced_": ("all_gather", 0),
         "_reduce_scatter_base_": ("reduce_scatter", 1), "reduce_scatter_": ("reduce_scatter", 1),
         "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1), "broadcast_": ("broadcast", 0),
         "alltoall_base_": ("all_to_all", 1), "alltoall_": ("all_to_all", 1), "reduce_": ("reduce", 0),
         "gather_": ("gather", 1), "scatter_": ("scatter", 0), "send": ("send_recv", 0), "recv_": ("send_recv", 0)}
# functional collectives: the output is the whole array for all_gather, the input otherwise
_FUNCOL = {"all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce", "all_gather_into_tensor": "all_gather",
           "all_gather_into_tensor_coalesced": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
           "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all_single": "all_to_all",
           "broadcast": "broadcast"}



_P2P = ("send", "recv_", "recv_any_source_")


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(v) for v in x)
    return 0


def _comm_debug_mode():
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class CommBytes(CommDebugMode):
        """CommDebugMode (torch's counter of c10d and functional collectives, DTensor's
        included) that also adds up each collective's size S, by collective."""

        def __init__(self):
            super().__init__()
            self.calls: dict[str, int] = defaultdict(int)
            self.bytes: dict[str, int] = defaultdict(int)
            # Per-module attribution is not needed here, and CommDebugMode's module tracker
            # fails on FSDP units inside nn.Sequential (IndexError in _fw_set_module_hook, torch
            # 2.13): count everything under one "Global" module instead of entering it.
            self.advanced_module_tracker.name = "Global"
            self.advanced_module_tracker.module_parents_dict = {"Global": set()}

        def __enter__(self):
            self.comm_counts.clear()
            self.comm_module_counts.clear()
            self.comm_module_operation_counts.clear()
            TorchDispatchMode.__enter__(self)
            return self

        def __exit__(self, *args):
            TorchDispatchMode.__exit__(self, *args)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = self.get_total_counts()
            out = super().__torch_dispatch__(func, types, args, kwargs)
            name = func._overloadpacket.__name__
            # CommDebugMode counts collectives only; a pipeline's point-to-point sends and
            # receives (c10d::send, c10d::recv_) are counted here
            if out is NotImplemented or (self.get_total_counts() == before and name not in _P2P):
                return out
            if name in _FUNCOL:
                kind = _FUNCOL[name]
                size = _nbytes(out) if kind == "all_gather" else _nbytes(args[0])
            else:
                kind, arg = _C10D.get(name, (name, 0))
                size = _nbytes(args[arg]) if len(args) > arg else 0
            self.calls[kind] += 1
            self.bytes[kind] += size
            return out

    return CommBytes()


def measure_step_comms(step, batches) -> list[dict]:
    """Per step: {collective: {"calls", "bytes"}} of the collectives `step(batch)` issues,
    measured on the real calls (deterministic per step, so a few steps after the timed ones
    stand for all: the dispatch mode that sees them costs time, never inside the timing)."""
    out = []
    for b in batches:
        mode = _comm_debug_mode()
        with mode:
            step(b)
        out.append({k: {"calls": mode.calls[k], "bytes": mode.bytes[k]} for k in sorted(mode.calls)})
    return out


def _tp_local_shape(p: torch.Tensor) -> list[int]:
    """The shape of a parameter on one tensor-parallel rank: its global shape with the
    dimension the tp mesh dimension shards divided (what FSDP then shards over dp)."""
    shape = list(p.shape)  # a DTensor's shape is the global one
    mesh = getattr(p, "device_mesh", None)
    if mesh is not None and mesh.mesh_dim_names and "tp" in mesh.mesh_dim_names:
        placement = p.placements[mesh.mesh_dim_names.index("tp")]
        if placement.is_shard():
            shape[placement.dim] //= mesh.size(mesh.mesh_dim_names.index("tp"))
    return shape


def _padded_numel(shape: list[int], n: int) -> int:
    """FSDP2 shards dim 0 in n equal chunks, padding it up to a multiple of n."""
    if not shape:
        return n
    rest = 1
    for d in shape[1:]:
        rest *= d
    return -(-shape[0] // n) * n * rest


def analytic_comms(cfg: RunConfig, model: torch.nn.Module, workload, world: int, local_batch: int,
                   act_bytes: int, pipeline=None, experts: dict | None = None) -> dict[str, int]:
    """Collective sizes S per step the strategy needs in theory, on this rank. Tensor parallel:
    the workload's formula for its plan (activations of `act_bytes` per element). Pipeline
    (harness/parallel/pipeline.py): this rank's sends and receives, and the tied weights' all-reduce.
    Expert parallel (`experts`): the all-to-all bytes the step's routing implies and the
    experts' all-reduce over their copies (harness/parallel/expert.py); DDP then averages the
    dense parameters only. Data parallel
    over the world / tp replicas: from the parameter shapes each replica holds (fp32
    gradients: 4 bytes per element). Buffers (BatchNorm statistics) are broadcast from rank 0
    every forward by DDP (broadcast_buffers=True), an extra that the theory of DP leaves out;
    FSDP leaves buffers replicated and unsynchronised."""
    p = cfg.parallel
    out: dict[str, int] = defaultdict(int)
    if p.tp > 1:
        size = workload.sizes[cfg.size]
        import dataclasses
        if p.cp > 1:  # each rank's tensor-parallel regions hold its part of the sequence
            size = dataclasses.replace(size, seq_len=size.seq_len // p.cp)
        if pipeline is not None:  # only this rank's stages' blocks
            size = dataclasses.replace(size, n_layer=sum(pipeline.split[s] for s in pipeline.owned))
        for kind, b in workload.tensor_parallel_volume(size, local_batch, p.tp, p.sp, act_bytes, p.recompute).items():
            out[kind] += b
    if pipeline is not None:
        for kind, b in _pipeline_volume(pipeline, local_batch).items():
            out[kind] += b
    if p.cp > 1:  # K and V gathered per layer, their gradients reduce-scattered (harness/parallel/context.py)
        from harness.parallel import context
        for kind, b in context.volume(workload.sizes[cfg.size], local_batch, p.cp, p.tp, act_bytes,
                                      p.recompute).items():
            out[kind] += b
    if experts:
        out["all_to_all"] += int(experts["all_to_all"])
        if experts["all_reduce"]:
            out["all_reduce"] += experts["all_reduce"]
    dp = world // (p.tp * p.pp * p.jobs)  # parallel.jobs: each job reduces over its own ranks
    if dp > 1:
        for kind, b in _data_parallel_volume(p.data, model, workload, dp, piped=pipeline is not None,
                                             ignore=experts["ignore"] if experts else ()).items():
            out[kind] += b
    return dict(out)


def _pipeline_volume(pipe, local_batch: int) -> dict[str, int]:
    """This rank's point-to-point bytes per step: for each of its stages, every microbatch's
    activation received from the previous stage and sent to the next one forward, and their
    gradients back the other way (equal sizes); the whole local batch crosses each boundary
    in M microbatches. Plus the tied embedding/head gradient, all-reduced over the first and
    last stage's ranks (harness/parallel/pipeline.py)."""
    shape = pipe.workload.pipeline_activation_shape(pipe.size, local_batch)
    act = 4  # fp32 residual stream (workloads/lm/pipeline_split.activation_shape)
    for d in shape:
        act *= d
    neighbours = sum((s > 0) + (s < pipe.n_stages - 1) for s in pipe.owned)
    out = {"send_recv": 2 * neighbours * act}
    if pipe.tied_group is not None:
        tied = sum(_nbytes(_local(p)) for part in pipe.parts for p in pipe.workload.pipeline_tied(part))
        if tied:
            out["all_reduce"] = tied
    return out


def _data_parallel_volume(strategy: str, model: torch.nn.Module, workload, world: int,
                          piped: bool = False, ignore=()) -> dict[str, int]:
    """`piped`: `model` is a pipeline rank's ModuleList of stages, each wrapped on its own (a
    DDP, or an FSDP root whose units stay gathered through the schedule: one all-gather each).
    `ignore`: names of parameters DDP leaves alone (expert parallel's experts)."""
    skip = {id(p) for n, p in model.named_parameters() if n in set(ignore)}
    params = list({id(p): p for p in model.parameters() if id(p) not in skip}.values())  # tied weights once
    full = sum(p.numel() for p in params) * 4
    buffers = sum(_nbytes(b) for b in model.buffers())
    if strategy in ("ddp", "zero1"):
        out = {"all_reduce": full}
        if buffers:
            out["broadcast"] = buffers
        if strategy == "zero1":
            out["broadcast"] = out.get("broadcast", 0) + full  # every parameter from its owner
        return out
    # fsdp: forward gathers every unit; backward re-gathers every unit but the root (FSDP2
    # keeps the root's parameters after forward); gradients reduce-scattered once. zero2 (and
    # a pipeline's stages) keep them gathered from forward to backward: one all-gather each
    units = [u for part in (model if piped else [model]) for u in workload.fsdp_units(part)]
    in_units = {id(p) for u in units for p in u.parameters()}
    unit_bytes = sum(_padded_numel(_tp_local_shape(p), world) * 4 for p in params if id(p) in in_units)
    root_bytes = sum(_padded_numel(_tp_local_shape(p), world) * 4 for p in params if id(p) not in in_units)
    gathers = 1 if piped or strategy == "zero2" else 2
    return {"all_gather": gathers * unit_bytes + root_bytes, "reduce_scatter": unit_bytes + root_bytes}


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def model_state_bytes(model: torch.nn.Module, optimizer) -> dict[str, int]:
    """Bytes this rank holds of parameters, gradients and optimizer state (local shards)."""
    params = list({id(p): p for p in model.parameters()}.values())
    local_opt = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer: this rank's optimizer
    state = sum(_nbytes(_local(v)) for st in local_opt.state.values() for v in st.values()
                if isinstance(v, torch.Tensor))
    return {"params": sum(_nbytes(_local(p)) for p in params),
            "grads": sum(_nbytes(_local(p.grad)) for p in params if p.grad is not None),
            "optimizer": state}


def reset_peak_memory(device: torch.device) -> bool:
    """Start a new high-water mark: the CUDA allocator's, or on CPU the kernel's VmHWM (writing
    5 to /proc/self/clear_refs sets it to the current RSS). False where neither can be reset."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        return True
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_memory_bytes(device: torch.device) -> int | None:
    """The high-water mark since reset_peak_memory: CUDA allocated bytes, or VmHWM (the
    process's peak resident set, libraries included) on CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated())
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return None


def _peak_tensor_bytes(prof, held_at_start: int) -> int:
    """Peak of live tensor bytes on the CPU over a profiled span: the profiler's allocation and
    free events ([memory], profile_memory=True) added up in time order, over the model state
    held when the span starts (parameters, gradients, optimizer state). The CPU counterpart of
    CUDA's max_memory_allocated, without the allocator's cached pages and the libraries that
    make up most of a CPU process's RSS. (export_memory_timeline's data-flow pass asserts on
    FSDP2's in-place all-gather outputs in torch 2.13, so the raw events are used.)"""
    # every allocation (+bytes) and free (-bytes); prof.events() keeps only the unattached ones
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return held_at_start + peak


def account(ts, batches: list, world: int) -> dict:
    """What the strategy cost, measured over a few training steps after the timed ones (they
    issue the same collectives as every steady step): collectives per step beside the analytic
    volume, model-state bytes and peak memory of every rank (one all_gather_object). Peak
    memory: CUDA's allocator peak on a GPU; on CPU the peak of live tensor bytes from the
    profiler's memory timeline, and the process's peak RSS (VmHWM) over a plain step before
    them (the profiler's own memory would inflate it)."""
    import torch.distributed as td
    from harness.parallel import activations
    from harness.parallel import expert as expert_parallel

    def step(b):
        expert_parallel.reset(ts.workload, ts.eval_model)  # the MoE routing of this step only
        ts(*ts.prepare(*b))
    can_reset = reset_peak_memory(ts.device)
    if ts.device.type == "cuda":
        steps, tensor_peak = measure_step_comms(step, batches), None
        rss = peak_memory_bytes(ts.device) if can_reset else None
    else:
        step(batches[0])
        rss = peak_memory_bytes(ts.device) if can_reset else None
        from torch.profiler import ProfilerActivity, profile
        held = sum(model_state_bytes(ts.eval_model, ts.optimizer).values())
        from harness.measure.native_log import profiler_quiet
        with profiler_quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            steps = measure_step_comms(step, batches[1:])
        tensor_peak = _peak_tensor_bytes(prof, held)
    experts = None
    if ts.cfg.parallel.ep > 1:  # what the last measured step's routing sent, and the experts' reduction
        experts = {"all_to_all": sum(layer.stats["a2a_bytes_expected"] for layer in ts.workload.moe_layers(ts.eval_model)),
                   "all_reduce": expert_parallel.expert_all_reduce_bytes(ts), "ignore": ts.ddp_ignore}
    analytic = analytic_comms(ts.cfg, ts.eval_model, ts.workload, world, local_batch=len(batches[0][0]),
                              act_bytes=4 if ts.dtype == "fp32" else 2, pipeline=ts.pipeline, experts=experts)
    state = model_state_bytes(ts.eval_model, ts.optimizer)  # before the forward below: FSDP's root stays gathered after it
    # what one forward keeps per block (recomputation's and context parallel's effect, measured)
    kept = None if ts.pipeline is not None else activations.measure(ts, batches[0])
    mine = {"model_state": state, "activations": kept,
            "peak_memory": rss if ts.device.type == "cuda" else tensor_peak,
            "peak_rss": None if ts.device.type == "cuda" else rss,
            "measured": steps[-1], "analytic": analytic}  # a pipeline's ranks differ: every rank's
    every: list = [mine]
    if world > 1:
        every = [None] * world
        td.all_gather_object(every, mine)
    return {"strategy": ts.cfg.parallel.label(), "world": world, "steps_measured": len(steps),
            "measured_per_step": steps[-1], "per_step": steps, "analytic_per_step": analytic,
            "measured_per_rank": [e["measured"] for e in every], "analytic_per_rank": [e["analytic"] for e in every],
            "model_state_per_rank": [e["model_state"] for e in every],
            "peak_memory_per_rank": [e["peak_memory"] for e in every],
            "peak_rss_per_rank": [e["peak_rss"] for e in every],
            "activations_per_rank": [e["activations"] for e in every],
            "peak_memory_kind": ("cuda max_memory_allocated" if ts.device.type == "cuda"
                                 else "live tensor bytes (profiler memory timeline)")}


def summary_figures(acc: dict) -> dict[str, float]:
    """Flat, unit-suffixed figures of an account() for the run summary and MLflow."""
    n = acc["world"]
    out: dict[str, float] = {}
    measured, analytic = acc["measured_per_step"], acc["analytic_per_step"]
    for kind, m in measured.items():
        out[f"comm_{kind}_calls_per_step"] = m["calls"]
        out[f"comm_{kind}_bytes_per_step"] = m["bytes"]
    for kind, b in analytic.items():
        out[f"comm_{kind}_analytic_bytes_per_step"] = b
    out["comm_bytes_per_step"] = sum(m["bytes"] for m in measured.values())
    out["comm_analytic_bytes_per_step"] = sum(analytic.values())
    # per-rank bytes on the wire, nccl-tests' bus convention (ring algorithms)
    out["comm_bus_bytes_per_rank_per_step"] = sum(m["bytes"] * BUS_FACTOR.get(k, lambda _: 1.0)(n)
                                                 for k, m in measured.items())
    kept = [a["mean_per_unit"] for a in acc.get("activations_per_rank") or [] if a]
    if kept:  # bytes one forward keeps per block (harness/parallel/activations.py), the largest rank's
        out["mem_activation_bytes_per_block"] = max(kept)
    states = [sum(s.values()) for s in acc["model_state_per_rank"]]
    out["mem_model_state_bytes_per_rank"] = max(states)
    for part in ("params", "grads", "optimizer"):
        out[f"mem_{part}_bytes_per_rank"] = max(s[part] for s in acc["model_state_per_rank"])
    for key, name in (("peak_memory_per_rank", "mem_peak_bytes_per_rank"),
                      ("peak_rss_per_rank", "mem_peak_rss_bytes_per_rank")):
        peaks = [p for p in acc.get(key, []) if p is not None]
        if peaks:
            out[name] = max(peaks)
    return out
