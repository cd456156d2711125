"""`make perf`: benchmarks, not tests. Figures go to results/perf/perf.json (and stdout).

loader_throughput, dali_tuning: harness/bench/loader.py.
parallel_strategies: harness/bench/parallel.py (zero1, fsdp, tp, tp+sp against DDP at 2 ranks).
collectives: harness/bench/comm.py (busbw per collective, gloo vs MPI, against the memory-copy ceiling).
pipeline: harness/bench/pipeline.py (bubble vs (p-1)/(m+p-1) for GPipe and 1F1B; even vs balanced split).
moe: harness/bench/moe.py (expert parallel vs DDP on moe-small: load balance, drops, all-to-all).
planner: harness/bench/planner.py (2 ranks made 2x and 4x unequal by CPU quotas: planned vs uniform
DP and PP splits, simulator prediction vs measurement, utilization).
planner_seed: harness/bench/planner_seed.py (2 ranks of each kind: the mixed job against each kind's
own homogeneous job, utilization as the seed counts it, data parallel and pipelines; DP also at 2x the batch).
roofline: harness/bench/roofline.py (this machine's ceilings; every workload at tiny and small on them,
baseline vs +compile and +channels_last: intensity, fraction of the roof, fusion's effect).
deepcam_vs_reference: harness/bench/deepcam_ref.py (our DeepCAM step beside mlcommons/hpc's, same config,
interleaved: function check, op counts, paired step-time ratio; needs DEEPCAM_REFERENCE).
paired_speedup: harness/bench/paired.py (pooled vs paired speedup under a background burner that
switches on and off, against the quiet machine's answer).
calibration, demo_reproducibility: harness/bench/verdicts.py (the A/A false-positive rate of the
verdict rule; two demos back to back: same verdicts, intervals, half-widths, wall time).
context_parallel: harness/bench/context_parallel.py (LM long-tiny at cp 1, 2, 4: activation bytes
per block per rank, peak, K/V all-gather bytes beside theory).
recompute: harness/bench/recompute.py (selective and full against none on LM small and long-tiny:
memory saved vs step time added, interleaved).
store_postgres: harness/bench/store_postgres.py (32 concurrent ingesters of 1,000 records into an mlflow
server on PostgreSQL: exactly one run per record; records/s against one ingester, sqlite, a bare client).
ddp_overlap: harness/bench/ddp_overlap.py (DDP's bucketed all-reduce under the backward vs after it, 2 ranks:
measured steps beside the simulator's overlap model).
group_shards: harness/bench/group_shards.py (real tp2 and cp2 pairs against DDP at 2 ranks, interleaved,
beside the planner's prediction with the profiled group member's block and with the even split).
tp_step: harness/bench/tp_step.py (a real tp2 step split: the member's compute, waiting at the collectives,
the activations' transfer in the step against the same all-reduces alone, DTensor's own cost).
quota_gap: harness/bench/quota_gap.py (a rank held to a CPU quota: compute after a wait runs faster than the
quota's rate, measured beside the pipeline simulator's quota_credit).
store_scale: harness/bench/store_scale.py (stores of 1k, 10k and 100k runs on sqlite and PostgreSQL: the
sweep table, one sweep's load_runs(), every run's, Overview's first render).
data_wait_share: share of step time spent waiting for data, per loader path.
harness_overhead: step time of a workload under the full harness (loader + prefetch thread,
TrainStep, device sync, per-step record lines) vs a bare hand-written torch loop on the same
model, data files and sample order, in one process, interleaved in blocks (H B H B ...) so
drift hits both alike. Target: ratio of medians <= 1.01.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from harness.run import data
from harness.config.errors import UsageError
from harness.measure import allocator, envinfo
from harness.run import loop
from harness.bench import comm as perf_comm
from harness.bench import context_parallel as perf_cp
from harness.bench import deepcam_ref as perf_deepcam_ref
from harness.bench import planner_scale
from harness.bench import planner_seed
from harness.bench import loader as perf_loader
from harness.bench import mpi as perf_mpi
from harness.bench import moe as perf_moe
from harness.bench import paired as perf_paired
from harness.bench import parallel as perf_parallel
from harness.bench import pipeline as perf_pipeline
from harness.bench import planner as perf_planner
from harness.bench import quota_gap as perf_quota_gap
from harness.bench import recompute as perf_recompute
from harness.bench import roofline as perf_roofline
from harness.bench import store_postgres as perf_store_pg
from harness.bench import store_scale as perf_store_scale
from harness.bench import ddp_overlap as perf_overlap
from harness.bench import group_shards as perf_group_shards
from harness.bench import tp_step as perf_tp_step
from harness.bench import verdicts as perf_verdicts
from harness.config import registry
from harness.config.run_config import RunConfig
from harness.parallel.dist import DistInfo
from harness.run.record import RunRecord
from harness.measure.timing import now
from results.store import benchmark as results_perf
from results.stats import estimators as stats
from results.record.paths import REPO_ROOT



def _bare_block(cfg: RunConfig, wl, size, root: Path, warmup: int, steps: int) -> list[float]:
    """What a person would write by hand around the same model, optimizer and loader: no
    prefetch thread, no TrainStep, no record; the same host sync per step (float(loss))."""
    torch.manual_seed(cfg.seed)
    model = wl.build_model(size)
    model.train()
    plan, per_epoch = data.train_plan(wl.n_samples(root, "train", size), size.batch_size, cfg.seed,
                                      warmup + steps)
    opt, sched = wl.build_optimizer(model, size, size.batch_size, per_epoch)
    batches = iter(wl.torch_loader(root, "train", size, plan))
    out = []
    for i in range(len(plan)):
        t0 = now()
        x, y = next(batches)
        x = wl.preprocess(wl.to_model_input(x), root).contiguous()
        opt.zero_grad(set_to_none=True)
        loss = wl.loss(model(x), y)
        loss.backward()
        opt.step()
        sched.step()
        float(loss.detach())
        if i >= warmup:
            out.append(now() - t0)
    return out


def _harness_block(cfg: RunConfig, wl, tmp: Path) -> list[float]:
    rec = RunRecord(tmp, cfg, envinfo.capture())
    loop.train(cfg, wl, rec, DistInfo())
    rec.finish("finished")
    return [s["step_s"] for s in rec.steps if s["phase"] == "steady"]


def _overhead(workload: str, size_name: str, blocks: int, steps: int, warmup: int) -> dict:
    wl = registry.get(workload)
    size = wl.sizes[size_name]
    cfg = RunConfig(workload=workload, size=size_name, steps=steps, warmup_steps=warmup)
    root = data.dataset_root(cfg)
    data.ensure_dataset(wl, size, root, cfg.data_seed)
    h_runs, b_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(blocks):  # interleaved: H B H B ...
            h_runs.append(_harness_block(cfg, wl, Path(tmp)))
            b_runs.append(_bare_block(cfg, wl, size, root, warmup, steps))
    s = stats.speedup(b_runs, h_runs)  # bare/harness time ratio; the overhead ratio is its inverse
    h_med = float(np.median(np.concatenate(h_runs)))
    b_med = float(np.median(np.concatenate(b_runs)))
    return {"blocks": blocks, "steps_per_block": steps, "harness_median_ms": 1000 * h_med,
            "bare_median_ms": 1000 * b_med, "ratio_harness_over_bare": h_med / b_med,
            "ratio_ci95": [1 / s["ci_hi"], 1 / s["ci_lo"]], "meets_target": h_med / b_med <= 1.01}


OVERHEAD_CASES = [  # (workload, size, blocks, steps, warmup): tiny and one larger size each
    ("cosmoflow", "tiny", 8, 25, 3), ("cosmoflow", "small", 3, 6, 2),
    ("deepcam", "tiny", 6, 15, 3), ("deepcam", "small", 3, 5, 2),
    ("lm", "tiny", 8, 40, 3), ("lm", "small", 3, 6, 2),
]


def harness_overhead() -> dict:
    """Every workload at tiny and one larger size; target ratio <= 1.01 (eager fp32)."""
    out = {"target": "harness / bare <= 1.01", "torch_threads": torch.get_num_threads()}
    for wl, size, blocks, steps, warmup in OVERHEAD_CASES:
        out[f"{wl}/{size}"] = _overhead(wl, size, blocks, steps, warmup)
    out["meets_target"] = all(v["meets_target"] for k, v in out.items() if isinstance(v, dict))
    return out


def data_wait_share(workload: str = "cosmoflow", size_name: str = "tiny", steps: int = 40) -> dict:
    """Share of steady step time spent waiting for the next batch, per loader path, with the
    prefetch thread (prefetch=2) and inline (prefetch=0, the CPU default)."""
    wl = registry.get(workload)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dali, prefetch in ((False, 2), (True, 2), (False, 0), (True, 0)):
            cfg = RunConfig(workload=workload, size=size_name, steps=steps).with_overrides(
                [f"toggles.dali={dali}", f"prefetch={prefetch}"])
            rec = RunRecord(Path(tmp), cfg, envinfo.capture())
            loop.train(cfg, wl, rec, DistInfo())
            rec.finish("finished")
            s = rec.summary()
            out[f"{'dali' if dali else 'torch'}, prefetch={prefetch}"] = {"data_wait_frac": s["data_wait_frac"],
                                                "median_step_ms": 1000 * s["median_step_s"]}
    out["target"] = "data wait < 2% of step time at tiny"
    out["meets_target"] = all(v["data_wait_frac"] < 0.02 for k, v in out.items()
                              if isinstance(v, dict) and k.endswith("prefetch=2"))
    return out


def portal_render() -> dict:
    """portal/perf.py in its own process: the harness does not import the portal."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-m", "portal.perf"], cwd=REPO_ROOT, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"portal.perf failed: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


BENCHMARKS = {"harness_overhead": harness_overhead, "loader_throughput": perf_loader.loader_throughput,
              "dali_tuning": perf_loader.dali_tuning,
              "data_wait_share": data_wait_share, "staging_throughput": perf_mpi.staging_throughput,
              "ddp_scaling": perf_mpi.ddp_scaling, "ingest_rate": results_perf.ingest_rate,
              "portal_render": portal_render, "parallel_strategies": perf_parallel.parallel_strategies,
              "collectives": perf_comm.collectives_bench, "pipeline": perf_pipeline.pipeline_bench,
              "moe": perf_moe.moe_bench, "planner": perf_planner.planner_bench,
              "planner_seed": planner_seed.planner_seed_bench,
              "planner_scale": planner_scale.planner_scale,
              "roofline": perf_roofline.roofline_bench, "paired_speedup": perf_paired.paired_speedup_bench,
              "deepcam_vs_reference": perf_deepcam_ref.deepcam_vs_reference,
              "calibration": perf_verdicts.calibration, "demo_reproducibility": perf_verdicts.demo_reproducibility,
              "recompute": perf_recompute.recompute_bench, "context_parallel": perf_cp.context_parallel_bench,
              "store_postgres": perf_store_pg.concurrent_ingest, "store_scale": perf_store_scale.store_scale,
              "ddp_overlap": perf_overlap.ddp_overlap_bench, "group_shards": perf_group_shards.group_shards_bench,
              "tp_step": perf_tp_step.tp_step_bench, "quota_gap": perf_quota_gap.quota_gap_bench}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="harness.bench.driver")
    p.add_argument("--only", choices=list(BENCHMARKS), action="append")
    p.add_argument("--out", default=str(REPO_ROOT / "results" / "perf" / "perf.json"))
    args = p.parse_args(argv)
    try:  # the cells that time in this process, as `harness` does (allocator.py)
        host_malloc = allocator.hold()
    except UsageError as e:
        print(f"harness.bench: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figures = json.loads(out.read_text()) if out.exists() else {}
    for name in args.only or BENCHMARKS:
        t0 = time.time()
        figures[name] = {**BENCHMARKS[name](), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         "wall_s": round(time.time() - t0, 1), "host_cpu": envinfo._cpu_model(),
                         "malloc": host_malloc["malloc"]}
        print(name, json.dumps(figures[name], indent=1))
        out.write_text(json.dumps(figures, indent=1))
    print(f"figures written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
