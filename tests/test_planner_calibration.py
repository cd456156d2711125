"""A kind's calibration (inventory `calibration`, layer_costs.Costs.scaled): its own job measured
over its price, from a run, scales what its ranks compute. Pinned: what it scales and what it
leaves, the plan it moves by hand, and bad values refused in one line."""
from __future__ import annotations

import pytest

from harness.planning.plan import costs_for
from results.planner import inventory
from results.planner import search as planner
from results.planner.inventory import PlanError
from results.planner.links import LinkModel
from tests.test_planner import FREE, _linear


def test_scaled_costs_multiply_what_the_rank_computes_and_leave_the_rest():
    base = _linear("a", 0.01)
    base.optimizer_s_per_param, base.grad_copy_s_per_byte, base.grad_accumulate_s_per_byte = 1e-6, 2e-9, 3e-9
    base._in_step = {"tp2": [(1, 0.004), (8, 0.02)]}
    c = base.scaled(1.25)
    assert base.scaled(1.0) is base
    for kind in ("embedding", "block", "head"):
        for b in (1, 3, 8, 16):  # interpolated and extrapolated alike
            assert c.fwd(kind, b) == pytest.approx(1.25 * base.fwd(kind, b))
            assert c.bwd(kind, b) == pytest.approx(1.25 * base.bwd(kind, b))
    assert c.recompute_s(4) == pytest.approx(1.25 * base.recompute_s(4))
    assert c.optimizer_s_per_param == pytest.approx(1.25e-6)
    assert c.grad_copy_s(1000) == pytest.approx(1.25 * base.grad_copy_s(1000))
    assert c.grad_accumulate_s(1000) == pytest.approx(1.25 * base.grad_accumulate_s(1000))
    assert c.group_in_step_s("tp", 2, 4) == pytest.approx(1.25 * base.group_in_step_s("tp", 2, 4))
    # memory, parameters and the bytes a send moves are the model's, not the rank's speed
    assert c.saved("block", 4) == base.saved("block", 4) and c.total_params == base.total_params
    assert c.boundary_bytes_per_sample == base.boundary_bytes_per_sample and c.cv(4) == base.cv(4)
    assert "calibrated x1.25" in c.source
    assert base.fwd("block", 4) == pytest.approx(4 * 0.01 / 3)  # the original is untouched


def test_a_calibrated_kind_takes_its_share_of_the_batch_by_its_measured_speed(tmp_path):
    """Two kinds of the same estimated peak: alike, each takes half; the second calibrated 2.0 (its
    own job ran twice its price) takes a third, by hand 40 + 20 of 60."""
    def plan(calibration: str) -> dict:
        inv = inventory.parse({"devices": [
            {"kind": "a", "count": 1, "memory_gb": 80, "peak_tflops": 10, "efficiency": 0.5},
            {"kind": "b", "count": 1, "memory_gb": 80, "peak_tflops": 10, "efficiency": 0.5,
             **({"calibration": float(calibration)} if calibration else {})}],
            "links": {"busbw_gb_per_s": 1e9, "latency_us": 1e-9}}, "test")
        costs = costs_for(inv, "lm", "small")
        return planner.plan(inv, costs, LinkModel(FREE, tmp_path), 60, "dp")
    assert plan("")["batch_split"] == [30, 30]
    calibrated = plan("2.0")
    assert calibrated["batch_split"] == [40, 20]
    assert "calibrated x2" in calibrated["sources"]["b"] and "calibrated" not in calibrated["sources"]["a"]


@pytest.mark.parametrize("value, fragment", [
    (0, "calibration must be a number > 0"), (-1.5, "calibration must be a number > 0"),
    ("fast", "calibration must be a number > 0"), (True, "calibration must be a number > 0"),
    (float("inf"), "calibration must be a finite number > 0"),
])
def test_bad_calibration_is_one_line(value, fragment):
    with pytest.raises(PlanError, match=fragment) as e:
        inventory.parse({"devices": [{"kind": "a", "count": 1, "memory_gb": 8, "peak_tflops": 10,
                                      "efficiency": 0.5, "calibration": value}]}, "inv.yaml")
    assert "\n" not in str(e.value) and "devices[0]" in str(e.value)


def test_the_seed_check_calibrates_each_kind_from_its_own_job_as_run(tmp_path):
    """seed_inputs.calibration_from: each kind's job step in an interleaved check over its price;
    calibrated_inventory writes it into a copy of the inventory, which the planner reads back."""
    from harness.bench import seed_inputs
    # the 2026-12-06 19:18-19:34 check's figures (Xeon, batch 96)
    si = {"kind_steps_s": {"cpu0.5": 7.2525, "cpu0.25": 14.523},
          "kind_steps_predicted_s": {"cpu0.5": 6.5706, "cpu0.25": 13.3956}}
    cal = seed_inputs.calibration_from(si)
    assert cal == {"cpu0.5": 1.1038, "cpu0.25": 1.0842}
    src = tmp_path / "inv-dp-r0.yaml"
    src.write_text("devices:\n  - {kind: cpu0.5, count: 2, memory_gb: 4, peak_tflops: 1, efficiency: 0.5}\n"
                   "  - {kind: cpu0.25, count: 2, memory_gb: 4, peak_tflops: 1, efficiency: 0.25}\n"
                   "links: {busbw_gb_per_s: 1, latency_us: 10}\n")
    out = seed_inputs.calibrated_inventory(src, cal)
    assert out.name == "inv-dp-cal-r0.yaml" and src.read_text().count("calibration") == 0
    assert {d.kind: d.calibration for d in inventory.load(out).devices} == cal
