"""Training FLOPs per CosmoFlow sample (multiply-add = 2 FLOPs; convs and linears only).

forward  F = sum_conv 2*Cin*Cout*27*S^3 (+ 'same' padding keeps S) + sum_fc 2*in*out
backward = 2F (grad wrt inputs + grad wrt weights), except the first conv, whose input needs
no gradient: training = 3F - F_conv1. Pooling/activations are not counted (as
torch.utils.flop_counter does). Checked against FlopCounterMode in tests.
"""
from __future__ import annotations

from workloads.cosmoflow.spec import CosmoFlowSize


def forward_flops(size: CosmoFlowSize) -> tuple[float, float]:
    """(total forward FLOPs, forward FLOPs of the first conv) per sample."""
    total, first = 0.0, 0.0
    c_in, side = size.in_channels, size.side
    for i in range(size.conv_layers):
        c_out = size.base_channels * 2 ** i
        f = 2.0 * c_in * c_out * 27 * side ** 3
        first = first or f
        total += f
        c_in, side = c_out, side // 2
    dims = [side ** 3 * c_in, size.fc1, size.fc2, size.n_targets]
    total += sum(2.0 * a * b for a, b in zip(dims, dims[1:]))
    return total, first


def train_flops_per_sample(size: CosmoFlowSize) -> float:
    fwd, first_conv = forward_flops(size)
    return 3.0 * fwd - first_conv
