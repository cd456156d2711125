"""`make perf` calibration and demo_reproducibility: does the verdict rule say the same thing twice,
and how often does it call a difference where there is none?

calibration: `python -m harness calibrate` (the baseline against itself in the interleaved
engine, 20 trials, one process each) in a fresh results folder: the false-positive rate of
single trials and of trials combined two by two (the demo's 2 processes). Target: <= 1 in 20.

demo_reproducibility: `python -m harness demo` twice, back to back, each in its own fresh
results folder: per toggle both verdicts, both speedups with their intervals, whether each lies
inside the other's interval, the interval half-widths (target <= 5%), what ended each process's
sampling, and each demo's wall time (target < 5 min).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from harness.bench.launch import run_harness
from results.analysis import calibration as cal
from results.analysis import speedups
from results.stats import interleaved


def _env(results: Path) -> dict:
    env = {**os.environ, "HARNESS_RESULTS": str(results)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def calibration(trials: int = 20) -> dict:
    with tempfile.TemporaryDirectory() as t:
        results = Path(t)
        run_harness(_env(results), 1, "calibrate", "--trials", str(trials))
        got = cal.latest(speedups.records_frame(results / "runs"))
    if got is None:
        raise RuntimeError("calibrate recorded no finished trial")
    return {**got, "line": cal.line(got), "target": "false-positive rate <= 1 in 20 at a 95% interval",
            "meets_target": got["false_positives"] <= max(1, trials // 20)}


def _demo(results: Path) -> tuple[dict, float]:
    t0 = time.monotonic()
    run_harness(_env(results), 1, "demo")
    wall = time.monotonic() - t0
    frame = speedups.records_frame(results / "runs")
    table = speedups.speedup_table(frame)
    out = {}
    for _, r in table[table["config"] != "baseline"].iterrows():
        if r.get("verdict") is None or r["verdict"] != r["verdict"]:
            continue
        on = r.get("verdict_on")
        v, lo, hi = speedups.verdict_figure(r)
        done = frame[(speedups.label_configs(frame) == r["config"]) & (frame["status"] == "finished")]
        out[r["config"]] = {"verdict": r["verdict"], "on": on, "speedup": round(v, 4),
                            "ci95": [round(lo, 4), round(hi, 4)], "half_width": round(interleaved.half_width(lo, hi, v), 4),
                            "processes_precision_reached": int(done["ab_precision_reached"].fillna(0).sum())
                            if "ab_precision_reached" in done else 0,
                            "processes": int(len(done)), "stability": r.get("stability")}
    return out, wall


def demo_reproducibility() -> dict:
    runs = []
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        for folder in (a, b):
            runs.append(_demo(Path(folder)))
    (first, wall1), (second, wall2) = runs
    rows = {}
    for config in first.keys() & second.keys():
        x, y = first[config], second[config]
        rows[config] = {"first": x, "second": y, "same_verdict": x["verdict"] == y["verdict"],
                        "each_inside_the_other": (y["ci95"][0] <= x["speedup"] <= y["ci95"][1]
                                                  and x["ci95"][0] <= y["speedup"] <= x["ci95"][1]),
                        "half_width_ok": max(x["half_width"], y["half_width"]) <= 0.05}
    return {"toggles": rows, "demo_wall_s": [round(wall1, 1), round(wall2, 1)],
            "same_verdicts": all(r["same_verdict"] for r in rows.values()),
            "all_inside_each_other": all(r["each_inside_the_other"] for r in rows.values()),
            "all_half_widths_ok": all(r["half_width_ok"] for r in rows.values()),
            "target": "same verdict on every toggle, each speedup inside the other's interval, half-width <= 5%, "
                      "demo < 300 s",
            "meets_target": all(r["same_verdict"] and r["each_inside_the_other"] and r["half_width_ok"]
                                for r in rows.values()) and max(wall1, wall2) < 300}
