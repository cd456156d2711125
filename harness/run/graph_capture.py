"""Whole-step CUDA graph capture (the cuda_graphs toggle's mechanism; harness/run/build.py
decides when it applies and reads the toggle).

NVIDIA's MLPerf DeepCAM/CosmoFlow trainers and the PyTorch 'whole network capture' recipe:
static input/label buffers, a few eager iterations on a side stream, then capture of forward +
loss + backward + optimizer.step, replayed per step. CUDA only.
"""
from __future__ import annotations

import torch

class GraphedStep:
    """Whole-step CUDA graph as in NVIDIA's MLPerf DeepCAM/CosmoFlow trainers and the PyTorch
    'whole network capture' recipe: static input/label buffers, a few eager iterations on a side
    stream, then capture of forward + loss + backward + optimizer.step. Grads are None when
    capture starts, so the captured backward *assigns* them from the graph's pool and every
    replay overwrites them: no zero_grad kernels per replay."""

    WARMUP_ITERS = 3  # eager iterations on the side stream before capture (NVIDIA: 20-50)

    def __init__(self, ts, x: torch.Tensor, y: torch.Tensor):
        """`ts` is the TrainStep being captured (harness/run/build.py): its eager step, its
        forward+backward, its model and optimizer. amp=fp16 never gets here: its GradScaler
        reads inf checks on the host, and optimize.check refuses the pair up front."""
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
            # in the foreach form, the one captured on the GPU (not the fused kernel LM asks for)
            group["capturable"], group["fused"] = True, False
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
