"""Applies the compute toggles to a single-device model, in one documented order:

  1. device placement                     model.to(device)
  2. channels_last                        model + every input batch in NHWC / NDHWC
  3. amp                                  autocast(bf16|fp16) around forward + loss;
                                          fp16 adds a GradScaler (CUDA only)
  4. data parallel (not a toggle)         DistributedDataParallel when launched with > 1 rank
  5. compile                              torch.compile(model, mode=cfg.compile_mode)
  6. cuda_graphs                          capture of the whole step (fwd, loss, bwd, optimizer)
                                          with static input buffers, replayed per step (CUDA only)

The only module that reads toggles.channels_last, amp, compile and cuda_graphs. A toggle that
can't work here raises harness.errors.Unsupported with the reason: never a silent eager run.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch

import staging
from harness import data
from harness.config import RunConfig
from harness.errors import Unsupported


def unsupported_reason(cfg: RunConfig, workload) -> str | None:
    """Why this configuration can't run on this machine, or None. Checked before any work."""
    t = cfg.toggles
    cuda = torch.cuda.is_available()
    for name in t.enabled():
        if name in workload.unsupported_toggles:
            return f"{name}: {workload.unsupported_toggles[name]}"
    if cfg.device == "cuda" and not cuda:
        return "device=cuda but torch sees no CUDA device on this machine"
    if t.cuda_graphs and cfg.device != "cuda":
        return "cuda_graphs needs a CUDA device (torch.cuda.CUDAGraph); this run is on CPU"
    if t.amp == "fp16" and cfg.device != "cuda":
        return "amp=fp16 needs CUDA (GradScaler for fp16 gradients); use amp=bf16 on CPU"
    for owner in (staging, data):  # staging/ owns mpi_staging, harness.data owns dali
        reason = owner.unsupported_reason(cfg)
        if reason:
            return reason
    if t.cuda_graphs and cfg.ranks > 1:
        return "cuda_graphs with more than one rank: capturing DDP's gradient all-reduce is not built yet"
    if t.channels_last and workload.channels_last_dims is None:
        return f"channels_last does not apply to {workload.name} (no convolution inputs)"
    return None


def memory_format(cfg: RunConfig, workload) -> torch.memory_format:
    if not cfg.toggles.channels_last:
        return torch.contiguous_format
    return torch.channels_last_3d if workload.channels_last_dims == 5 else torch.channels_last


class TrainStep:
    """`step(x, y) -> loss` runs one optimizer step. `prepare(x, y)` moves and lays out a
    loader batch for it; `eval_model` is the un-compiled, un-captured model for evaluation."""

    def __init__(self, cfg: RunConfig, workload, model: torch.nn.Module, optimizer, scheduler,
                 world: int = 1):
        self.cfg, self.workload = cfg, workload
        self.device = torch.device(cfg.device)
        self.optimizer, self.scheduler = optimizer, scheduler
        self.loss_fn = workload.loss
        # 1. device
        model.to(self.device)
        # 2. channels_last
        self.mem_format = memory_format(cfg, workload)
        if cfg.toggles.channels_last:
            model.to(memory_format=self.mem_format)
        self.eval_model = model
        # 3. amp
        self.autocast = self._autocast()
        self.scaler = torch.amp.GradScaler("cuda") if cfg.toggles.amp == "fp16" else None
        # 4. data parallel: gradients averaged across ranks in backward (bucketed all-reduce)
        train_model = model
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel
            train_model = DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if self.device.type == "cuda" else None)
        # 5. compile (lazy: the first warm-up step pays the compile time)
        self.model = torch.compile(train_model, mode=cfg.compile_mode) if cfg.toggles.compile else train_model
        # 6. cuda_graphs (captured on the first call, after eager warm-up on a side stream)
        self._graph: _GraphedStep | None = None
        self._step: Callable = self._eager_step

    def _autocast(self):
        amp = self.cfg.toggles.amp
        if amp == "off":
            return contextlib.nullcontext
        dtype = torch.bfloat16 if amp == "bf16" else torch.float16
        # The cast-weight cache must be off under graph capture (torch.cuda.graph docs): cached
        # casts made inside the capture would be freed when autocast exits.
        cache = not self.cfg.toggles.cuda_graphs
        return lambda: torch.autocast(device_type=self.device.type, dtype=dtype, cache_enabled=cache)

    def prepare(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.workload.to_model_input(x)
        nb = self.device.type == "cuda"
        x = self.workload.preprocess(x.to(self.device, non_blocking=nb))
        if x.dim() >= 4:  # no-op when the loader's layout already is the wanted one
            x = x.contiguous(memory_format=self.mem_format)
        return x, y.to(self.device, non_blocking=nb)

    def _forward_backward(self, x, y):
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
        if self.cfg.toggles.cuda_graphs:
            if self._graph is None:
                self._graph = _GraphedStep(self, x, y)
            loss = self._graph.replay(x, y)
        else:
            loss = self._step(x, y)
        self.scheduler.step()
        return loss


class _GraphedStep:
    """Whole-step CUDA graph as in NVIDIA's MLPerf DeepCAM/CosmoFlow trainers and the PyTorch
    'whole network capture' recipe: static input/label buffers, a few eager iterations on a side
    stream, then capture of forward + loss + backward + optimizer.step. Grads are None when
    capture starts, so the captured backward *assigns* them from the graph's pool and every
    replay overwrites them: no zero_grad kernels per replay."""

    WARMUP_ITERS = 3  # eager iterations on the side stream before capture (NVIDIA: 20-50)

    def __init__(self, ts: TrainStep, x: torch.Tensor, y: torch.Tensor):
        if ts.scaler is not None:
            raise Unsupported("cuda_graphs with amp=fp16: GradScaler's unscale/inf checks run on the host; use bf16")
        self.ts = ts
        self.static_x, self.static_y = x.clone(), y.clone()
        graph_safe_optimizer(ts.optimizer, x.device)
        before = TrainingState(ts.eval_model, ts.optimizer)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP_ITERS):
                ts._eager_step(self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        ts.optimizer.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            self.static_loss = ts._forward_backward(self.static_x, self.static_y)
            ts.optimizer.step()
        # The warm-up iterations trained on the first batch; capture itself computes nothing.
        # Put weights, buffers and optimizer state back so that the first replay is step 0.
        before.restore()

    def replay(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.static_x.copy_(x, non_blocking=True)
        self.static_y.copy_(y, non_blocking=True)
        self.graph.replay()
        return self.static_loss.detach().clone()


def graph_safe_optimizer(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Switch an optimizer to its capturable form in place: LR read from a device tensor (the
    scheduler fill_()s it, so schedules apply in replay) and no host reads inside step()."""
    for group in optimizer.param_groups:
        group["lr"] = torch.tensor(float(group["lr"]), device=device)
        if "capturable" in group:  # Adam/AdamW: step counters on the device, no host reads
            group["capturable"] = True
        elif "fused" in group:
            # SGD: its foreach path turns a tensor LR into a host scalar (lr.item(), a sync that
            # breaks capture: "operation failed due to a previous error during capture" on an
            # H200, torch 2.11); the fused kernel reads the LR on the device.
            group["fused"], group["foreach"] = True, False


class TrainingState:
    """A copy of a model's parameters and buffers and its optimizer's state, restorable *in
    place* (a captured graph holds those tensors' addresses). Optimizer state that did not exist
    when the copy was taken is zeroed on restore, which is what a first step starts from
    (momentum and Adam moments 0, step counter 0)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        self.model, self.optimizer = model, optimizer
        self.tensors = {id(t): t.detach().clone() for t in self._model_tensors()}
        self.opt_state = {id(p): {k: v.detach().clone() for k, v in st.items() if torch.is_tensor(v)}
                          for p, st in optimizer.state.items()}

    def _model_tensors(self):
        yield from self.model.parameters()
        yield from self.model.buffers()  # BN running statistics and counters

    @torch.no_grad()
    def restore(self) -> None:
        for t in self._model_tensors():
            t.copy_(self.tensors[id(t)])
        for p, st in self.optimizer.state.items():
            saved = self.opt_state.get(id(p), {})
            for k, v in st.items():
                if not torch.is_tensor(v):
                    continue
                if k in saved:
                    v.copy_(saved[k])
                else:
                    v.zero_()
