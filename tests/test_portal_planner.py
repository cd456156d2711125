"""The Planner page: a real plan (`harness plan` on the three-vendor what-if) and a check file
of the shape `make perf` writes, shown as results/plan_report computes them, in AppTest and in
Chromium."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from results.planner import report as plan_report
from tests.conftest import harness
from tests.helpers import app_page as _app_page

CHECK = {"workload": "lm/small", "measured_at": "2026-11-30T23:59:00Z", "checks": [
    {"plan": "dp 2x", "split": [8, 4], "uniform_split": [6, 6], "cpus_by_rank": [1.0, 0.5],
     "planned": {"predicted_step_s": 2.5, "measured_step_s": 2.6, "error": 2.5 / 2.6 - 1, "error_bracketed": 2.55 / 2.6 - 1,
                 "utilization_predicted": 0.97,
                 "utilization_measured": 0.95},
     "uniform": {"predicted_step_s": 3.6, "measured_step_s": 3.5, "error": 3.6 / 3.5 - 1, "error_bracketed": 0.0,
                 "utilization_predicted": 0.66,
                 "utilization_measured": 0.7},
     "planned_over_uniform_throughput": 3.5 / 2.6,
     "interleaved": {"measured_speedup": 1.3, "ci95": [1.25, 1.36], "predicted_speedup": 1.44, "error": 1.44 / 1.3 - 1}}]}

# the figures of a real `planner_seed` run (2026-12-05 00:25-00:51, 4 ranks under CPU quotas), the
# fields the page reads
SEED_CHECK = {"workload": "lm/small", "global_batch": 24, "cpus": {"cpu0.5": 0.5, "cpu0.25": 0.25},
              "measured_at": "2026-12-05T00:50:51Z", "checks": {
                  "dp": {"mixed_plan": "dp x4 [8, 8, 4, 4]",
                         "homogeneous": {"cpu0.5": {"plan": "dp x2 [6, 6]"}, "cpu0.25": {"plan": "dp x2 [6, 6]"}},
                         "utilization_seed_measured": 0.984, "utilization_seed_predicted": 0.9418762710824055},
                  "pp": {"mixed_plan": "pp 2 x (1 cpu0.25+1 cpu0.5 stages) [2, 4] M=12",
                         "homogeneous": {"cpu0.5": {"plan": "pp 1 x (2 cpu0.5 stages) [3, 3] M=12"},
                                         "cpu0.25": {"plan": "pp 1 x (2 cpu0.25 stages) [3, 3] M=12"}},
                         "utilization_seed_measured": 0.9483, "utilization_seed_predicted": 0.995049065555611}},
              "seed_interleaved": {"mixed": "dp x4 [8, 8, 4, 4]", "jobs": ["dp x2 [6, 6]", "dp x2 [6, 6]"],
                                   "measured": 0.9061, "ci95": [0.7761, 1.0578], "predicted": 0.9419, "error": 0.0395,
                                   # each job's step and price: the same plans' in the 2026-12-06 15:36 run
                                   "mixed_step_s": [2.7697, 2.7166],
                                   "kind_steps_s": {"cpu0.5": 1.8607, "cpu0.25": 3.8305},
                                   "kind_steps_predicted_s": {"cpu0.5": 1.751, "cpu0.25": 3.6735},
                                   # priced again: from a profile just before, and that x the probe (made up)
                                   "steps_priced_now_s": {"mixed": 2.6, "cpu0.5": 1.8, "cpu0.25": 3.7},
                                   "steps_priced_in_check_s": {"mixed": 2.7, "cpu0.5": 1.85, "cpu0.25": 3.85},
                                   # each job's steps in the check and the probe's factors with intervals (made up)
                                   "steps_steady_s": {"mixed": [2.6, 2.7, 2.74, 2.75, 2.8, 2.9],
                                                      "cpu0.5": [1.8, 1.85, 1.86, 1.87, 1.9, 2.0],
                                                      "cpu0.25": [3.5, 3.8, 3.83, 3.84, 3.9, 4.2]},
                                   "probe": {"factors": {"cpu0.5": 1.0, "cpu0.25": 1.0},
                                             "ci95": {"cpu0.5": [0.99, 1.01], "cpu0.25": [0.97, 1.03]}}}}


@pytest.fixture(scope="module")
def planner_store(tmp_path_factory):
    import os
    root = tmp_path_factory.mktemp("planner") / "results"
    env = {**os.environ, "HARNESS_RESULTS": str(root)}
    p = harness(env, "plan", "--devices", "harness/inventories/three-vendor.yaml", "--size", "llama2-70b",
                "--global-batch", "6400", timeout=120)
    assert p.returncode == 0, p.stderr
    (root / "plans" / "check-20261130T235900.json").write_text(json.dumps(CHECK))
    (root / "plans" / "seed-check-20261205T005051.json").write_text(json.dumps(SEED_CHECK))
    # newer, but malformed: a check without its figures, and a truncated file; the page shows the good one
    (root / "plans" / "seed-check-20261205T010000.json").write_text(json.dumps({"checks": {"dp": {"mixed_plan": "x"}}}))
    (root / "plans" / "seed-check-20261205T020000.json").write_text(json.dumps(SEED_CHECK)[:100])
    return root


def test_planner_page_shows_checks_and_the_plan(monkeypatch, planner_store):
    at = _app_page(monkeypatch, planner_store, "pages/planner.py")
    check = plan_report.newest_check(planner_store)
    shown = at.dataframe[0].value
    want = plan_report.checks_frame(check)
    assert shown.to_dict("records") == want.to_dict("records")
    assert list(shown["error %"]) == [round(100 * (2.5 / 2.6 - 1), 1), round(100 * (3.6 / 3.5 - 1), 1)]
    # the error with the profiles taken before and after the runs (their predictions' mean)
    assert list(shown["error % (profiles before and after)"]) == [round(100 * (2.55 / 2.6 - 1), 1), 0.0]
    assert "-1.9% and +0.0% with the profiles before and after the runs" in at.text[0].value
    assert at.text[0].value.splitlines() == plan_report.check_verdicts(check)
    assert "dp 2x: planned [8, 4] vs uniform [6, 6]: 1.35x the throughput" in at.text[0].value
    assert ("interleaved in one process group, planned/uniform 1.300x [1.250, 1.360] measured, 1.440x predicted "
            "(+10.8%)") in at.text[0].value
    # utilization as the seed counts it, measured: separate launches and the drift-free interleaved row
    assert plan_report.newest_seed_check(planner_store)["file"].endswith("seed-check-20261205T005051.json")
    seed = at.dataframe[1].value
    assert seed.to_dict("records") == plan_report.seed_frame(plan_report.newest_seed_check(planner_store)).to_dict("records")
    assert list(seed["how measured"]) == ["separate launches", "separate launches", "interleaved, both kinds' jobs at once"]
    assert list(seed["seed utilization measured"]) == [0.984, 0.9483, 0.9061]
    assert list(seed["95% interval"])[2] == "[0.776, 1.058]"
    assert at.text[1].value == ("Data parallel, drift-free: seed utilization 0.906 [0.776, 1.058], not distinguishable "
                                "from the seed's 0.95; predicted 0.942 (+4.0%).")
    # each job's step inside the interleaved check against its price: the mixed plan's from the
    # predicted utilization, 24 / (0.9419 * (12 / 1.751 + 12 / 3.6735)) = 2.5179 s
    steps = at.dataframe[2].value
    assert at.markdown[0].value == "**Each plan's step inside the interleaved checks, against its price**"
    assert list(steps["job"]) == ["mixed", "cpu0.5", "cpu0.25"]
    assert list(steps["check"]) == ["data parallel, at batch 24"] * 3
    assert list(steps["predicted step s"]) == [2.518, 1.751, 3.674]
    assert list(steps["measured step s"]) == [2.743, 1.861, 3.830]
    assert list(steps["error %"]) == [-8.2, -5.9, -4.1]
    # priced again from the profile just before the check, and that profile x each kind's probe in it
    assert list(steps["error % (profile just before)"]) == [-5.2, -3.3, -3.4]
    assert list(steps["error % (speed in the check)"]) == [-1.6, -0.6, 0.5]
    # six steps a job: the interval is their least and greatest; the probe's widens the last price's
    assert list(steps["measured 95% s"]) == ["[2.600, 2.900]", "[1.800, 2.000]", "[3.500, 4.200]"]
    lo = math.exp(math.log(3.85 / 3.8305) - math.hypot(math.log(4.2 / 3.8305), math.log(1 / 0.97))) - 1
    hi = math.exp(math.log(3.85 / 3.8305) + math.hypot(math.log(3.8305 / 3.5), math.log(1.03))) - 1
    assert steps["its 95% %"][2] == f"[{100 * lo:.1f}, {100 * hi:.1f}]" == "[-8.8, 10.5]"
    assert list(steps["stands (speed in the check)"]) == ["within"] * 3
    assert at.text[2].value == (
        "Each plan's step inside the interleaved checks, against its price: 1 of 3 within 5% (0 beyond it at 95% "
        "confidence, 2 not resolved at this sample size); the furthest the mixed job in data parallel, at batch "
        "24, -8.2% (2.52 s priced, 2.74 s measured). Priced from a profile just before each check: 2 of 3 within "
        "5% (0 beyond it at 95% confidence, 1 not resolved at this sample size); the furthest the mixed job in "
        "data parallel, at batch 24, -5.2%. "
        "That profile scaled by each kind's speed during the check: 3 of 3 within 5%; the furthest the mixed job in "
        "data parallel, at batch 24, -1.6%.")
    assert any(c.value.startswith("error %: predicted / measured - 1, the plan's price from the bench's first profile; "
                                  "profile just before:") and "speed in the check: that profile scaled" in c.value
               for c in at.caption)
    plan = json.loads(plan_report.plan_files(planner_store)[0].read_text())
    assert "SIMULATION from estimates" in at.markdown[1].value and "llama2-70b" in at.markdown[1].value
    per_kind = at.dataframe[4].value.set_index("device")  # the chosen strategy per kind: its group, its part
    assert any(m.value == "**The chosen strategy per kind**" for m in at.markdown)
    assert dict(per_kind["devices"]) == {"H100": 500, "Ascend-910B": 400, "MI250X": 700}
    for kind, g in plan["groups"].items():
        assert (per_kind.loc[kind, "tensor parallel"], per_kind.loc[kind, "context parallel"]) == (g["tp"], g["cp"])
        assert f"stages in each of {plan['replicas']} pipelines" in per_kind.loc[kind, "its part"]
    stages = at.dataframe[6].value
    assert list(stages["blocks"]) == plan["pp_split"] and list(stages["device"]) == plan["stage_order"]
    summary = at.dataframe[5].value.set_index("split")
    assert summary.loc["planned", "predicted step ms"] == round(1000 * plan["predicted"]["step_s"], 1)
    assert summary.loc["uniform", "predicted step ms"] == round(1000 * plan["uniform"]["predicted"]["step_s"], 1)
    assert summary.loc["planned", "utilization (seed)"] == round(plan["predicted"]["utilization_seed"], 3)
    cands = at.dataframe[7].value  # the strategies the search compared, the chosen one first
    assert list(cands["plan"]) == [c["plan"] for c in plan["candidates"]] and cands["plan"].iloc[0].startswith(
        f"pp {plan['replicas']} x")
    assert list(cands["predicted step ms"]) == [round(1000 * c["step_s"], 1) for c in plan["candidates"]]
    assert any(m.value == f"Why this plan: {plan['why']}" for m in at.markdown)
    alone = at.dataframe[8].value.set_index("device")
    assert set(alone.index) == {"H100", "Ascend-910B", "MI250X"}
    assert alone.loc["H100", "samples/s alone"] == round(plan["homogeneous"]["H100"]["samples_per_s"], 2)


@pytest.mark.slow
@pytest.mark.skipif(not Path(shutil.which("chromium") or "/usr/bin/chromium").exists(),
                    reason="Debian chromium not installed (make system-deps)")
def test_planner_page_in_chromium(planner_store):
    from playwright.sync_api import sync_playwright

    from tests.helpers import CHROMIUM, CHROMIUM_ARGS, serve
    from tests.helpers import visit as _visit
    with serve(planner_store) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        body, legend = _visit(browser, url, "planner", "planner")
        assert "Planner: unequal devices, predicted and measured" in body
        for line in plan_report.check_verdicts(plan_report.newest_check(planner_store)):
            assert line in body, line
        assert "predicted (simulator)" in legend and "measured (median step)" in legend
        assert "SIMULATION from estimates" in body and "ESTIMATE: 25 GB/s busbw" in body
        # the numbers as text (the tables are a canvas grid): the verdicts above carry the check's,
        # the plan's heading its batch and devices
        assert "pp, lm/llama2-70b, global batch 6400, 1600 devices" in body
        assert ("1.35x the throughput; simulator error -3.8% (planned), +2.9% (uniform), -1.9% and +0.0% with the "
                "profiles before and after the runs; utilization 0.950 measured") in body
        assert "interleaved in one process group, planned/uniform 1.300x [1.250, 1.360] measured, 1.440x predicted" in body
        # Planner II: the strategies compared, why the chosen one wins, each kind alone, both utilizations
        plan = json.loads(plan_report.plan_files(planner_store)[0].read_text())
        assert f"Why this plan: {plan['why']}" in body
        assert "The strategies compared" in body and "Each kind on its own" in body
        assert "The chosen strategy per kind" in body
        assert "Utilization (seed), as HETHUB counts it" in body
        assert "Utilization as the seed counts it: measured on two ranks of each kind" in body
        assert "Data parallel, drift-free: seed utilization 0.906 [0.776, 1.058], not distinguishable" in body
        assert ("Each plan's step inside the interleaved checks, against its price: 1 of 3 within 5% (0 beyond it "
                "at 95% confidence, 2 not resolved at this sample size); the furthest the mixed job in data "
                "parallel, at batch 24, -8.2% (2.52 s priced, 2.74 s measured).") in body
        assert ("That profile scaled by each kind's speed during the check: 3 of 3 within 5%; the furthest the mixed "
                "job in data parallel, at batch 24, -1.6%.") in body
        assert "speed in the check: that profile scaled by each kind's speed while the check ran" in body
        # the new columns' legend as drawn (the table's cells are a canvas: AppTest above reads their values)
        assert ("95%: the measured step's interval (order statistics over the check's steps), and with it the "
                "probe's and the profile's own sampling, where the check kept them; stands: within 5%, beyond it "
                "at 95%, or unresolved") in body
        browser.close()


def test_the_seed_check_at_a_larger_batch_is_a_row_and_a_sentence_of_its_own():
    """planner_seed's `seed_interleaved_amortized` (the data-parallel plans at twice the batch): its
    own row in the table, named by its batch, and its own sentence after the bench batch's, each
    placed against 0.95 by its own interval. Figures of the 2026-12-05 17:16-17:36 run (Xeon)."""
    check = {**SEED_CHECK, "seed_interleaved_amortized": {
        "global_batch": 48, "mixed": "dp x4 [16, 16, 8, 8]", "jobs": ["dp x2 [12, 12]", "dp x2 [12, 12]"],
        "measured": 0.9202, "ci95": [0.8765, 0.966], "predicted": 0.9727, "error": 0.0571}}
    rows = plan_report.seed_frame(check).to_dict("records")
    assert [r["how measured"] for r in rows][2:] == ["interleaved, both kinds' jobs at once",
                                                     "interleaved, both kinds' jobs at once, at batch 48"]
    assert (rows[3]["mixed plan"], rows[3]["95% interval"], rows[3]["seed utilization predicted"]) == (
        "dp x4 [16, 16, 8, 8]", "[0.876, 0.966]", 0.9727)
    assert plan_report.seed_verdict(check) == (
        "Data parallel, drift-free: seed utilization 0.906 [0.776, 1.058], not distinguishable from the seed's "
        "0.95; predicted 0.942 (+4.0%). At batch 48: seed utilization 0.920 [0.876, 0.966], not distinguishable "
        "from the seed's 0.95; predicted 0.973 (+5.7%).")
    below = {**check, "seed_interleaved_amortized": {**check["seed_interleaved_amortized"], "ci95": [0.88, 0.94]}}
    assert "At batch 48: seed utilization 0.920 [0.880, 0.940], below the seed's 0.95" in \
        plan_report.seed_verdict(below)


def test_the_calibrated_check_is_a_row_and_a_sentence_after_the_larger_batch():
    """planner_seed's `seed_interleaved_calibrated`: the larger batch's data-parallel check again,
    re-planned with each kind calibrated from it. Its row says so and its sentence gives each kind's
    factor. Figures of the 2026-12-06 19:18-19:49 throwaway checks (Xeon, batch 96)."""
    mixed = "dp x4 (microbatches 4.4.1.1) [32, 32, 16, 16]"
    jobs = ["dp x2 (microbatches 3.3) [24, 24]", "dp x2 (microbatches 2.2) [24, 24]"]
    check = {**SEED_CHECK,
             "seed_interleaved_amortized": {"global_batch": 96, "mixed": mixed, "jobs": jobs, "measured": 0.9884,
                                            "ci95": [0.9631, 1.0144], "predicted": 0.9854, "error": -0.003},
             "seed_interleaved_calibrated": {"global_batch": 96, "mixed": mixed, "jobs": jobs, "measured": 0.9787,
                                             "ci95": [0.9442, 1.0145], "predicted": 0.9876, "error": 0.0091,
                                             "calibration": {"cpu0.5": 1.1038, "cpu0.25": 1.0842}}}
    rows = plan_report.seed_frame(check).to_dict("records")
    assert [r["how measured"] for r in rows][3:] == [
        "interleaved, both kinds' jobs at once, at batch 96",
        "interleaved, both kinds' jobs at once, at batch 96, each kind calibrated from the check before"]
    assert rows[4]["95% interval"] == "[0.944, 1.014]"
    assert plan_report.seed_verdict(check).endswith(
        "At batch 96: seed utilization 0.988 [0.963, 1.014], above the seed's 0.95; predicted 0.985 (-0.3%). "
        "Re-planned with each kind calibrated from that check (cpu0.5 x1.104, cpu0.25 x1.084): seed utilization "
        "0.979 [0.944, 1.014], not distinguishable from the seed's 0.95; predicted 0.988 (+0.9%).")


def test_the_pipelines_interleaved_are_a_row_and_a_sentence_or_say_why_not():
    """planner_seed's `seed_interleaved_pp`: the mixed pipelines against both kinds' own pipelines
    run at once. Its row is the pipelines'; its sentence follows data parallel's, or says why
    the check could not run it."""
    check = {**SEED_CHECK, "seed_interleaved_pp": {
        "mixed": "pp 2 x (1 cpu0.5+1 cpu0.25 stages) [4, 2] M=12",
        "jobs": ["pp 1 x (2 cpu0.5 stages) [3, 3] M=12", "pp 1 x (2 cpu0.25 stages) [3, 3] M=12"],
        "measured": 0.9612, "ci95": [0.9521, 0.9704], "predicted": 0.9838, "error": 0.0236}}
    rows = plan_report.seed_frame(check).to_dict("records")
    assert (rows[-1]["shape"], rows[-1]["how measured"], rows[-1]["95% interval"]) == (
        "pipelines", "interleaved, both kinds' jobs at once", "[0.952, 0.970]")
    assert plan_report.seed_verdict(check).endswith(
        "Pipelines, drift-free: seed utilization 0.961 [0.952, 0.970], above the seed's 0.95; predicted 0.984 (+2.4%).")
    # at a larger batch (planner_seed.AMORTIZED): a row named by its batch and a sentence after the
    # pipelines' (figures of the 2026-12-06 11:03-11:14 throwaway check, Xeon)
    big = {**check, "seed_interleaved_pp_amortized": {
        "global_batch": 48, "mixed": "pp 1 x (2 cpu0.25+2 cpu0.5 stages) [1, 1, 2, 2] M=24",
        "jobs": ["pp 1 x (2 cpu0.5 stages) [3, 3] M=24", "pp 1 x (2 cpu0.25 stages) [3, 3] M=24"],
        "measured": 0.9562, "ci95": [0.9457, 0.9667], "predicted": 0.9912, "error": 0.0366}}
    rows = plan_report.seed_frame(big).to_dict("records")
    assert (rows[-1]["shape"], rows[-1]["how measured"], rows[-1]["95% interval"]) == (
        "pipelines", "interleaved, both kinds' jobs at once, at batch 48", "[0.946, 0.967]")
    assert plan_report.seed_verdict(big).endswith(
        "above the seed's 0.95; predicted 0.984 (+2.4%). Pipelines at batch 48: seed utilization 0.956 "
        "[0.946, 0.967], not distinguishable from the seed's 0.95; predicted 0.991 (+3.7%).")
    # data parallel over each kind's own pipeline (the planner's kinds plan, one launch of unequal
    # replicas): the figures of the 2026-12-06 14:34-15:36 planner_seed run (Xeon)
    kinds = {**big, "seed_interleaved_pp_kinds": {
        "global_batch": 24,
        "mixed": "per kind: cpu0.5 pp 1 x (2 cpu0.5 stages) @17 | cpu0.25 pp 1 x (2 cpu0.25 stages) @7",
        "jobs": ["pp 1 x (2 cpu0.5 stages) [3, 3] M=12", "pp 1 x (2 cpu0.25 stages) [3, 3] M=12"],
        "measured": 0.9214, "ci95": [0.906, 0.9371], "predicted": 0.9532, "error": 0.0345}}
    rows = plan_report.seed_frame(kinds).to_dict("records")
    row = rows[-1]
    assert (row["how measured"], row["mixed plan"].startswith("per kind: cpu0.5"), row["95% interval"]) == (
        "interleaved, both kinds' jobs at once, each kind its own pipeline in one launch", True, "[0.906, 0.937]")
    assert plan_report.seed_verdict(kinds).endswith(
        "Each kind its own pipeline, data parallel between them: seed utilization 0.921 [0.906, 0.937], below "
        "the seed's 0.95; predicted 0.953 (+3.5%).")
    skipped = {**SEED_CHECK, "seed_interleaved_pp": {"skipped": "the mixed plan's ranks are ['a', 'b', 'a', 'b']"}}
    assert len(plan_report.seed_frame(skipped)) == 3
    assert plan_report.seed_verdict(skipped).endswith(
        "Pipelines interleaved: not measured: the mixed plan's ranks are ['a', 'b', 'a', 'b'].")
