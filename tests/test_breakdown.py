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
