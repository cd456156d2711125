"""Training FLOPs per DeepCAM sample (multiply-add = 2 FLOPs; convolutions only).

Per layer, forward: Conv2d 2 * (Cin / groups) * Cout * kh * kw * Hout * Wout;
ConvTranspose2d 2 * Cin * (Cout / groups) * kh * kw * Hin * Win. Backward = 2x forward (input and
weight gradients) except the first conv, whose input needs no gradient: training = 3F - F_conv1.
BN, ReLU, pooling and interpolation are not counted, as torch.utils.flop_counter does not.
The layer shapes come from one forward pass on the meta device (no memory, no compute).
"""
from __future__ import annotations

import torch
from torch import nn

from workloads.deepcam.spec import DeepCAMSize


def forward_flops(size: DeepCAMSize) -> tuple[float, float]:
    from workloads.deepcam.model import DeepLabv3Plus
    flops: list[float] = []

    def hook(m: nn.Module, inp, out) -> None:
        kh, kw = m.kernel_size
        if isinstance(m, nn.ConvTranspose2d):
            h, w = inp[0].shape[2:]
            flops.append(2.0 * m.in_channels * (m.out_channels // m.groups) * kh * kw * h * w)
        else:
            h, w = out.shape[2:]
            flops.append(2.0 * (m.in_channels // m.groups) * m.out_channels * kh * kw * h * w)

    with torch.device("meta"):
        model = DeepLabv3Plus(size)
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                m.register_forward_hook(hook)
        model(torch.empty(1, size.in_channels, size.height, size.width))
    return sum(flops), flops[0]   # the first hook to fire is the encoder's first conv


def train_flops_per_sample(size: DeepCAMSize) -> float:
    fwd, first = forward_flops(size)
    return 3.0 * fwd - first
