"""Mixture-of-Experts benchmark for `make perf` (not a test): LM moe-small (8 experts, top-2,
every other MLP) at 2 ranks under mpiexec, expert parallel (ep=2: 4 experts per rank, tokens
over all-to-all) against plain DDP (every expert on every rank) in the same process group, in
alternating blocks (harness/run/interleave.py), 2 launches combined. Per configuration: step time, and from the steady steps the load balance (tokens per
expert, max/mean), the dropped share, forward time in all-to-all and in the experts, and the
all-to-all bytes measured on the real calls beside what the routing implies.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from harness.comm.bench import load_now
from harness.bench.launch import run_interleaved, run_recorded



def _args(ep: int, steps: int, batch: int, *sets: str) -> list[str]:
    args = ["run", "lm", "--size", "moe-small", "--no-ingest", "--set", f"steps={steps}", "--set", "warmup_steps=1",
            "--set", "profile_steps=0", "--set", f"batch_size={batch}", "--set", f"parallel.ep={ep}"]
    for s in sets:
        args += ["--set", s]
    return args


def _figures(rec: dict, load: dict) -> dict:
    steady = [m for m in rec["metrics"] if m["kind"] == "step" and m["phase"] == "steady"]
    acc = rec["summary"]["parallel"]
    return {"step_ms": 1000 * rec["summary"]["median_step_s"],
            "load_max_over_mean": [round(m["moe_load_max_over_mean"], 3) for m in steady],
            "dropped_frac": [round(m["moe_dropped_frac"], 4) for m in steady],
            "tokens_per_expert_last_step": steady[-1]["moe_tokens_per_expert"],
            "a2a_forward_ms": float(np.median([1000 * m["moe_a2a_s"] for m in steady])),
            "experts_forward_ms": float(np.median([1000 * m["moe_expert_s"] for m in steady])),
            "all_to_all_bytes": {"measured": acc["measured_per_step"].get("all_to_all", {}).get("bytes", 0),
                                 "expected": acc["analytic_per_step"].get("all_to_all", 0)},
            "load_1m": load.get("loadavg_1m")}


def moe_bench(steps: int = 4, processes: int = 2, batch: int = 8, budget_s: float = 45.0) -> dict:
    """DDP's own run for its figures, then expert parallel against DDP in the same process group
    (interleaved blocks, harness/run/interleave.py) in `processes` launches, combined."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HARNESS_RESULTS": tmp}
        env.pop("MLFLOW_TRACKING_URI", None)
        load = load_now()
        ddp = _figures(run_recorded(env, Path(tmp), 2, *_args(1, steps, batch), with_metrics=True), load)
        load = load_now()
        got = run_interleaved(env, Path(tmp), 2, processes, *_args(2, steps, batch, f"budget_s={budget_s}"),
                              with_metrics=True)
        ep2 = _figures(got.pop("records")[-1], load)
    lo, hi = got["ci95"]
    return {"workload": "lm/moe-small", "ranks": 2, "global_batch": batch, "processes": processes,
            "method": "interleaved against DDP in one process group, random effects over processes",
            "ddp": ddp, "ep2": ep2, "ep2_step_time_vs_ddp": 1 / got["speedup"], "ci95": [1 / hi, 1 / lo],
            "per_process": got["per_process"], "process_tau": got["process_tau"]}
