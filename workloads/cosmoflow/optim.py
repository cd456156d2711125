"""SGD + momentum 0.9 with linear LR scaling, linear warm-up and step decay
(mlcommons/hpc cosmoflow/configs/cosmo.yaml, utils/optimizers.py)."""
from __future__ import annotations

import torch

from workloads.cosmoflow.spec import CosmoFlowSize


def lr_factor(epoch: float, size: CosmoFlowSize, scale: float) -> float:
    """Multiplier on base_lr at a (fractional) epoch. peak = base * scale (scale = GBS/base_batch);
    warm-up goes linearly base -> peak over warmup_epochs; then peak * decay factor per boundary."""
    if size.warmup_epochs and epoch < size.warmup_epochs:
        return 1.0 + (scale - 1.0) * epoch / size.warmup_epochs
    factor = 1.0
    for boundary, f in zip(size.decay_epochs, size.decay_factors):
        if epoch >= boundary:
            factor = f
    return scale * factor


def build_optimizer(model: torch.nn.Module, size: CosmoFlowSize, global_batch: int, steps_per_epoch: int):
    scale = global_batch / size.base_batch
    opt = torch.optim.SGD(model.parameters(), lr=size.base_lr, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda step: lr_factor(step / max(steps_per_epoch, 1), size, scale))
    return opt, sched
