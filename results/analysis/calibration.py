"""The A/A calibration: how often the verdict rule calls a difference where there is none.

`python -m harness calibrate` runs the baseline against itself in the interleaved engine
(harness/sweeps/calibrate.yaml: the same configuration on both sides, one process per trial).
Every trial's interval that excludes 1 is a false positive of the rule "faster/slower when the
95% interval excludes 1" on this machine; at a valid 95% interval the rate is at most 5%. Trials
are also combined two by two (in repeat order) as a sweep with two repeats combines its processes
(results/stats/interleaved.combine, and interleaved.direction where every process called it the
same way on its own), the rule the demo's verdicts use.

Read from the run frame (records or the store), so the sweep summary and the portal show the
same, latest calibration.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from results.record import schema
from results.record import sweep_ids
from results.stats import estimators
from results.stats import interleaved

NAME = "calibrate"   # the sweep name of calibration runs (harness/sweeps/calibrate.yaml)
MAX_RATE = 0.05      # a 95% interval's false-positive rate, at most


def latest(df: pd.DataFrame) -> dict | None:
    """The newest calibration sweep's figures, or None when there is none with a finished trial:
    sweep, workload, trials, false_positives, rate, pairs_of_two, pair_false_positives,
    median_half_width, precision_reached (trials that reached the target), ratios."""
    if df.empty or "sweep" not in df or "ab_ratio" not in df:
        return None
    sweep = sweep_ids.latest(df["sweep"].dropna().unique(), NAME)
    if sweep is None:
        return None
    g = df[(df["sweep"] == sweep) & (df["status"] == schema.FINISHED)].dropna(subset=["ab_ratio", "ab_lo", "ab_hi"])
    if g.empty:
        return None
    g = g.sort_values("repeat") if "repeat" in g else g
    est = list(zip(g["ab_ratio"].astype(float), g["ab_lo"].astype(float), g["ab_hi"].astype(float)))
    called = [estimators.verdict(lo, hi, r) != "within noise" for r, lo, hi in est]
    # the demo's rule on two processes (their combined interval, or the direction both called alone)
    pairs = [v for v in (interleaved.verdict(est[i:i + 2]) for i in range(0, len(est) - 1, 2)) if v is not None]
    called2 = [v != "within noise" for v, _ in pairs]
    hw = [interleaved.half_width(lo, hi, r) for r, lo, hi in est]
    return {"sweep": sweep, "workload": f"{g['workload'].iloc[0]}/{g['size'].iloc[0]}",
            "trials": len(est), "false_positives": int(sum(called)), "rate": float(np.mean(called)),
            "pairs_of_two": len(pairs), "pair_false_positives": int(sum(called2)),
            "median_half_width": float(np.median(hw)),
            "precision_reached": int(g.get("ab_precision_reached", pd.Series(0, index=g.index)).fillna(0).sum()),
            "ratios": [round(r, 4) for r, _, _ in est]}


def line(cal: dict | None) -> str:
    """The calibration in one line, for the sweep summary and Overview."""
    if cal is None:
        return "A/A calibration: none yet on this store (python -m harness calibrate)"
    verdict = "within" if cal["rate"] <= MAX_RATE else "ABOVE"
    two = (f"; {cal['pair_false_positives']} of {cal['pairs_of_two']} two-process combinations"
           if cal["pairs_of_two"] else "")
    return (f"A/A calibration {cal['sweep']} ({cal['workload']}): {cal['false_positives']} of {cal['trials']} "
            f"trials called a difference ({cal['rate']:.0%}, {verdict} the 5% a 95% interval allows){two}; "
            f"median half-width {cal['median_half_width']:.1%}")
