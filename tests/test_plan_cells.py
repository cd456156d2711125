"""A plan as something the harness runs (harness/planning/plan.py): the sweep cell `harness plan
--cell` writes, and the --set overrides and rank order the planner checks launch it with."""
from __future__ import annotations

import pytest


def test_written_cell_is_a_sweep_file_the_harness_runs(tmp_path):
    from harness.experiments import sweep
    plan = {"strategy": "pp", "devices": ["a", "b"], "stage_order": ["b", "a"], "pp_split": [4, 2],
            "schedule": "1f1b", "microbatches": 4}
    from harness.planning.plan import _cell
    f = tmp_path / "cell.yaml"
    f.write_text(_cell(plan, "lm", "small", 8))
    (cell,) = [c for c in sweep.plan_cells(sweep.load(f), "cpu", 1) if not c.is_baseline]
    par = cell.config["parallel"]
    assert (par["pp"], par["pp_split"], par["microbatches"], cell.config["ranks"]) == (2, "4,2", 4, 2)
    assert "rank 0: b, rank 1: a" in f.read_text()
    # two replicas of a two-stage pipeline on four ranks: the mesh is (pp, dp), so ranks 0-1 run stage 0
    plan = {**plan, "devices": ["a", "a", "b", "b"], "replicas": 2}
    f.write_text(_cell(plan, "lm", "small", 8))
    (cell,) = [c for c in sweep.plan_cells(sweep.load(f), "cpu", 1) if not c.is_baseline]
    assert (cell.config["parallel"]["pp"], cell.config["ranks"]) == (2, 4)
    assert "rank 0: b, rank 1: b, rank 2: a, rank 3: a" in f.read_text()


def test_a_plan_as_overrides_is_the_cell_the_planner_checks_run():
    """planner and planner_seed run plans through plan.overrides / rank_kinds: the same parallel
    settings and rank order `harness plan --cell` writes."""
    from harness.config.run_config import RunConfig
    from harness.planning.plan import overrides, rank_kinds
    pp = {"strategy": "pp", "devices": ["a", "a", "b", "b"], "stage_order": ["b", "a"], "pp_split": [4, 2],
          "schedule": "gpipe", "microbatches": 6, "replicas": 2}
    par = RunConfig(workload="lm", size="small").with_overrides(overrides(pp)).parallel
    assert (par.pp, par.pp_split, par.microbatches, par.pp_schedule) == (2, "4,2", 6, "gpipe")
    assert rank_kinds(pp) == ["b", "b", "a", "a"]
    dp = {"strategy": "dp", "devices": ["b", "a"], "batch_split": [8, 4], "recompute": ["a", "b"]}
    par = RunConfig(workload="lm", size="small", batch_size=12).with_overrides(overrides(dp)).parallel
    assert (par.batch_split, par.recompute) == ("8,4", "full")
    assert rank_kinds(dp) == ["b", "a"]
    assert overrides({**dp, "recompute": []}) == ["parallel.batch_split=8,4"]


def test_a_pipeline_runs_stage_compute_is_set_beside_the_plans_price_for_it():
    """planner_jobs.stage_compute_over_priced: per stage (forward + backward as run) / (as priced),
    the median over stages; stages matched by index (the schedule's keys are strings); None where
    there is nothing to compare (data parallel, no schedule recorded, a different stage count)."""
    from harness.bench.planner_jobs import stage_compute_over_priced
    plan = {"stages": [{"fwd_s": 0.158, "bwd_s": 0.324}, {"fwd_s": 0.164, "bwd_s": 0.340}]}
    # 2026-12-04 at 0.25 CPU: a slow-mode run's stage medians against the plan's prices
    run = {"1": {"fwd_s": 0.2105, "bwd_s": 0.4200}, "0": {"fwd_s": 0.2063, "bwd_s": 0.4011}}
    want = sorted([(0.2063 + 0.4011) / 0.482, (0.2105 + 0.4200) / 0.504])
    assert stage_compute_over_priced(plan, run) == pytest.approx(sum(want) / 2, abs=1e-4)
    assert stage_compute_over_priced({"strategy": "dp"}, run) is None
    assert stage_compute_over_priced(plan, None) is None
    assert stage_compute_over_priced(plan, {"0": run["0"]}) is None
