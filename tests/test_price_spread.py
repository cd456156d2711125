"""A plan's price moved by the sampling of the profile it is priced from
(harness/bench/price_spread.py): which microbatches a plan runs each kind at, each block cell's
relative 95% half-width, and the kinds' moves in quadrature."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest
import yaml

from harness.bench import price_spread, seed_profiles
from results.record import schema

KINDS = {"cpu0.5": 0.5, "cpu0.25": 0.25}


def _profile(d: Path, cells: dict[int, list[float]]) -> Path:
    """A layer profile record whose block visits at each microbatch are `cells` (forward half,
    backward half of each), read through the records' reader."""
    d.mkdir(parents=True)
    schema.write_json(d / schema.CONFIG,
                      {"kind": schema.PROFILE_KIND, "run_id": d.name, "workload": "lm", "size": "small"})
    schema.write_json(d / schema.ENV, {})
    schema.open_record(d, 0.0)
    schema.close_record(d, {"layers": {"block": [
        {"microbatch": b, "fwd_cpu_samples_s": [x / 2 for x in v], "bwd_cpu_samples_s": [x / 2 for x in v]}
        for b, v in cells.items()]}}, schema.FINISHED, "", 0.0)
    return d


def test_the_microbatches_a_plan_runs_each_kind_at():
    # data parallel: 8 samples over 2 microbatches is 4 and 4; 5 over 2 is 3 then 2; no accumulation, the share
    mb = price_spread.plan_microbatches
    assert mb({"strategy": "dp", "devices": ["a", "a", "b", "b"], "batch_split": [8, 8, 5, 5],
               "microbatch_split": [2, 2, 2, 2]}) == {"a": {4}, "b": {2, 3}}
    assert mb({"strategy": "dp", "devices": ["a", "b"], "batch_split": [6, 0]}) == {"a": {6}}
    assert price_spread.plan_microbatches({"strategy": "pp", "devices": ["a", "a", "b", "b"],
                                           "microbatch_size": 2}) == {"a": {2}, "b": {2}}
    assert price_spread.plan_microbatches({"strategy": "kinds", "jobs": []}) is None


def test_a_cells_half_width_is_students_t_over_the_kinds_pooled_visits(tmp_path):
    twins = [_profile(tmp_path / "r0", {1: [0.1, 0.12], 4: [0.4, 0.44, 0.42], 8: [0.8, 0.8]}),
             _profile(tmp_path / "r1", {1: [0.11], 4: [0.46], 8: [0.8]})]
    four = [0.4, 0.44, 0.42, 0.46]
    by_hand = 3.182446 * statistics.stdev(four) / 2 / statistics.fmean(four)  # t(0.975, 3 df)
    assert price_spread.cell_half_width(twins, 4) == pytest.approx(by_hand, rel=1e-5)
    one = [0.1, 0.12, 0.11]
    at_1 = 4.302653 * statistics.stdev(one) / 3 ** 0.5 / statistics.fmean(one)
    assert price_spread.cell_half_width(twins, 2) == pytest.approx(max(at_1, by_hand), rel=1e-5)  # the wider neighbour
    assert price_spread.cell_half_width(twins, 6) == pytest.approx(by_hand, rel=1e-5)  # 8's visits agree: 0 wide
    assert price_spread.cell_half_width(twins, 32) == 0.0  # beyond the profiled sizes, the nearest's
    assert price_spread.cell_half_width(twins[1], 4) is None  # one visit has no interval
    assert price_spread.relative_half_width([1.0]) is None


def test_relative_to_the_probes_cell_a_drift_shared_by_a_rounds_cells_cancels(tmp_path):
    """Round i's visits of both cells, each over its cell's mean, differenced: Student's t on those.
    Cells that drift together round by round have no spread relative to each other."""
    together = _profile(tmp_path / "together", {1: [0.1, 0.12, 0.11], 4: [0.4, 0.48, 0.44]})
    assert price_spread.cell_half_width(together, 1) > 0.1  # alone, known to +-23%
    assert price_spread.cell_half_width(together, 1, relative_to=4) == pytest.approx(0.0, abs=1e-12)
    apart = _profile(tmp_path / "apart", {1: [0.1, 0.12, 0.11], 4: [0.44, 0.4, 0.48]})
    d = [0.1 / 0.11 - 0.44 / 0.44, 0.12 / 0.11 - 0.4 / 0.44, 0.11 / 0.11 - 0.48 / 0.44]
    assert price_spread.cell_half_width(apart, 1, relative_to=4) == pytest.approx(
        4.302653 * statistics.stdev(d) / 3 ** 0.5, rel=1e-5)
    assert price_spread.cell_half_width(apart, 4, relative_to=4) == 0.0  # the probe's own microbatch: one cell
    assert price_spread.cell_half_width(apart, 1, relative_to=8) is None  # no such cell to be relative to
    unpaired = _profile(tmp_path / "unpaired", {1: [0.1, 0.12], 4: [0.4, 0.48, 0.44]})
    assert price_spread.cell_half_width(unpaired, 1, relative_to=4) is None


def test_each_kinds_move_is_the_price_with_its_compute_scaled_and_the_moves_add_in_quadrature(tmp_path, monkeypatch):
    profiles = {"cpu0.5": _profile(tmp_path / "fast", {4: [0.4, 0.44, 0.42]}),
                "cpu0.25": _profile(tmp_path / "slow", {2: [0.2, 0.25]})}
    inv = seed_profiles.inventory(tmp_path / "inv-mixed.yaml", KINDS, profiles, 2.0)

    def predict(plan: dict, path: Path, links_root: Path) -> float:  # 3 s of the fast kind's, 1 of the slow's
        cal = {d["kind"]: d.get("calibration", 1.0) for d in yaml.safe_load(path.read_text())["devices"]}
        return 3.0 * cal["cpu0.5"] + 1.0 * cal["cpu0.25"]

    monkeypatch.setattr(price_spread, "predict", predict)
    plan = {"strategy": "dp", "devices": ["cpu0.5", "cpu0.5", "cpu0.25", "cpu0.25"], "batch_split": [8, 8, 4, 4],
            "microbatch_split": [2, 2, 2, 2]}
    r_fast = price_spread.cell_half_width(profiles["cpu0.5"], 4)
    r_slow = price_spread.cell_half_width(profiles["cpu0.25"], 2)
    got = price_spread.price_spread(plan, inv, tmp_path, profiles, 4.0)
    assert got == pytest.approx(math.hypot(math.log((3 * (1 + r_fast) + 1) / 4), math.log((3 + 1 + r_slow) / 4)))
    # an inventory already calibrated (the probe's factors) is scaled on top of its calibration
    probed = seed_profiles.calibrated_inventory(inv, {"cpu0.5": 1.1, "cpu0.25": 0.8}, tmp_path / "inv-probe.yaml")
    assert price_spread.price_spread(plan, probed, tmp_path, profiles, 3.3 + 0.8) == pytest.approx(math.hypot(
        math.log((3.3 * (1 + r_fast) + 0.8) / 4.1), math.log((3.3 + 0.8 * (1 + r_slow)) / 4.1)))
    # each kind's scaled inventory is kept beside the one priced
    kept = yaml.safe_load((tmp_path / "inv-mixed-spread-cpu0.25.yaml").read_text())["devices"]
    assert {d["kind"]: d["calibration"] for d in kept} == {"cpu0.5": 1.0, "cpu0.25": pytest.approx(1 + r_slow)}
    # a plan whose microbatches cannot be read, or a cell of one visit: no spread
    assert price_spread.price_spread({"strategy": "kinds"}, inv, tmp_path, profiles, 4.0) is None
    thin = {**profiles, "cpu0.25": _profile(tmp_path / "thin", {2: [0.2]})}
    assert price_spread.price_spread(plan, inv, tmp_path, thin, 4.0) is None
