"""The step-time breakdown from torch.profiler (harness/measure/breakdown.py): a matmul-only step
is compute-bound, and aten ops fall in the classes the roofline and the portal use."""
from __future__ import annotations

import pytest
import torch

from harness.measure import breakdown


def test_breakdown_of_a_matmul_only_step_is_almost_all_compute_bound():
    torch.manual_seed(0)
    w = torch.randn(1024, 1024)
    batches = iter([torch.randn(1024, 1024) for _ in range(4)])  # loaded up front: no data wait to speak of
    got, _ = breakdown.profile_steps(lambda x: x @ w @ w, batches, 4, "cpu")
    shares = got["shares"]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["compute_bound"] > 0.85, shares
    assert got["top_ops"][0]["op"] == "aten::mm" and got["top_ops"][0]["class"] == "compute_bound"


def test_op_classes():
    assert breakdown.classify("aten::mkldnn_convolution") == "compute_bound"
    assert breakdown.classify("aten::addmm") == "compute_bound"
    assert breakdown.classify("aten::native_batch_norm") == "memory_bound"
    assert breakdown.classify("aten::copy_") == "memory_bound"
    assert breakdown.classify("aten::_softmax") == "memory_bound"
    assert breakdown.classify("aten::empty") == "other"


def test_slow_steps_shorten_the_profiled_phase_on_one_rank_only():
    """Five profiled steps of emulated bf16 (1.7 s each) outlasted the run's sampling budget: the
    phase is held to PROFILE_S of steps (at least 2); with several ranks every rank must run the
    same steps and only rank 0 holds the times, so the configured count stands."""
    from types import SimpleNamespace as NS
    from harness.config.run_config import RunConfig
    from harness.run import loop
    cfg = RunConfig(workload="cosmoflow", profile_steps=5)
    rec = lambda step_s: NS(steps=[{"phase": "warmup", "step_s": 9.0}]  # noqa: E731
                            + [{"phase": "steady", "step_s": step_s}] * 4)
    one, two = NS(world=1), NS(world=2)
    assert loop._profiled_steps(cfg, rec(0.1), one) == 5
    assert loop._profiled_steps(cfg, rec(1.0), one) == 3  # ceil(3 s / 1 s)
    assert loop._profiled_steps(cfg, rec(1.7), one) == 2
    assert loop._profiled_steps(cfg, rec(30.0), one) == 2
    assert loop._profiled_steps(cfg, rec(1.7), two) == 5
    assert loop._profiled_steps(cfg, NS(steps=[]), one) == 5
