"""`python -m harness compare BASE HEAD`: every series measured on both sides, HEAD's median step
time against BASE's, with asv's regression rule (results/analysis/trends.py). Exit 1 when any series
regressed, so a CI job can gate on it; 0 otherwise; 2 on a ref that names nothing.

Reads the record folders (results/runs), not MLflow: it works before or without an ingest."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from harness.config.run_config import UsageError
from results.analysis import speedups as report
from results.analysis import trends
from results.record.paths import REPO_ROOT

MARK = {trends.REGRESSION: "REGRESSION", trends.IMPROVEMENT: "improvement",
        trends.BEYOND_NOISE: "beyond the threshold, not significant", trends.SAME: "no change",
        trends.RERUN: "same commit: drift, not a regression"}


def main(base_ref: str, head_ref: str, root: Path) -> int:
    runs = root / "runs"
    frame = report.records_frame(runs) if runs.is_dir() else pd.DataFrame()
    for line in report.skipped(frame):
        print(line, file=sys.stderr)
    df = trends.labelled(frame)
    if df.empty:
        raise UsageError(f"no finished runs under {runs}: run a sweep first (make demo)")
    try:
        base, base_name = trends.resolve(df, base_ref, REPO_ROOT)
        head, head_name = trends.resolve(df, head_ref, REPO_ROOT)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if (base == head).all():
        raise UsageError(f"BASE and HEAD select the same runs ({base_name}): nothing to compare")
    table = trends.compare(df, base, head)
    print(f"BASE {base_name}: {int(base.sum())} runs\nHEAD {head_name}: {int(head.sum())} runs")
    if table.empty:
        print("no workload/size/device/configuration was measured on both sides: nothing compared")
        return 0
    print(f"rule (asv compare): a change counts when HEAD/BASE median step time is beyond the threshold either "
          f"way ({trends.RATIO:.2f}x, or the series' larger drift between reruns of one commit), Mann-Whitney U "
          f"p < {trends.P_MAX} over the steps, and the runs-then-steps bootstrap {trends.LEVEL:.0%} interval excludes 1")
    header = (f"{'series':<40} {'BASE ms':>9} {'HEAD ms':>9} {'HEAD/BASE [99% CI]':>24} {'p':>9} {'threshold':>9}"
              "  runs  verdict")
    print(header)
    for r in table.itertuples():
        series = f"{r.workload}/{r.size}/{r.device} {r.config}"
        ci = f"{r.ratio:.3f}x [{r.ratio_lo:.3f}, {r.ratio_hi:.3f}]"
        note = " (one run each: run-to-run variation unseen)" if r.base_runs == 1 and r.head_runs == 1 else ""
        print(f"{series:<40} {r.base_ms:>9.2f} {r.head_ms:>9.2f} {ci:>24} {r.p:>9.2g} {r.threshold:>8.2f}x  "
              f"{r.base_runs}/{r.head_runs}   {MARK[r.verdict]}{note}")
    bad = table[table["verdict"] == trends.REGRESSION]
    print(f"{len(bad)} regression(s) in {len(table)} series" if len(bad) else
          f"no regression in {len(table)} series")
    sys.stdout.flush()
    return 1 if len(bad) else 0
