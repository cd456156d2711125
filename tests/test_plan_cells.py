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


def _pp(order, split, m=12, replicas=1):
    return {"strategy": "pp", "devices": [k for k in order for _ in range(replicas)], "stage_order": order,
            "pp_split": split, "schedule": "1f1b", "microbatches": m, "replicas": replicas}


def test_each_kinds_own_plans_run_at_once_as_onejobs_side():
    """seed_jobs.jobs_side: the `against` text that runs both kinds' own plans at once on the
    mixed plan's ranks (job j on ranks 2j, 2j+1), or why it can't. Pipelines: one section holds
    both jobs, so both kinds' plans must be one and the same 2-stage pipeline."""
    from harness.bench.seed_jobs import jobs_side
    from harness.config.run_config import RunConfig
    from harness.planning.plan import overrides, rank_kinds
    mixed = _pp(["b", "a"], [2, 4], replicas=2)  # stage 0 on the two b ranks, stage 1 on the a ranks
    own = [_pp(["a", "a"], [3, 3]), _pp(["b", "b"], [3, 3])]
    against, why = jobs_side(mixed, own, rank_kinds(mixed))
    assert why is None and against == "parallel.jobs=2;" + ";".join(overrides(own[0]))
    par = RunConfig(workload="lm", size="small", batch_size=24, ranks=4).with_overrides(
        [*overrides(mixed), *against.split(";")]).parallel
    assert (par.jobs, par.pp, par.pp_split, par.microbatches) == (2, 2, "3,3", 12)
    # the kinds' pipelines differ (microbatches): one parallel section can't hold both
    _, why = jobs_side(mixed, [own[0], _pp(["b", "b"], [3, 3], m=6)], rank_kinds(mixed))
    assert why.startswith("the plans are not all data parallel, nor each kind's one and the same 2-stage")
    # one 4-stage pipeline, its ranks kind by kind (the planner's choice for the pipelines at batch 48,
    # planner_seed.AMORTIZED): job 0 on the two b ranks, job 1 on the a ranks, as the mixed plan holds them
    four = _pp(["b", "b", "a", "a"], [1, 1, 2, 2], m=24)
    assert rank_kinds(four) == ["b", "b", "a", "a"]
    assert jobs_side(four, own, rank_kinds(four)) == ("parallel.jobs=2;" + ";".join(overrides(own[0])), None)
    # a 4-stage pipeline whose ranks alternate kinds: no job holds two ranks of one kind
    _, why = jobs_side(_pp(["a", "b", "a", "b"], [1, 2, 1, 2]), own, ["a", "b", "a", "b"])
    assert why == "the mixed plan's ranks are ['a', 'b', 'a', 'b']: not kind by kind in pairs, as the jobs hold them"
    # data parallel: the kinds' splits in the mixed plan's rank order
    dp = {"strategy": "dp", "devices": ["b", "b", "a", "a"], "batch_split": [4, 4, 8, 8]}
    own_dp = [{"strategy": "dp", "devices": ["a", "a"], "batch_split": [6, 6]},
              {"strategy": "dp", "devices": ["b", "b"], "batch_split": [5, 7]}]
    assert jobs_side(dp, own_dp, rank_kinds(dp)) == (
        "parallel.jobs=2;parallel.batch_split=5,7,6,6;parallel.microbatch_split=", None)
    # with gradient accumulation: each job's own counts (1 where a job does not accumulate), and the
    # mixed side's counts replaced, so the section the jobs side runs is valid
    dp_acc = {**dp, "microbatch_split": [1, 1, 2, 2]}
    own_acc = [{**own_dp[0], "microbatch_split": [2, 2]}, own_dp[1]]
    against, why = jobs_side(dp_acc, own_acc, rank_kinds(dp_acc))
    assert why is None and against.endswith("batch_split=5,7,6,6;parallel.microbatch_split=1,1,2,2")
    par = RunConfig(workload="lm", size="small", batch_size=24, ranks=4).with_overrides(
        [*overrides(dp_acc), *against.split(";")]).parallel
    assert (par.jobs, par.batch_split, par.microbatch_split) == (2, "5,7,6,6", "1,1,2,2")
    assert overrides(dp_acc) == ["parallel.batch_split=4,4,8,8", "parallel.microbatch_split=1,1,2,2"]


def test_data_parallel_over_each_kinds_own_pipeline_is_one_launch(tmp_path):
    """A kinds plan whose every kind trains as its own pipeline of one split (kind p: 1 replica of 2
    stages, kind q: 2 replicas; each device too small for the model) runs as one pipeline with
    unequal replicas: each replica's share and microbatches from its kind's job, its ranks its
    kind's, contiguous (parallel.batch_split with pp). A kind that trains data parallel cannot join
    such a launch: no cell, and the reason."""
    from harness.planning.plan import _cell, not_runnable, overrides, rank_kinds
    from results.planner import search as planner
    from results.planner.inventory import DeviceKind, Inventory
    from results.planner.links import LinkModel
    from tests.test_planner import FREE, _linear
    costs = {"p": _linear("p", 0.01, memory_per_sample=10), "q": _linear("q", 0.02, memory_per_sample=10)}
    inv = Inventory((DeviceKind("p", 2, 100_000), DeviceKind("q", 4, 100_000)), FREE)
    k = planner.plan(inv, costs, LinkModel(FREE, tmp_path), 48, "kinds")
    p, q = k["jobs"]["p"], k["jobs"]["q"]
    assert (p["replicas"], q["replicas"], p["pp_split"], q["pp_split"]) == (1, 2, [4, 4], [4, 4])
    assert not_runnable(k) is None
    # the test costs' model has 8 blocks: the parallel section alone (RunConfig checks a workload's blocks)
    from harness.config.parallel_config import Parallel
    sets = dict(o.removeprefix("parallel.").split("=", 1) for o in overrides(k))
    par = Parallel(**{n: int(v) if n == "pp" else v for n, v in sets.items()})
    shares = [p["global_batch"]] + [q["global_batch"] // 2] * 2
    assert par.shares() == shares and sum(shares) == 48
    assert par.replica_microbatches() == [p["microbatches"]] + [q["microbatches"]] * 2
    assert (par.pp, par.pp_split, par.label().startswith("ddp-split")) == (2, "4,4", True)
    assert par.batch_problem(48, 6) is None
    assert rank_kinds(k) == ["p", "p", "q", "q", "q", "q"]  # replica j on ranks 2j, 2j + 1
    f = tmp_path / "cell.yaml"
    f.write_text(_cell(k, "lm", "small", 48))
    assert f'batch_split: "{",".join(map(str, shares))}"' in f.read_text() and "ranks: [6]" in f.read_text()
    # kind d trains data parallel alone: one launch can't hold it beside p's pipeline
    mixed = Inventory((DeviceKind("p", 2, 100_000), DeviceKind("d", 1, 1e12)), FREE)
    costs["d"] = _linear("d", 0.02, memory_per_sample=10)
    kd = planner.plan(mixed, costs, LinkModel(FREE, tmp_path), 48, "kinds")
    assert "not every kind's is a pipeline" in not_runnable(kd)


def test_the_seed_check_runs_a_kinds_plan_against_each_kinds_own_pipeline():
    """seed_jobs.jobs_side with a kinds plan of pipelines: each kind's own pipeline as the jobs
    side, the mixed side's unequal-replica keys cleared."""
    from harness.bench.seed_jobs import jobs_side
    from harness.config.run_config import RunConfig
    from harness.planning.plan import overrides, rank_kinds
    own = [_pp(["a", "a"], [3, 3]), _pp(["b", "b"], [3, 3])]
    job = {"strategy": "pp", "schedule": "1f1b", "replicas": 1, "pp_split": [3, 3]}
    kinds = {"strategy": "kinds", "devices": ["a", "a", "b", "b"], "jobs": {
        "a": {**job, "global_batch": 17, "microbatches": 17}, "b": {**job, "global_batch": 7, "microbatches": 7}}}
    against, why = jobs_side(kinds, own, rank_kinds(kinds))
    assert why is None
    base = RunConfig(workload="lm", size="small", batch_size=24, ranks=4).with_overrides(overrides(kinds))
    assert (base.parallel.shares(), base.parallel.replica_microbatches()) == ([17, 7], [17, 7])
    par = base.with_overrides(against.split(";")).parallel
    assert (par.jobs, par.pp, par.microbatches, par.batch_split, par.microbatch_split) == (2, 2, 12, "", "")


def test_a_seed_check_keeps_what_its_plans_were_made_from(tmp_path):
    """seed_inputs.keep_inputs: links, each round's profiles, inventories and plans copied out of
    the bench's temporary folder, the inventories' profile paths pointing at the copies, so that
    `harness plan` prices the same plans again later (HARNESS_RESULTS=the copy)."""
    from harness.bench.seed_inputs import keep_inputs
    from results.planner import inventory
    tmp = tmp_path / "bench"
    prof = tmp / "round0" / "profiles" / "profile-a"
    prof.mkdir(parents=True)
    (prof / "summary.json").write_text("{}")
    for d in ("comm", "comm-cpu0.5/comm", "plans", "lm-small-shortval"):  # a pair's links: its own results folder
        (tmp / d).mkdir(parents=True)
        (tmp / d / "x.json").write_text("{}")
    (tmp / "inv-pp-r0.yaml").write_text(
        f"devices:\n  - {{kind: a, count: 2, memory_gb: 1, profile: {prof}}}\n"
        f"links: {{collectives: measured, backend: gloo, kinds: {{a: {tmp}/comm-cpu0.5}}}}\n")
    dest = keep_inputs(tmp, tmp_path / "kept")
    assert sorted(p.name for p in dest.iterdir()) == ["comm", "comm-cpu0.5", "inv-pp-r0.yaml", "plans", "round0"]
    assert (dest / "round0" / "profiles" / "profile-a" / "summary.json").exists()  # the dataset is not kept
    text = (dest / "inv-pp-r0.yaml").read_text()
    assert str(tmp) not in text and f"profile: {dest}/round0/profiles/profile-a" in text
    assert inventory.load(dest / "inv-pp-r0.yaml").devices[0].profiles == (dest / "round0" / "profiles" / "profile-a",)
