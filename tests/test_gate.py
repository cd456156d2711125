"""The correctness gate: toggles that compute the same thing pass; a deliberately broken
layout transform is caught as fail_accuracy and kept out of speedups."""
from __future__ import annotations

import dataclasses
import re

import pytest

from harness.run import runner
from harness.config.run_config import RunConfig
from results.record import schema
from workloads.cosmoflow import CosmoFlow


@pytest.fixture
def baseline(tmp_path, data_root, monkeypatch):
    monkeypatch.setenv("HARNESS_DATA", str(data_root))
    cfg = RunConfig(workload="cosmoflow", steps=4, warmup_steps=1)
    out = runner.execute(cfg, root=tmp_path)
    assert out.status == "finished"
    return cfg, out.dir


@pytest.mark.parametrize("toggle, value", [("channels_last", True), ("dali", True),
                                           pytest.param("amp", "bf16", marks=pytest.mark.slow)])
def test_equivalent_toggles_pass(tmp_path, baseline, toggle, value):
    cfg, ref = baseline
    on = dataclasses.replace(cfg, toggles=dataclasses.replace(cfg.toggles, **{toggle: value}),
                             reference_run=str(ref))
    out = runner.execute(on, root=tmp_path)
    assert out.status == "finished", out.reason
    # what the gate decided, not only that the run finished: three losses compared, each within tolerance
    s = schema.read_record(out.dir)["summary"]
    assert s["gate_passed"] == 1 and s["gate_steps_compared"] == 3, s
    assert 0 <= s["gate_max_ratio"] <= 1 and s["gate_max_rel_diff"] <= 1e-2
    if toggle == "dali":  # the same bytes through another reader: the same losses
        assert s["gate_max_rel_diff"] <= 1e-6


def test_broken_layout_transform_is_fail_accuracy(tmp_path, baseline, monkeypatch):
    cfg, ref = baseline
    # a channels_last path that mixes up the channel order: shapes fine, numbers wrong (caught
    # at step 0, where legitimate reordering moved the loss by 1e-7 and this by 5e-3)
    monkeypatch.setattr(CosmoFlow, "to_model_input", lambda self, x: x.permute(0, 4, 1, 2, 3).roll(1, dims=1))
    on = dataclasses.replace(cfg, toggles=dataclasses.replace(cfg.toggles, channels_last=True),
                             reference_run=str(ref))
    out = runner.execute(on, root=tmp_path)
    assert out.status == schema.FAIL_ACCURACY
    assert re.search(r"correctness gate: loss at step 0 ", out.reason) and "tolerance 1e-04" in out.reason
    assert schema.read_record(out.dir)["status"]["status"] == "fail_accuracy"
    s = schema.read_record(out.dir)["summary"]
    assert s["gate_passed"] == 0 and s["gate_steps_compared"] == 1 and s["gate_max_ratio"] > 1


def test_reference_with_other_settings_is_refused(tmp_path, baseline):
    cfg, ref = baseline
    on = dataclasses.replace(cfg, seed=7, toggles=dataclasses.replace(cfg.toggles, dali=True),
                             reference_run=str(ref))
    out = runner.execute(on, root=tmp_path)
    assert out.status == schema.FAIL_ACCURACY and "differs in seed" in out.reason


def test_fail_accuracy_is_excluded_from_speedups(tmp_path, baseline, monkeypatch):
    from results.analysis.speedups import records_frame, speedup_table
    cfg, ref = baseline
    monkeypatch.setattr(CosmoFlow, "to_model_input", lambda self, x: x.permute(0, 4, 1, 2, 3).roll(1, dims=1))
    runner.execute(dataclasses.replace(cfg, toggles=dataclasses.replace(cfg.toggles, channels_last=True),
                                       reference_run=str(ref)), root=tmp_path)
    table = speedup_table(records_frame(tmp_path / "runs")).set_index("config")
    assert table.loc["+channels_last", "status"] == "fail_accuracy"
    assert "speedup" not in table or table["speedup"].isna()["+channels_last"]
    assert table.loc["baseline", "speedup"] == pytest.approx(1.0)
