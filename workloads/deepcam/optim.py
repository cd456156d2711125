"""AdamW with eps 1e-6 (fixed by the HPC rules), linear warm-up, multistep decay in steps
(mlcommons/hpc deepcam utils/optimizer_helpers.py, schedulers.py)."""
from __future__ import annotations

import torch

from workloads.deepcam.spec import DeepCAMSize


def lr_factor(step: int, s: DeepCAMSize) -> float:
    if step < s.warmup_steps:
        return (step + 1) / s.warmup_steps
    return s.decay_rate ** sum(step >= m for m in s.milestones)


def build_optimizer(model: torch.nn.Module, s: DeepCAMSize):
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=s.weight_decay)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, s))
