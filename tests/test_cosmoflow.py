"""CosmoFlow-specific facts (the registry-wide contract is tests/test_workloads.py)."""
from __future__ import annotations

from harness import registry
from workloads.cosmoflow.flops import forward_flops
from workloads.cosmoflow.synth import PREDICT_MEAN_MAE

WL = registry.get("cosmoflow")


def test_tiny_target_is_well_below_predicting_the_mean():
    assert WL.sizes["tiny"].quality_target <= 0.5 * PREDICT_MEAN_MAE


def test_full_size_forward_flops_match_the_reference_estimate():
    """mlperf_hpc.md: ~68.9 GFLOP forward per 128^3 sample (convs + linears)."""
    fwd, _ = forward_flops(WL.sizes["full"])
    assert abs(fwd / 1e9 - 68.9) < 0.1
