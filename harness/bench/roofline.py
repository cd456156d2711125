"""Roofline check for `make perf` (not a test): this machine's ceilings, and every workload at
tiny and small placed on them, baseline against +compile and +channels_last
(harness/sweeps/roofline.yaml, run into a scratch results folder): per cell the run's intensity,
bound, fraction of its roof, share of FLOPs vs share of time in compute-bound ops, and fusion's
effect (memory-bound ms and ops per profiled step, toggle on vs baseline). The machine's load is
read before and after and kept beside the figures: a loaded machine moves every time here.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from harness.measure import roofline
from harness.comm.bench import load_now
from results.analysis import speedups as report
from results.analysis import roofline as roofline_report
from results.record.paths import REPO_ROOT

SWEEP = REPO_ROOT / "harness" / "sweeps" / "roofline.yaml"


def roofline_bench() -> dict:
    threads = torch.get_num_threads()
    ceil = {dt: roofline.ceilings("cpu", dt, threads) for dt in roofline.DTYPES["cpu"]}
    out: dict = {"ceilings": {dt: {"peak_gflop_per_s": c["peak_flop_per_s"] / 1e9,
                                   "triad_gb_per_s": c["bw_bytes_per_s"] / 1e9,
                                   "copy_gb_per_s": c["bw_copy_bytes_per_s"] / 1e9,
                                   "ridge_flop_per_byte": c["ridge_flop_per_byte"]} for dt, c in ceil.items()},
                 "threads": threads, "load_before": load_now()}
    with tempfile.TemporaryDirectory() as t:
        env = {**os.environ, "HARNESS_RESULTS": str(Path(t) / "results")}
        env.pop("MLFLOW_TRACKING_URI", None)
        p = subprocess.run([sys.executable, "-m", "harness", "sweep", str(SWEEP)], env=env, cwd=REPO_ROOT,
                           capture_output=True, text=True)
        out["load_after"] = load_now()
        df = report.records_frame(Path(t) / "results" / "runs")
        if df.empty:
            raise RuntimeError(f"roofline sweep left no records: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
        df["config"] = report.label_configs(df)
        pts = roofline_report.run_points(df)
        cells = []
        for (wl, size, config), g in pts.groupby(["workload", "size", "config"]):
            b = roofline_report.block(g["record_dir"].iloc[0])
            cls = b["classes"]["compute_bound"]
            cells.append({"workload": wl, "size": size, "config": config, "runs": len(g),
                          "intensity": g["intensity"].median(), "bound": g["bound"].iloc[0],
                          "roof_pct": g["roof_pct"].median(),
                          "compute_bound_flop_share": cls["flop_share"], "compute_bound_time_share": cls["time_share"],
                          "disagreements": b["disagreements"]})
        out["runs"] = cells
        out["fusion"] = roofline_report.fusion_table(df).drop(columns=["sweep"], errors="ignore").to_dict("records")
        out["not_finished"] = df[df["status"] != "finished"][["workload", "size", "config", "status", "reason"]].to_dict(
            "records")
    return out
