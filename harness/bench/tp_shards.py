"""Tensor parallel's compute, measured against the even split the planner assumed (`make perf`
cell tp_shards; results/planner/within_stage.py). Not a test.

On 2 ranks at one thread each, LM small, global batch 8: `harness comm` measures the links, both
ranks profile at once with `--shards tp2` (one tensor-parallel member's block, timed), then the
real tensor-parallel run (parallel.tp=2, Megatron's column/row split through DTensor) is measured
against DDP in the same process group, interleaved (harness/run/interleave.py), in `processes`
launches, and the profile is taken again. Predicted from each profile: DDP's step (batch 4 a
rank) and the tp2 pair's (the whole batch, one member's costs: within_stage.GroupCosts), the
member's block compute from the measured share and, beside it, from the even 1/2 split.
The figure that matters is tp2's step over DDP's: measured, predicted with the measured share,
predicted with the even one.
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

# the microbatches DDP's ranks (4) and the pair's members (8) run; one thread a rank, as the runs
ARGS = ("--microbatches", "4,8", "--repeats", "3", "--threads", "1", "--cell-s", "1.0", "--shards", "tp2")


def predict(profile: Path, results: Path, batch: int) -> dict:
    """DDP x2 and a tp2 pair on one profile: steps in seconds, tp2 over DDP, both ways of pricing
    the member's compute; and the member's efficiency at the pair's microbatch."""
    links = LinkModel(Links(measured=True, backend="gloo"), results)
    base = layer_costs.from_profile("cpu", profile)
    ddp = dp_predict(["cpu", "cpu"], [batch // 2, batch // 2], {"cpu": base}, links, overlap=links.overlaps)["step_s"]
    out = {"ddp_step_s": round(ddp, 4)}
    for name, c in (("measured_share", base), ("even_split", base.without_shards())):
        pair = GroupCosts(c, Group(tp=2), NodeLinks(links))
        step = dp_predict(["pair"], [batch], {"pair": pair}, links)["step_s"]
        out[name] = {"tp2_step_s": round(step, 4), "tp2_over_ddp": round(step / ddp, 4)}
    fwd, bwd = (base.shard_fraction("tp", 2, batch, b) for b in (False, True))
    out["member_share_fwd_bwd"] = [round(fwd, 4), round(bwd, 4)]
    return out


def tp_shards_bench(processes: int = 2, budget_s: float = 45.0, batch: int = 8) -> dict:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        env = {**os.environ, "HARNESS_RESULTS": str(tmp)}
        env.pop("MLFLOW_TRACKING_URI", None)
        data_dir = dataset(tmp)
        run_harness(env, 2, "comm", "--collectives", "all_reduce,send_recv", "--backends", "gloo", "-e", "64M",
                    "-n", "5", "--no-ingest")
        before = profile_ranks(env, tmp / "before", 2, "lm", SIZE, ARGS)[0]
        got = run_interleaved(env, tmp, 2, processes,
                              *run_args(data_dir, batch, ["parallel.tp=2", f"budget_s={budget_s}"]))
        after = profile_ranks(env, tmp / "after", 2, "lm", SIZE, ARGS)[0]
        pred = [predict(p, tmp, batch) for p in (before, after)]
    lo, hi = got["ci95"]
    tp_steps = [r["summary"]["median_step_s"] for r in got["records"]]
    ddp_steps = [other_side_median(r) for r in got["records"]]
    measured = 1 / got["speedup"]  # tp2's step over DDP's, interleaved
    out = {"workload": f"lm/{SIZE}", "ranks": 2, "threads_per_rank": 1, "global_batch": batch,
           "processes": processes, "budget_s_per_process": budget_s,
           "measured": {"tp2_over_ddp": round(measured, 4), "ci95": [round(1 / hi, 4), round(1 / lo, 4)],
                        "tp2_steps_s": [round(x, 4) for x in tp_steps], "ddp_steps_s": [round(x, 4) for x in ddp_steps],
                        "per_process": got["per_process"]},
           "predicted_by_profile": pred}
    for name in ("measured_share", "even_split"):
        mean = statistics.fmean(p[name]["tp2_over_ddp"] for p in pred)
        out[f"error_{name}"] = round(mean / measured - 1, 4)  # the ratio predicted from the bracketing profiles
    return out
