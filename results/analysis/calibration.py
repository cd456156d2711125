"""The A/A calibration: how often the verdict rule calls a difference where there is none.

`python -m harness calibrate` runs the baseline against itself in the interleaved engine
(harness/sweeps/calibrate.yaml: the same configuration on both sides, one process per trial).
Every trial's interval that excludes 1 is a false positive of the rule "faster/slower when the
95% interval excludes 1" on this machine; at a valid 95% interval the rate is at most 5%. Trials
are also combined two by two (in repeat order) as a sweep with two repeats combines its processes
(results/stats/interleaved.combine, and interleaved.direction where every process called it the
same way on its own), the rule the demo's verdicts use; and grouped as the demo's process top-up
groups them (2 processes, one more while the combined interval is wider than +-5%, at most 4:
results/stats/interleaved.topped_up_groups).

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
# the demo's processes (harness/sweeps/demo.yaml: repeats, then top_up's precision and max_repeats;
# tests/test_top_up.py pins these to the file): trials are also grouped as its top-up groups them
DEMO_PROCESSES, DEMO_TOP_UP_PRECISION, DEMO_TOP_UP_MOST = 2, 0.05, 4
# Two valid 95% intervals of one quantity hold each other's estimate about 83% of the time, not
# 95%: the two estimates differ by N(0, 2 se^2) and a half-width is 1.96 se, so P(|Z| < 1.96 / sqrt 2)
# = 0.834 (Cumming & Maillardet 2006, "where will the next mean fall?"; less where the widths differ).
# It is what "two demos' speedups lie inside each other's intervals" can reach per toggle.
REPLICATION_CAPTURE = 0.834


def latest(df: pd.DataFrame) -> dict | None:
    """The newest calibration sweep's figures, or None when there is none with a finished trial:
    sweep, workload, trials, false_positives, rate, pairs_of_two, pair_false_positives,
    topped_groups, topped_false_positives, topped_sizes, median_half_width, precision_reached
    (trials that reached the target), ratios."""
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
    # the demo's whole rule: 2 processes, topped up to 4 while the combined interval is wider than +-5%
    groups = interleaved.topped_up_groups(est, DEMO_PROCESSES, DEMO_TOP_UP_PRECISION, DEMO_TOP_UP_MOST)
    called_g = [interleaved.verdict(g)[0] != "within noise" for g in groups]
    inside, pairs_of_groups = replication([interleaved.combine(g) for g in groups])
    hw = [interleaved.half_width(lo, hi, r) for r, lo, hi in est]
    return {"sweep": sweep, "workload": f"{g['workload'].iloc[0]}/{g['size'].iloc[0]}",
            "trials": len(est), "false_positives": int(sum(called)), "rate": float(np.mean(called)),
            "pairs_of_two": len(pairs), "pair_false_positives": int(sum(called2)),
            "topped_groups": len(groups), "topped_false_positives": int(sum(called_g)),
            "topped_sizes": [len(g) for g in groups],
            "replication_inside": inside, "replication_pairs": pairs_of_groups,
            "median_half_width": float(np.median(hw)),
            "precision_reached": int(g.get("ab_precision_reached", pd.Series(0, index=g.index)).fillna(0).sum()),
            "ratios": [round(r, 4) for r, _, _ in est]}


def replication(combined: list[dict | None]) -> tuple[int, int]:
    """(pairs whose intervals each hold the other's estimate, pairs) over every two of the demo
    groups' combined estimates (interleaved.combine): what two demos of an A/A toggle would show,
    to set beside REPLICATION_CAPTURE. Groups without an interval are left out."""
    c = [x for x in combined if x is not None]
    pairs = [(a, b) for i, a in enumerate(c) for b in c[i + 1:]]
    inside = sum(a["ci_lo"] <= b["ratio"] <= a["ci_hi"] and b["ci_lo"] <= a["ratio"] <= b["ci_hi"] for a, b in pairs)
    return inside, len(pairs)


def line(cal: dict | None) -> str:
    """The calibration in one line, for the sweep summary and Overview."""
    if cal is None:
        return "A/A calibration: none yet on this store (python -m harness calibrate)"
    verdict = "within" if cal["rate"] <= MAX_RATE else "ABOVE"
    two = (f"; {cal['pair_false_positives']} of {cal['pairs_of_two']} two-process combinations"
           if cal["pairs_of_two"] else "")
    sizes = cal.get("topped_sizes") or []
    how = (f"{min(sizes)}-{max(sizes)} processes, topped up as the demo is" if sizes and max(sizes) > min(sizes)
           else f"{sizes[0]} processes each, none topped up" if sizes else "")
    topped = f"; {cal['topped_false_positives']} of {cal['topped_groups']} demo groups ({how})" if sizes else ""
    n, k = cal.get("replication_pairs", 0), cal.get("replication_inside", 0)
    if n:  # records read back from a store written before this figure have neither key
        topped += (f"; their intervals held each other's estimate in {k} of {n} pairs ({k / n:.0%}; two valid "
                   f"95% intervals: about {REPLICATION_CAPTURE:.0%})")
    return (f"A/A calibration {cal['sweep']} ({cal['workload']}): {cal['false_positives']} of {cal['trials']} "
            f"trials called a difference ({cal['rate']:.0%}, {verdict} the 5% a 95% interval allows){two}{topped}; "
            f"median half-width {cal['median_half_width']:.1%}")
