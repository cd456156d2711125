"""Speedup tables from run frames: one row per (workload, size, device, configuration) with
the pooled median step time, speedup over the same sweep's baseline and its bootstrap 95% CI.
Used by the sweep's terminal summary and by the portal, so both show the same numbers."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from results import schema, stats
from results.store import step_samples

TOGGLES = ("dali", "channels_last", "cuda_graphs", "compile", "mpi_staging", "amp")
GROUP = ["workload", "size", "device"]


def records_frame(runs_root: Path) -> pd.DataFrame:
    """The same columns as load_runs(), read straight from the record folders (no MLflow)."""
    rows = []
    for d in sorted(p for p in Path(runs_root).glob("*") if p.is_dir()):
        try:
            rec = schema.read_record(d)
        except schema.RecordError as e:
            rows.append({"run_id": d.name, "status": "broken", "reason": str(e), "record_dir": str(d)})
            continue
        cfg = rec["config"]
        row = {"run_id": cfg["run_id"], "variant": cfg["variant"], "workload": cfg["workload"],
               "size": cfg["size"], "device": cfg["device"], "sweep": cfg.get("sweep", ""),
               "repeat": cfg.get("repeat", 0), "status": rec["status"]["status"],
               "reason": rec["status"].get("reason", ""), "record_dir": str(d),
               "git_sha": rec["env"].get("git_sha"), "host": rec["env"].get("hostname"),
               "started": pd.to_datetime(rec["status"]["started"], unit="s")}
        row.update({f"toggles.{k}": str(v) for k, v in cfg["toggles"].items()})
        row.update({k: v for k, v in rec["summary"].items() if isinstance(v, (int, float))})
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values("started", na_position="last").reset_index(drop=True) if "started" in df else df


def on_toggles(row: pd.Series) -> tuple[str, ...]:
    out = []
    for t in TOGGLES:
        v = str(row.get(f"toggles.{t}", "False"))
        if v not in ("False", "off", "nan", "None"):
            out.append(t if v == "True" else f"{t}={v}")
    return tuple(out)


def label_configs(df: pd.DataFrame) -> pd.Series:
    """baseline, +x (add-one-in), all_on, all_on-x (leave-one-out), or the joined toggles."""
    labels = pd.Series("", index=df.index, dtype=object)
    for _, g in df.groupby(GROUP, dropna=False):
        sets = {i: on_toggles(r) for i, r in g.iterrows()}
        runnable = [s for i, s in sets.items() if g.at[i, "status"] != schema.UNSUPPORTED]
        widest = max(runnable, key=len, default=())
        for i, s in sets.items():
            if not s:
                labels[i] = "baseline"
            elif len(s) == 1:
                labels[i] = f"+{s[0]}"
            elif s == widest:
                labels[i] = "all_on"
            elif len(s) == len(widest) - 1 and set(s) <= set(widest):
                labels[i] = f"all_on-{(set(widest) - set(s)).pop().split('=')[0]}"
            else:
                labels[i] = "+".join(s)
    return labels


def speedup_table(df: pd.DataFrame, n_boot: int = stats.N_BOOT) -> pd.DataFrame:
    """Rows: workload, size, device, config, runs, status, median_step_ms, speedup, ci_lo,
    ci_hi, verdict, reason. Speedups only for finished runs with a finished baseline."""
    if df.empty:
        return pd.DataFrame()
    df = df.assign(config=label_configs(df))
    out = []
    for key, g in df.groupby(GROUP, dropna=False):
        ok = g[g["status"] == schema.FINISHED]
        base_runs = [step_samples(d) for d in ok[ok["config"] == "baseline"]["record_dir"]]
        base_runs = [r for r in base_runs if r]
        for config, c in g.groupby("config", sort=False):
            row = dict(zip(GROUP, key), config=config, runs=len(c),
                       status=",".join(sorted(c["status"].unique())),
                       reason="; ".join(sorted({r for r in c["reason"].fillna("") if r}))[:200])
            runs = [step_samples(d) for d in c[c["status"] == schema.FINISHED]["record_dir"]]
            runs = [r for r in runs if r]
            if runs:
                row["median_step_ms"] = 1000 * float(pd.Series([x for r in runs for x in r]).median())
            if runs and base_runs:
                s = stats.speedup(base_runs, runs, n_boot=n_boot)
                row.update(speedup=s["speedup"], ci_lo=s["ci_lo"], ci_hi=s["ci_hi"],
                           verdict="baseline" if config == "baseline" else stats.verdict(s["ci_lo"], s["ci_hi"]))
            out.append(row)
    return pd.DataFrame(out)


def print_sweep_summary(runs_root: Path, sweep: str) -> pd.DataFrame:
    from rich.console import Console
    from rich.table import Table

    df = records_frame(runs_root)
    df = df[df.get("sweep", pd.Series(dtype=str)) == sweep] if not df.empty else df
    table = speedup_table(df)
    t = Table(title=f"sweep {sweep}: speedup = median(baseline step) / median(config step), 95% bootstrap CI")
    for col in ("workload", "size", "device", "config", "runs", "status", "median step (ms)",
                "speedup [95% CI]", "verdict / reason"):
        t.add_column(col)
    for _, r in table.iterrows():
        sp = "" if pd.isna(r.get("speedup")) else f"{r['speedup']:.2f}x [{r['ci_lo']:.2f}, {r['ci_hi']:.2f}]"
        ms = "" if pd.isna(r.get("median_step_ms")) else f"{r['median_step_ms']:.1f}"
        note = r.get("verdict") if isinstance(r.get("verdict"), str) else ""
        t.add_row(r["workload"], r["size"], r["device"], r["config"], str(r["runs"]), r["status"], ms, sp,
                  note or r.get("reason", ""))
    Console(width=200).print(t)
    return table
