"""The ordered builder: a single-device model becomes the training step through named steps,
always in this order (torchtitan's parallelize_llama: apply_tp, then compile, then
apply_fsdp / apply_ddp, each a function):

  device          model.to(device)
  layout          channels_last: model + every input batch in NHWC / NDHWC
  amp             autocast(bf16|fp16) around forward + loss; fp16 adds a GradScaler (CUDA only)
  pipeline_split  parallel.pp > 1: this rank's pipeline stages of the model (harness/parallel/pipeline.py)
  tensor_parallel parallel.tp > 1: the workload's plan (Megatron column -> row splits, sequence
                  parallel regions) over the mesh's tp dimension (harness/parallel/strategies.py)
  context_parallel parallel.cp > 1: each rank's part of every sequence, K and V all-gathered in
                  attention (harness/parallel/context.py)
  expert_parallel parallel.ep > 1: each MoE layer's experts sharded over ep ranks, tokens routed
                  to them by all-to-all (harness/parallel/expert.py)
  recompute       parallel.recompute: each block the workload names under torch.utils.checkpoint,
                  whole (full) or by op policy (selective) (harness/parallel/recompute.py)
  data_parallel   with > 1 rank, parallel.data: DDP, or FSDP2 fully_shard (harness/parallel/strategies.py)
  accumulation    parallel.microbatch_split without a pipeline: each rank's share as its count of
                  microbatches, DDP's all-reduce in the last one's backward (harness/parallel/accumulate.py)
  compile         torch.compile(model, mode=cfg.compile_mode) (with a pipeline: each stage's blocks)
  pipeline_schedule  the stages as PipelineStages under the chosen schedule (harness/parallel/pipeline.py)
  optimizer       the workload's optimizer over the built parameters (FSDP's shards);
                  parallel.data=zero1 shards its state (harness/parallel/strategies.py)
  graph_capture   capture of the whole step (fwd, loss, bwd, optimizer) with static input
                  buffers, replayed per step (CUDA only; harness/run/graph_capture.py)

BUILD_STEPS holds that order; `build` runs it (torchtitan's: tensor parallel, then the data
parallel wrapper and compile).

`check` holds every incompatible combination and is called before anything is built or run.
The only module that reads toggles.channels_last, amp, compile and cuda_graphs (cfg.parallel
is read in harness/parallel/strategies.py, harness/parallel/pipeline.py and harness/parallel/expert.py, each its
own keys).
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable

import torch

import staging
from harness.run import data
from harness.parallel import context as context_parallel
from harness.parallel import expert as expert_parallel
from harness.parallel import strategies as parallel
from harness.parallel import pipeline
from harness.parallel import recompute
from harness.parallel.accumulate import Accumulation, apply_accumulation
from harness.config.run_config import RunConfig
from harness.run.graph_capture import GraphedStep


def check(cfg: RunConfig, workload) -> str | None:
    """Why this configuration can't run on this machine, or None: every incompatible
    combination in one place, checked before any work (the run is then `unsupported`)."""
    t = cfg.toggles
    # combinations that can't work anywhere first, then what this workload and machine lack
    if t.cuda_graphs and t.amp == "fp16":
        return "cuda_graphs with amp=fp16: GradScaler's unscale/inf checks run on the host; use bf16"
    for name in t.enabled():
        if name in workload.unsupported_toggles:
            return f"{name}: {workload.unsupported_toggles[name]}"
    if cfg.device == "cuda" and not torch.cuda.is_available():
        return "device=cuda but torch sees no CUDA device on this machine"
    if t.cuda_graphs and cfg.device != "cuda":
        return "cuda_graphs needs a CUDA device (torch.cuda.CUDAGraph); this run is on CPU"
    if t.amp == "fp16" and cfg.device != "cuda":
        return "amp=fp16 needs CUDA (GradScaler for fp16 gradients); use amp=bf16 on CPU"
    for owner in (staging, data):  # staging/ owns mpi_staging, harness.run.data owns dali
        reason = owner.unsupported_reason(cfg)
        if reason:
            return reason
    if t.cuda_graphs and cfg.ranks > 1:
        return "cuda_graphs with more than one rank: capturing DDP's gradient all-reduce is not built yet"
    if t.channels_last and workload.channels_last_dims is None:
        return f"channels_last does not apply to {workload.name} (no convolution inputs)"
    return None


class TrainStep:
    """`step(x, y) -> loss` runs one optimizer step. `prepare(x, y)` moves and lays out a
    loader batch for it; `eval_model` is the un-wrapped, un-compiled model for evaluation.
    Made by `build`; each build step sets the attributes it owns."""

    def __init__(self, cfg: RunConfig, workload, model: torch.nn.Module, make_optimizer: Callable, world: int,
                 data_root: Path | None = None):
        self.cfg, self.workload, self.world = cfg, workload, world
        self.data_root = data_root     # the dataset the batches come from (preprocess's statistics)
        self.device = torch.device(cfg.device)
        self.make_optimizer = make_optimizer  # model -> (optimizer, per-step scheduler)
        self.optimizer = self.scheduler = None  # optimizer step
        self.lockstep_eval = False     # data_parallel (fsdp): every rank runs every eval batch
        self.pipeline = None           # pipeline_split: this rank's stages and their schedule
        self.context = None            # context_parallel: this rank's part of the sequences
        self.accumulation: Accumulation | None = None  # accumulation: this rank's microbatches
        self.ddp_ignore: list[str] = []  # expert_parallel: parameters DDP must leave alone
        self.loss_fn = workload.loss
        self.eval_model = model        # evaluation runs this one: no DDP, no compile, no graph
        self.model = model             # what the step calls: wrapped by the steps below
        self.mem_format = torch.contiguous_format   # layout
        self.autocast: Callable = contextlib.nullcontext  # amp
        self.dtype = "fp32"            # amp: what the matmuls run in (the MFU peak is measured at it)
        self.scaler: torch.amp.GradScaler | None = None  # amp=fp16
        self.capture = False           # graph_capture: captured on the first call
        self._graph: GraphedStep | None = None

    def prepare(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.workload.to_model_input(x)
        nb = self.device.type == "cuda"
        x = self.workload.preprocess(x.to(self.device, non_blocking=nb), self.data_root)
        if x.dim() >= 4:  # no-op when the loader's layout already is the wanted one
            x = x.contiguous(memory_format=self.mem_format)
        return x, y.to(self.device, non_blocking=nb)

    @property
    def holds_loss(self) -> bool:
        """Does this rank compute the loss (with a pipeline, only the last stage's ranks do)?"""
        return self.pipeline is None or self.pipeline.holds_loss

    def _forward_backward(self, x, y):
        if self.pipeline is not None:  # the schedule runs every microbatch's forward and backward
            return self.pipeline.forward_backward(x, y, self.autocast)
        if self.context is not None:  # this rank's tokens; attention sees the group's keys
            x, y = self.context.shard(x, y)
            # backward inside too: recomputation re-runs attention there (parallel.recompute)
            with self.context.active():
                return self._loss_and_backward(x, y)
        if self.accumulation is not None:  # this rank's microbatches, one all-reduce after the last
            return self.accumulation.forward_backward(self, x, y)
        return self._loss_and_backward(x, y)

    def _loss_and_backward(self, x, y):
        with self.autocast():
            loss = self.loss_fn(self.model(x), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        return loss

    def _eager_step(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._forward_backward(x, y)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        return loss.detach()

    def __call__(self, x, y) -> torch.Tensor:
        if not self.eval_model.training:  # evaluation left it in eval mode; avoid a per-step module walk
            self.model.train()
        if self.capture:
            if self._graph is None:
                self._graph = GraphedStep(self, x, y)
            loss = self._graph.replay(x, y)
        else:
            loss = self._eager_step(x, y)
        self.scheduler.step()
        return loss


# -- the build steps, in order ------------------------------------------------------------------
def apply_device(ts: TrainStep) -> None:
    ts.model.to(ts.device)


def apply_layout(ts: TrainStep) -> None:
    """channels_last: NHWC for 4-D inputs, NDHWC (channels_last_3d) for 5-D ones."""
    if not ts.cfg.toggles.channels_last:
        return
    ts.mem_format = torch.channels_last_3d if ts.workload.channels_last_dims == 5 else torch.channels_last
    ts.model.to(memory_format=ts.mem_format)


def apply_amp(ts: TrainStep) -> None:
    amp = ts.cfg.toggles.amp
    if amp == "off":
        return
    ts.dtype = amp
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    # The cast-weight cache must be off under graph capture (torch.cuda.graph docs): cached
    # casts made inside the capture would be freed when autocast exits.
    cache = not ts.cfg.toggles.cuda_graphs
    ts.autocast = lambda: torch.autocast(device_type=ts.device.type, dtype=dtype, cache_enabled=cache)
    if amp == "fp16":
        ts.scaler = torch.amp.GradScaler("cuda")


def apply_compile(ts: TrainStep) -> None:
    """Lazy: the first warm-up step pays the compile time."""
    if not ts.cfg.toggles.compile:
        return
    import torch._inductor.config as inductor_config
    # a profiler range around each generated C++ kernel (cpp_fused_*), so the breakdown and the
    # roofline see fused kernels by name instead of one opaque compiled-graph call; the range
    # costs one flag check per kernel when no profiler is running
    inductor_config.cpp.enable_kernel_profile = True
    if ts.pipeline is not None:  # PipelineStage drives the stage modules: compile their blocks in place
        for part in ts.eval_model:
            for block in ts.workload.fsdp_units(part):
                block.compile(mode=ts.cfg.compile_mode)
        return
    ts.model = torch.compile(ts.model, mode=ts.cfg.compile_mode)


def apply_graph_capture(ts: TrainStep) -> None:
    """Captured on the first call, after eager warm-up on a side stream (harness/run/graph_capture.py)."""
    ts.capture = ts.cfg.toggles.cuda_graphs


BUILD_STEPS: tuple[tuple[str, Callable[[TrainStep], None]], ...] = (
    ("device", apply_device),
    ("layout", apply_layout),
    ("amp", apply_amp),
    ("pipeline_split", pipeline.apply_pipeline_split),
    ("tensor_parallel", parallel.apply_tensor_parallel),
    ("context_parallel", context_parallel.apply_context_parallel),
    ("expert_parallel", expert_parallel.apply_expert_parallel),
    ("recompute", recompute.apply_recompute),
    ("data_parallel", parallel.apply_data_parallel),
    ("accumulation", apply_accumulation),
    ("compile", apply_compile),
    ("pipeline_schedule", pipeline.apply_pipeline_schedule),
    ("optimizer", parallel.apply_optimizer),
    ("graph_capture", apply_graph_capture),
)


def build(cfg: RunConfig, workload, model: torch.nn.Module, make_optimizer: Callable, world: int = 1,
          data_root: Path | None = None) -> TrainStep:
    """The training step for `model`, every build step applied in BUILD_STEPS order.
    make_optimizer(model) -> (optimizer, scheduler) runs at the optimizer step. data_root: the
    dataset its batches come from (None: example batches; Workload.preprocess)."""
    ts = TrainStep(cfg, workload, model, make_optimizer, world, data_root)
    for _, step in BUILD_STEPS:
        step(ts)
    return ts
