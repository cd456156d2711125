"""The roofline from the records (pandas only, no torch): each run's block, its points on the
device's roofs, and fusion's effect (a compile or channels_last cell against its baseline: the
change in memory-bound time and in ops dispatched per step, from the same profiled phase).

A run's roofline block (harness/measure/op_roofline.py, in summary.json) holds the rank's ceilings (peak
FLOP/s at the run's dtype, STREAM triad bandwidth, ridge), the run's intensity (model FLOPs per
step over the bytes its unfused ops move), and the top ops with FLOPs, bytes, time and bound.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from results.record import schema

FUSION_TOGGLES = ("compile", "channels_last")


def block(record_dir: str | Path) -> dict:
    """The run's roofline block, or {} when it has none (unprofiled, unreadable, unavailable)."""
    try:
        b = schema.read_record(Path(record_dir))["summary"].get("roofline", {})
    except (OSError, ValueError, KeyError):
        return {}
    return b if "ridge_flop_per_byte" in b else {}


def _from_columns(r) -> dict:
    """The ceilings and the run's place from its flat roofline_* figures and tags (the run index
    has them for runs ingested since the tags existed): no record is read. {} when missing."""
    device = r.get("roofline_device")
    if not isinstance(device, str) or not device:
        return {}
    try:
        intensity, ridge = float(r["roofline_intensity"]), float(r["roofline_ridge"])
        bw = float(r["roofline_membw_gb_per_s"]) * 1e9
    except (KeyError, TypeError, ValueError):
        return {}
    if not all(v == v and v > 0 for v in (intensity, ridge, bw)):  # NaN or missing
        return {}
    peak = ridge * bw  # ridge = peak / bandwidth (harness/measure/roofline.py)
    return {"device_name": device, "dtype": r.get("roofline_dtype", ""), "intensity": intensity,
            "roof_flop_per_s": min(peak, intensity * bw), "peak_flop_per_s": peak, "bw_bytes_per_s": bw,
            "ridge_flop_per_byte": ridge, "bound": "compute_bound" if intensity >= ridge else "memory_bound"}


def run_points(df: pd.DataFrame) -> pd.DataFrame:
    """One row per finished run with a roofline block: device, dtype, intensity, achieved FLOP/s
    per rank, its roof there, and the ceilings (for drawing the roofs). From the frame's own
    columns where it has them; a run recorded before them has its summary.json read."""
    rows = []
    if "roofline_roof_pct" not in df:
        return pd.DataFrame()
    done = df[(df["status"] == "finished") & df["roofline_roof_pct"].notna()]
    for _, r in done.iterrows():
        b = _from_columns(r) or block(r["record_dir"])
        if not b.get("roof_flop_per_s"):
            continue
        achieved = r["roofline_roof_pct"] / 100 * b["roof_flop_per_s"]  # per rank (harness/run/record.py)
        rows.append({"run_id": r["run_id"], "workload": r["workload"], "size": r["size"], "config": r["config"],
                     "device_name": b["device_name"], "dtype": b["dtype"], "intensity": b["intensity"],
                     "achieved_flop_per_s": achieved, "roof_flop_per_s": b["roof_flop_per_s"],
                     "roof_pct": r["roofline_roof_pct"], "bound": b["bound"],
                     "peak_flop_per_s": b["peak_flop_per_s"], "bw_bytes_per_s": b["bw_bytes_per_s"],
                     "ridge": b["ridge_flop_per_byte"], "record_dir": r["record_dir"]})
    return pd.DataFrame(rows)


def roof_curve(peak: float, bw: float, lo: float = 1e-2, hi: float = 1e4) -> tuple[list[float], list[float]]:
    """The roof min(peak, I x bw) as a polyline on a log intensity axis: lo, ridge, hi."""
    ridge = peak / bw
    xs = [lo, ridge, max(hi, 10 * ridge)]
    return xs, [min(peak, x * bw) for x in xs]


def op_frame(b: dict) -> pd.DataFrame:
    """The block's top ops, with per-step milliseconds and GB/s for the tables."""
    ops = pd.DataFrame(b.get("ops", []))
    if ops.empty:
        return ops
    return ops.assign(ms=1e3 * ops["s"], gb_per_s=ops["achieved_bytes_per_s"] / 1e9,
                      gflop_per_s=ops["achieved_flop_per_s"] / 1e9, roof_pct=100 * ops["roof_frac"])


def class_shares(b: dict) -> pd.DataFrame:
    """Share of FLOPs vs share of profiled time per class, long form for a grouped bar."""
    rows = [{"class": cls.replace("_", "-"), "measure": measure.replace("_", " "), "share": v[measure]}
            for cls, v in b.get("classes", {}).items() for measure in ("flop_share", "time_share")]
    return pd.DataFrame(rows)


def fusion_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per sweep, workload, size and device: each add-one-in cell of a FUSION_TOGGLES toggle
    against the baseline, medians over repeats: memory-bound ms per step, ops per step, fused
    kernels per step, and the changes."""
    need = {"time_frac_memory_bound", "profiled_step_s", "ops_per_step", "config"}
    if df.empty or not need <= set(df.columns):
        return pd.DataFrame()
    done = df[(df["status"] == "finished") & df["ops_per_step"].notna()].copy()
    done["memory_bound_ms"] = 1e3 * done["time_frac_memory_bound"] * done["profiled_step_s"]
    if "fused_kernels_per_step" not in done:
        done["fused_kernels_per_step"] = np.nan
    keys = ["sweep", "workload", "size", "device"]
    med = done.groupby(keys + ["config"], as_index=False)[
        ["memory_bound_ms", "ops_per_step", "fused_kernels_per_step", "profiled_step_s"]].median()
    rows = []
    for _, g in med.groupby(keys):
        base = g[g["config"] == "baseline"]
        if base.empty:
            continue
        b = base.iloc[0]
        for toggle in FUSION_TOGGLES:
            cell = g[g["config"] == f"+{toggle}"]
            if cell.empty:
                continue
            c = cell.iloc[0]
            rows.append({**{k: b[k] for k in keys}, "toggle": toggle,
                         "memory_bound_ms_baseline": b["memory_bound_ms"], "memory_bound_ms_on": c["memory_bound_ms"],
                         "memory_bound_change_pct": 100 * (c["memory_bound_ms"] / b["memory_bound_ms"] - 1),
                         "ops_baseline": b["ops_per_step"], "ops_on": c["ops_per_step"],
                         "ops_change_pct": 100 * (c["ops_per_step"] / b["ops_per_step"] - 1),
                         "fused_kernels_on": c["fused_kernels_per_step"],
                         "profiled_step_ms_baseline": 1e3 * b["profiled_step_s"],
                         "profiled_step_ms_on": 1e3 * c["profiled_step_s"]})
    return pd.DataFrame(rows)
