"""AdamW (0.9, 0.95), weight decay on matrices only, linear warm-up then cosine to 10% of the
peak (nanoGPT's recipe), in torch's fused kernel (nanoGPT and torchtitan use it too): one pass over
all parameters instead of a loop of small ops. Measured on LM small (10.9 M parameters, 1 thread,
Xeon, 2026-12-05): 37 ms a step for the per-parameter loop, 36 for foreach, 11 fused; a fixed
cost of every step on every data-parallel rank. Places that need another path switch it off
there: CUDA Graphs' capturable form (run/graph_capture.py), DTensor and plain parameters in one
optimizer (tensor parallel, expert parallel beside FSDP: parallel/strategies.py)."""
from __future__ import annotations

import math

import torch

from workloads.lm.spec import LMSize


def lr_factor(step: int, s: LMSize) -> float:
    if step < s.warmup_steps:
        return (step + 1) / s.warmup_steps
    progress = min(1.0, (step - s.warmup_steps) / max(1, s.decay_steps - s.warmup_steps))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(model: torch.nn.Module, s: LMSize):
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": s.weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=s.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, s))
