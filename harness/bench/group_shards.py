"""Tensor and context parallel's compute, measured, against the even split the planner assumed
(`make perf` cell group_shards; results/planner/within_stage.py). Not a test.

On 2 ranks at one thread each, LM small, global batch 8: `harness comm` measures the links, both
ranks profile at once with `--shards tp2,cp2` (one group member's block, timed), then each real
group run (parallel.tp=2: Megatron's column/row split through DTensor; parallel.cp=2: each rank
half of every sequence, K and V all-gathered) is measured against DDP in the same process group,
interleaved (harness/run/interleave.py), in `processes` launches, and the profile is taken again.
Predicted from each profile: DDP's step (batch 4 a rank) and the pair's (the whole batch, one
member's costs: within_stage.GroupCosts), "measured": the member's block compute from the measured
share and, for tp2, the collectives as the profile timed the real group in the step
(harness/planning/in_step.py); "even_split": 1/2 of the block and the collectives on the links,
the model both replace. The figure that matters is the pair's step over DDP's: measured,
predicted each way.
"""
from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from harness.bench.launch import other_side_median, run_harness, run_interleaved
from harness.bench.planner_jobs import SIZE, dataset, profile_ranks, run_args
from results.planner import layer_costs
from results.planner.data_parallel import dp_predict
from results.planner.inventory import Links
from results.planner.links import LinkModel
from results.planner.within_stage import Group, GroupCosts, NodeLinks

GROUPS = {"tp2": (Group(tp=2), "parallel.tp=2"), "cp2": (Group(cp=2), "parallel.cp=2")}
# the microbatches DDP's ranks (4) and the pair's members (8) run; one thread a rank, as the runs
ARGS = ("--microbatches", "4,8", "--repeats", "3", "--threads", "1", "--cell-s", "1.0", "--shards", "tp2,cp2")


def predict(profile: Path, results: Path, batch: int) -> dict:
    """DDP x2 and each pair on one profile: steps in seconds, the pair's over DDP's, both ways of
    pricing the member's compute; and the member's share of the block at the pair's microbatch."""
    links = LinkModel(Links(measured=True, backend="gloo"), results)
    base = layer_costs.from_profile("cpu", profile)
    ddp = dp_predict(["cpu", "cpu"], [batch // 2, batch // 2], {"cpu": base}, links, overlap=links.overlaps)["step_s"]
    out: dict = {"ddp_step_s": round(ddp, 4)}
    for name, (group, _) in GROUPS.items():
        row = {}
        for how, c in (("measured", base), ("even_split", base.without_shards())):
            step = dp_predict(["pair"], [batch], {"pair": GroupCosts(c, group, NodeLinks(links))}, links)["step_s"]
            row[how] = {"step_s": round(step, 4), "over_ddp": round(step / ddp, 4)}
        dim = name[:2]
        row["member_share_fwd_bwd"] = [round(base.shard_fraction(dim, 2, batch, b), 4) for b in (False, True)]
        timed = base.group_in_step_s(dim, 2, batch)
        if timed is not None:  # what the real group added to a member's block, forward + backward
            row["group_in_step_s_per_block"] = round(timed, 4)
        out[name] = row
    return out


def group_shards_bench(processes: int = 2, budget_s: float = 45.0, batch: int = 8) -> dict:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        env = {**os.environ, "HARNESS_RESULTS": str(tmp)}
        env.pop("MLFLOW_TRACKING_URI", None)
        data_dir = dataset(tmp)
        run_harness(env, 2, "comm", "--collectives", "all_reduce,send_recv", "--backends", "gloo", "-e", "64M",
                    "-n", "5", "--no-ingest")
        before = profile_ranks(env, tmp / "before", 2, "lm", SIZE, ARGS)[0]
        got = {name: run_interleaved(env, tmp, 2, processes, *run_args(data_dir, batch, [s, f"budget_s={budget_s}"]))
               for name, (_, s) in GROUPS.items()}
        after = profile_ranks(env, tmp / "after", 2, "lm", SIZE, ARGS)[0]
        pred = [predict(p, tmp, batch) for p in (before, after)]
    out: dict = {"workload": f"lm/{SIZE}", "ranks": 2, "threads_per_rank": 1, "global_batch": batch,
                 "processes": processes, "budget_s_per_process": budget_s, "predicted_by_profile": pred}
    for name, g in got.items():
        lo, hi = g["ci95"]
        measured = 1 / g["speedup"]  # the pair's step over DDP's, interleaved
        row = {"measured_over_ddp": round(measured, 4), "ci95": [round(1 / hi, 4), round(1 / lo, 4)],
               "steps_s": [round(r["summary"]["median_step_s"], 4) for r in g["records"]],
               "ddp_steps_s": [round(other_side_median(r), 4) for r in g["records"]], "per_process": g["per_process"]}
        for how in ("measured", "even_split"):  # the ratio predicted from the bracketing profiles
            mean = statistics.fmean(p[name][how]["over_ddp"] for p in pred)
            row[f"predicted_{how}"] = round(mean, 4)
            row[f"error_{how}"] = round(mean / measured - 1, 4)
        out[name] = row
    return out
