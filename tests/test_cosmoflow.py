"""CosmoFlow facts: reference parameter count, FLOPs formula vs torch's counter, learnability."""
from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from harness import registry
from workloads.cosmoflow.synth import PREDICT_MEAN_MAE

WL = registry.get("cosmoflow")


def test_full_size_parameter_count_matches_reference():
    with torch.device("meta"):  # no memory for 8.9M params' worth of data needed
        model = WL.build_model(WL.sizes["full"])
    assert sum(p.numel() for p in model.parameters()) == 8_907_556


@pytest.mark.parametrize("size_name", ["tiny", "small"])
def test_flops_formula_matches_flop_counter(size_name):
    size = WL.sizes[size_name]
    model = WL.build_model(size)
    x = torch.randn(2, size.in_channels, size.side, size.side, size.side)
    y = torch.randn(2, size.n_targets)
    with FlopCounterMode(display=False) as counter:
        WL.loss(model(x), y).backward()
    measured = counter.get_total_flops() / 2
    assert WL.flops_per_sample(size) == pytest.approx(measured, rel=0.05)


def test_loss_falls_when_overfitting_one_batch():
    torch.manual_seed(0)
    size = WL.sizes["tiny"]
    model = WL.build_model(size)
    x = torch.rand(4, size.in_channels, size.side, size.side, size.side) * 2
    y = torch.rand(4, size.n_targets) * 2 - 1
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        loss = WL.loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.1 * losses[0]


def test_tiny_target_is_well_below_predicting_the_mean():
    assert WL.sizes["tiny"].quality_target <= 0.5 * PREDICT_MEAN_MAE
