"""Scaling: how far adding ranks pays, for strong scaling (parallel cells: the one-rank global
batch split over n ranks) and weak scaling (`harness weak`: M concurrent instances, each a full
training to target, MLPerf HPC's weak-scaling metric).

Strong-scaling efficiency = speedup over one rank / n, with the speedup's bootstrap 95% CI
divided by n (1.0 = perfect, the ideal line). Weak scaling: models per minute = M / TTTa, TTTa =
latest run_stop - earliest run_start over the M instances (results/stats/scoring.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

WEAK_DIR = "weak"  # results/weak/<sweep>.json, written by harness/experiments/campaign.py


def strong(parallel: pd.DataFrame) -> pd.DataFrame:
    """From report.parallel_table: one row per strategy@ranks cell with its speedup, plus the
    strategy, the rank count and the efficiency with its CI."""
    if parallel.empty or "speedup" not in parallel:
        return pd.DataFrame()
    t = parallel.dropna(subset=["speedup"]).copy()
    if t.empty:
        return pd.DataFrame()
    parts = t["config"].astype(str).str.extract(r"^(?P<strategy>[^@]+)@(?P<ranks>\d+)(?P<toggles>\+.*)?$")
    t["strategy"] = parts["strategy"] + parts["toggles"].fillna("")
    t["ranks"] = pd.to_numeric(parts["ranks"])
    t = t.dropna(subset=["ranks"])
    t = t[t["ranks"] > 1]  # one-rank cells (recomputation alone) do not scale
    if t.empty:
        return pd.DataFrame()
    t["efficiency"] = t["speedup"] / t["ranks"]
    t["eff_lo"], t["eff_hi"] = t["ci_lo"] / t["ranks"], t["ci_hi"] / t["ranks"]
    return t[["workload", "size", "device", "strategy", "ranks", "runs", "median_step_ms", "speedup", "ci_lo",
              "ci_hi", "efficiency", "eff_lo", "eff_hi"]].sort_values(["workload", "strategy", "ranks"])


def weak(results_root: Path) -> pd.DataFrame:
    """Every weak-scaling campaign under results/weak/, newest first; unreadable files are
    named in a `problem` column rather than dropped."""
    rows = []
    for path in sorted((Path(results_root) / WEAK_DIR).glob("*.json")):
        try:
            r = json.loads(path.read_text())
            rows.append({"sweep": r["sweep"], "workload": r["workload"], "instance_size": r["instance_size"],
                         "instances": r["instances"], "converged": r["converged"], "ranks": r["instances"] *
                         r["instance_size"], "ttta_min": r.get("ttta_min"), "models_per_min": r.get("models_per_min"),
                         "problem": ""})
        except (OSError, ValueError, KeyError, TypeError) as e:
            rows.append({"sweep": path.stem, "problem": f"unreadable: {type(e).__name__}: {e}"[:200]})
    df = pd.DataFrame(rows)
    return df.sort_values("sweep", ascending=False).reset_index(drop=True) if len(df) else df
