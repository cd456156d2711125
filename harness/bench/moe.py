"""Mixture-of-Experts benchmark for `make perf` (not a test): LM moe-small (8 experts, top-2,
every other MLP) at 2 ranks under mpiexec, expert parallel (ep=2: 4 experts per rank, tokens
over all-to-all) paired in time with plain DDP (every expert on every rank), in alternating
rounds. Per configuration: step time, and from the steady steps the load balance (tokens per
expert, max/mean), the dropped share, forward time in all-to-all and in the experts, and the
all-to-all bytes measured on the real calls beside what the routing implies.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from harness.comm.bench import load_now
from results.stats import estimators as stats
from harness.bench.launch import run_recorded



def _run(env: dict, results: Path, ep: int, steps: int, batch: int) -> dict:
    load = load_now()
    rec = run_recorded(env, results, 2, "run", "lm", "--size", "moe-small", "--no-ingest", "--set", f"steps={steps}",
                       "--set", "warmup_steps=1", "--set", "profile_steps=0", "--set", f"batch_size={batch}",
                       "--set", f"parallel.ep={ep}", with_metrics=True)
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


def moe_bench(steps: int = 4, rounds: int = 2, batch: int = 8) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HARNESS_RESULTS": tmp}
        env.pop("MLFLOW_TRACKING_URI", None)
        runs: dict[int, list[dict]] = {1: [], 2: []}
        for _ in range(rounds):
            for ep in (1, 2):  # DDP then expert parallel: a pair in time
                runs[ep].append(_run(env, Path(tmp), ep, steps, batch))
    r = stats.paired_ratio([x["step_ms"] for x in runs[2]], [x["step_ms"] for x in runs[1]])
    return {"workload": "lm/moe-small", "ranks": 2, "global_batch": batch, "steps": steps, "rounds": rounds,
            "ddp": runs[1], "ep2": runs[2],
            "ep2_step_time_vs_ddp": r["ratio"], "ci95": [r["ci_lo"], r["ci_hi"]]}
