"""A pipeline stage runs M microbatches a step and autograd adds each one's gradients into those
already there; the profile's layer cells clear theirs every pass, so the planner prices that add
apart (harness/planning/profile.py _grad_accumulate, per byte) and counts it in every microbatch's
backward after the first (results/planner/pipeline_plan.py _stage). Plain data parallel runs one
microbatch a step and does not pay it (with gradient accumulation it does: test_planner_dp_accumulation.py)."""
from __future__ import annotations

import pytest
import torch

from results.planner import search as planner
from results.planner.links import LinkModel
from tests.test_planner import FREE, _inv, _linear

PER_BYTE = 1e-8  # 40 us a block (4000 B of gradients) an add: small beside its 10-30 ms, so the split stays


def _costs(per_byte: float) -> dict:
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.03)}
    for c in costs.values():
        c.grad_accumulate_s_per_byte = per_byte
    return costs


def test_each_stage_backward_carries_the_mean_add_of_its_own_gradients(tmp_path):
    links = LinkModel(FREE, tmp_path)
    inv = _inv(("fast", 1, 1e12), ("slow", 1, 1e12))
    free, paid = (planner.plan(inv, _costs(x), links, 8, "pp") for x in (0.0, PER_BYTE))
    assert paid["pp_split"] == free["pp_split"] and paid["microbatches"] == free["microbatches"]
    m = paid["microbatches"]
    assert m > 1  # a step of one microbatch would add nothing
    for a, b in zip(free["stages"], paid["stages"]):
        assert b["fwd_s"] == a["fwd_s"]
        # (m - 1) of the m microbatches add the stage's fp32 gradients (4 B a parameter) into the step's
        assert b["bwd_s"] - a["bwd_s"] == pytest.approx(b["params"] * 4 * PER_BYTE * (m - 1) / m)
    assert paid["predicted"]["step_s"] > free["predicted"]["step_s"]


def test_data_parallel_runs_one_microbatch_a_step_and_pays_no_add(tmp_path):
    links = LinkModel(FREE, tmp_path)
    inv = _inv(("fast", 1, 1e12), ("slow", 1, 1e12))
    free, paid = (planner.plan(inv, _costs(x), links, 24, "dp") for x in (0.0, PER_BYTE))
    assert paid["batch_split"] == free["batch_split"]
    assert paid["predicted"]["step_s"] == pytest.approx(free["predicted"]["step_s"])


def test_autograd_accumulates_a_second_backward_in_place_as_the_profile_times_it():
    """The premise of the profile's cell: without clearing, the second backward adds into the same
    gradient buffer (AccumulateGrad's in-place add) rather than making a new one."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    layer(x).sum().backward()
    first, ptr = layer.weight.grad.clone(), layer.weight.grad.data_ptr()
    layer(x).sum().backward()
    assert layer.weight.grad.data_ptr() == ptr
    assert torch.allclose(layer.weight.grad, 2 * first)
