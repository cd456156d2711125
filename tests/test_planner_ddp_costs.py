"""What a data-parallel step costs beyond compute in the planner's model: DDP's copies of the
gradients into its buckets and back (profiled per byte), and whether the all-reduce hides behind
the backward (links.overlap: not on gloo, whose threads share the ranks' CPUs), against the
closed form, and the inventory's overlap field."""
from __future__ import annotations

import pytest

from results.planner import inventory
from results.planner import search as planner
from results.planner.inventory import PlanError
from results.planner.links import LinkModel
from tests.test_planner import _linear

LINKS = dict(measured=False, busbw_gb_per_s=1.0, latency_us=100.0)  # 1 GB/s: the all-reduce is visible


def _costs(copy_s_per_byte: float):
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    for c in costs.values():
        c.grad_copy_s_per_byte = copy_s_per_byte
        c.params = {"embedding": 1_000_000, "block": 2_000_000, "head": 10}  # 68 MB of gradients: many buckets
    return costs


@pytest.mark.parametrize("copy_s_per_byte", [0.0, 1e-6])
def test_unoverlapped_step_is_compute_then_reduce_then_copies(copy_s_per_byte, tmp_path):
    links = inventory.Links(**LINKS, overlap=False)
    inv = inventory.Inventory((inventory.DeviceKind("fast", 1, 1e12), inventory.DeviceKind("slow", 1, 1e12)), links)
    costs = _costs(copy_s_per_byte)
    lm = LinkModel(links, tmp_path)
    p = planner.plan(inv, costs, lm, 30, "dp")
    assert p["ddp_overlap"] is False
    grads = costs["fast"].total_params * costs["fast"].grad_bytes_per_param
    slowest = max(costs[k].sample_s(b) * b for k, b in zip(p["devices"], p["batch_split"]))
    # 2 ranks: the ring all-reduce moves S once (nccl-tests' 2(n-1)/n), after the latency
    want = slowest + lm.all_reduce_s(grads, 2) + grads * copy_s_per_byte
    assert lm.all_reduce_s(grads, 2) == pytest.approx(100e-6 + grads / 1e9)
    assert p["predicted"]["step_s"] == pytest.approx(want)


def test_overlap_hides_part_of_the_reduce_and_copies_cost_the_same_either_way(tmp_path):
    inv_of = lambda links: inventory.Inventory(  # noqa: E731
        (inventory.DeviceKind("fast", 1, 1e12), inventory.DeviceKind("slow", 1, 1e12)), links)
    steps = {}
    for ov in (False, True):
        links = inventory.Links(**LINKS, overlap=ov)
        for copy in (0.0, 1e-6):
            p = planner.plan(inv_of(links), _costs(copy), LinkModel(links, tmp_path), 30, "dp")
            steps[ov, copy] = p["predicted"]["step_s"]
    assert steps[True, 0.0] < steps[False, 0.0]  # some buckets reduce during the backward
    grads = _costs(0.0)["fast"].total_params * 4
    for ov in (False, True):
        assert steps[ov, 1e-6] - steps[ov, 0.0] == pytest.approx(grads * 1e-6)


def test_overlap_defaults_by_the_links_and_the_inventory_can_say():
    assert inventory.Links(measured=True, backend="gloo").overlaps is False  # gloo: the ranks' own CPUs
    assert inventory.Links(measured=True, backend="nccl").overlaps is True
    assert inventory.Links(**LINKS).overlaps is True  # an estimate stands for NCCL-like links
    dev = [{"kind": "a", "count": 2, "memory_gb": 80, "peak_tflops": 100, "efficiency": 0.5}]
    inv = inventory.parse({"devices": dev, "links": {"busbw_gb_per_s": 25, "latency_us": 10, "overlap": False}}, "x")
    assert inv.links.overlaps is False
    with pytest.raises(PlanError, match="links.overlap must be true or false"):
        inventory.parse({"devices": dev, "links": {"busbw_gb_per_s": 25, "latency_us": 10, "overlap": "yes"}}, "x")


def test_one_rank_copies_nothing(tmp_path):
    links = inventory.Links(**LINKS, overlap=False)
    inv = inventory.Inventory((inventory.DeviceKind("slow", 1, 1e12),), links)
    costs = _costs(1e-6)
    p = planner.plan(inv, costs, LinkModel(links, tmp_path), 8, "dp")
    assert p["predicted"]["step_s"] == pytest.approx(costs["slow"].sample_s(8) * 8)
