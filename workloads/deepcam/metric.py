"""Mean IoU exactly as the reference (mlcommons/hpc deepcam utils/metric.py compute_score):
per sample and class IoU = TP / (TP + FP + FN) over all pixels; a class absent from both the
prediction and the label counts as IoU 1; mean over classes, per sample."""
from __future__ import annotations

import torch


def iou_per_sample(logits: torch.Tensor, target: torch.Tensor, n_classes: int) -> torch.Tensor:
    pred = logits.argmax(dim=1)            # works for any memory format (channels_last too)
    ious = []
    for c in range(n_classes):
        p, t = pred == c, target == c
        tp = (p & t).flatten(1).sum(1).double()
        union = (p | t).flatten(1).sum(1).double()   # TP + FP + FN
        ious.append(torch.where(union > 0, tp / union.clamp(min=1), torch.ones_like(tp)))
    return torch.stack(ious, dim=1).mean(dim=1)
