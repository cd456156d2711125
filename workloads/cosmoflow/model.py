"""CosmoFlow network, single-device (toggles are applied by the harness).

5 x [Conv3d k3 'same' -> LeakyReLU(0.3) -> MaxPool3d(2)] with 32-64-128-256-512 channels,
then Dense 128 -> 64 -> 4 with LeakyReLU + dropout, tanh x 1.2
(mlcommons/hpc cosmoflow/models/cosmoflow.py; NVIDIA v2.0 PyTorch port).
"""
from __future__ import annotations

import torch
from torch import nn

from workloads.cosmoflow.spec import CosmoFlowSize

LEAKY_SLOPE = 0.3  # Keras LeakyReLU default alpha, kept explicit as NVIDIA does


class CosmoFlowNet(nn.Module):
    def __init__(self, size: CosmoFlowSize):
        super().__init__()
        layers: list[nn.Module] = []
        c_in = size.in_channels
        for i in range(size.conv_layers):
            c_out = size.base_channels * 2 ** i
            layers += [nn.Conv3d(c_in, c_out, kernel_size=3, padding=1),
                       nn.LeakyReLU(LEAKY_SLOPE), nn.MaxPool3d(2)]
            c_in = c_out
        self.convs = nn.Sequential(*layers)
        flat = (size.side // 2 ** size.conv_layers) ** 3 * c_in
        self.fc1 = nn.Linear(flat, size.fc1)
        self.fc2 = nn.Linear(size.fc1, size.fc2)
        self.out = nn.Linear(size.fc2, size.n_targets)
        self.act = nn.LeakyReLU(LEAKY_SLOPE)
        self.drop = nn.Dropout(size.dropout)
        for m in self.modules():  # Xavier-uniform weights, zero bias (Keras defaults)
            if isinstance(m, (nn.Conv3d, nn.Linear)):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.convs(x)
        # flatten in TF's NDHWC order so FC1 weights match the reference layout
        x = x.permute(0, 2, 3, 4, 1).flatten(1)
        x = self.drop(self.act(self.fc1(x)))
        x = self.drop(self.act(self.fc2(x)))
        return torch.tanh(self.out(x)) * 1.2
