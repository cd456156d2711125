"""What a sweep prints at its end: the speedup table (results/analysis/speedups.speedup_table),
the attribution, parallel and geomean tables, the verdicts' basis, the latest A/A calibration,
and the one-line warning when a configuration was measured on a disturbed machine."""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from results.analysis.speedups import (VERDICT_ON, _labelled_groups, attribution_table, fmt_interval,
                                       geomean_table, parallel_table, records_frame, skipped, speedup_table,
                                       verdict_text)
from results.record import schema
from results.record.comm import COLLECTIVES
from results.stats import estimators as stats
from results.stats import stability


def _method_tag(r) -> str:
    """' (t)' for a t interval over few repeats, ' (i x2)' for interleaved blocks in 2 processes."""
    from results.stats import interleaved
    if r.get("paired_method") == stats.T_LOG:
        return " (t)"
    if r.get("paired_method") == interleaved.COMBINED:
        return f" (i x{int(r['processes'])})"
    return ""



def print_sweep_summary(runs_root: Path, sweep: str) -> pd.DataFrame:
    from rich.console import Console
    from rich.table import Table

    from results.record import sweep_ids

    from results.analysis import calibration
    df = records_frame(runs_root)
    for line in skipped(df):
        print(line, file=sys.stderr)
    cal = calibration.latest(df)
    if not df.empty and "sweep" in df:
        sweep = sweep_ids.resolve(df["sweep"].dropna().unique(), sweep) or sweep  # a name: its newest run
    df = df[df.get("sweep", pd.Series(dtype=str)) == sweep] if not df.empty else df
    table = speedup_table(df)
    t = Table(title=f"sweep {sweep}: speedup = median(baseline step) / median(config step), 95% bootstrap CI; "
                    "paired = what ran together: (i xP) = interleaved blocks in one process (Hodges-Lehmann "
                    "with its signed-rank CI), n block pairs over P processes (random effects); else the ratio "
                    "within each repeat, median with its "
                    f"order-statistics CI from {stats.MIN_ORDER_PAIRS} pairs, (t) = Student's t on the log ratios below")
    for col in ("workload", "size", "device", "config", "runs", "status", "median step (ms)",
                "speedup [95% CI]", "paired [95% CI] n=pairs", "verdict / reason", "stability"):
        t.add_column(col)
    for _, r in table.iterrows():
        sp = fmt_interval(r.get("speedup"), r.get("ci_lo"), r.get("ci_hi"))
        pair_txt = fmt_interval(r.get("paired_speedup"), r.get("paired_lo"), r.get("paired_hi"))
        ms = "" if pd.isna(r.get("median_step_ms")) else f"{r['median_step_ms']:.1f}"
        note = verdict_text(r)
        t.add_row(r["workload"], r["size"], r["device"], r["config"], str(r["runs"]), r["status"], ms, sp,
                  pair_txt and f"{pair_txt} n={int(r['pairs'])}" + _method_tag(r), note or r.get("reason", ""),
                  r.get("stability") if isinstance(r.get("stability"), str) else "")
    console = Console(width=240)  # wide enough that a reason stays on one line in a log
    console.print(t)
    if table.get("verdict_on") is not None and table["verdict_on"].notna().any():
        on = sorted(set(table["verdict_on"].dropna()))
        print("verdicts on: " + "; ".join(f"{k} = {VERDICT_ON[k]}" for k in on))
    if sweep_ids.name_of(sweep) != calibration.NAME:  # `harness calibrate` prints its own figure last
        print(calibration.line(cal))
    attr = attribution_table(df)
    if not attr.empty and "leave_one_out" in attr:
        a = Table(title="per-toggle attribution: add-one-in gain vs leave-one-out loss (differences = interactions)")
        for col in ("workload", "size", "device", "toggle", "add-one-in [95% CI]", "leave-one-out [95% CI]"):
            a.add_column(col)
        for _, r in attr.iterrows():
            a.add_row(r["workload"], r["size"], r["device"], r["toggle"],
                      fmt_interval(r.get("add_one_in"), r.get("add_lo"), r.get("add_hi")),
                      fmt_interval(r.get("leave_one_out"), r.get("loo_lo"), r.get("loo_hi")))
        console.print(a)
    par = parallel_table(df, table)
    if not par.empty:
        pt = Table(title="parallel strategies: bytes per step by collective (measured | theory), memory per rank")
        for col in ("workload", "config", "step (ms)", "speedup vs 1 rank", "collectives MiB/step (measured | theory)",
                    "= theory", "model state MiB/rank", "peak MiB/rank", "claim"):
            pt.add_column(col)
        for _, r in par.iterrows():
            comm = ", ".join(f"{k} {r[k + '_mib']:.3f} | {r[k + '_theory_mib']:.3f}" for k in COLLECTIVES
                             if k + "_mib" in r and not pd.isna(r[k + "_mib"]))
            pt.add_row(f"{r['workload']}/{r['size']}", r["config"], f"{r['median_step_ms']:.1f}",
                       fmt_interval(r.get("speedup"), r.get("ci_lo"), r.get("ci_hi")), comm, r["bytes_match_theory"],
                       f"{r.get('model_state_mib_per_rank', float('nan')):.2f}",
                       f"{r.get('peak_mib_per_rank', float('nan')):.0f}",
                       r["claim"] if isinstance(r.get("claim"), str) else "")
        console.print(pt)
    geo = geomean_table(df)
    if not geo.empty:
        gt = Table(title="geomean speedup across workloads")
        for col in ("device", "config", "workloads", "geomean [95% CI]"):
            gt.add_column(col)
        for _, r in geo.iterrows():
            gt.add_row(r["device"], r["config"], str(r["workloads"]), fmt_interval(r["geomean"], r["ci_lo"], r["ci_hi"]))
        console.print(gt)
    return table


def stability_warning(runs_root: Path, sweep: str) -> str | None:
    """The sweep's one-line warning when any configuration was measured disturbed (no bootstrap)."""
    df = records_frame(runs_root)
    if df.empty or "sweep" not in df:
        return None
    rows = []
    for key, g, samples in _labelled_groups(df[df["sweep"] == sweep]):
        for config, c in g[g["status"] == schema.FINISHED].groupby("config", sort=False):
            rows.append({"config": config, "stability": stability.verdict(c, samples.get(config)),
                         "interleaved": "ab_ratio" in c and bool(c["ab_ratio"].notna().all())})
    return stability.warning(pd.DataFrame(rows))
