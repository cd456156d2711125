"""Speedup tables from run frames: one row per (workload, size, device, configuration) with
the pooled median step time, speedup over the same sweep's baseline and its bootstrap 95% CI.
Used by the sweep's terminal summary and by the portal, so both show the same numbers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from results.record import labels
from results.stats import paired
from results.record import schema
from results.record.labels import config_label
from results.stats import stability
from results.stats import estimators as stats
from results.stats.paired import Runs
from results.stats.interleaved import EVERY_PROCESS
from results.record.comm import COLLECTIVES
from results.store.frames import step_samples
from results.record.toggles import NAMES

GROUP = ["workload", "size", "device"]


def records_frame(runs_root: Path) -> pd.DataFrame:
    """The same columns as load_runs(), read straight from the record folders (no MLflow)."""
    rows = []
    for d, rec, problem in schema.scan_records(runs_root):
        if rec is None:
            rows.append({"run_id": d.name, "status": "broken", "reason": problem, "record_dir": str(d)})
            continue
        cfg = rec["config"]
        if cfg.get("kind", "run") != "run":  # a collectives or profile record is not a training run
            continue                          # (load_runs leaves them out too: its filter is kind = run)
        row = {"run_id": cfg["run_id"], "variant": cfg["variant"], "workload": cfg["workload"],
               "size": cfg["size"], "device": cfg["device"], "sweep": cfg.get("sweep", ""),
               "repeat": cfg.get("repeat", 0), "status": rec["status"]["status"],
               "reason": rec["status"].get("reason", ""), "record_dir": str(d),
               "git_sha": rec["env"].get("git_sha"), "git_dirty": rec["env"].get("git_dirty"),
               "host": rec["env"].get("hostname"),
               "started": pd.to_datetime(rec["status"]["started"], unit="s", utc=True)}  # UTC, as load_runs
        for section in ("toggles", "parallel"):  # optional in the schema; anything but a mapping adds nothing
            part = cfg.get(section)
            row.update({f"{section}.{k}": str(v) for k, v in part.items()} if isinstance(part, dict) else {})
        row["ranks"] = cfg.get("ranks", 1)
        row.update({k: v for k, v in rec["summary"].items() if isinstance(v, (int, float))})
        rows.append(row)
    df = pd.DataFrame(rows)
    return df.sort_values("started", na_position="last").reset_index(drop=True) if "started" in df else df


def skipped(df: pd.DataFrame) -> list[str]:
    """One 'skipped: <folder>: <what is wrong>' line per malformed record of a records frame:
    every walk over the records says what it left out, and goes on with the rest."""
    if df.empty or "status" not in df:
        return []
    bad = df[df["status"] == "broken"]
    return [f"skipped: {d}: {r.split(': ', 1)[-1]}" for d, r in zip(bad["record_dir"], bad["reason"])]


def toggle_sets(df: pd.DataFrame) -> pd.Series:
    """Per row, the toggles that are on, in declaration order (results/record/toggles.py): ('channels_last', 'amp=bf16'), ...
    Column-wise (a row loop costs seconds at 10,000 runs)."""
    cols = []
    for t in NAMES:
        v = df[f"toggles.{t}"].fillna("False").astype(str) if f"toggles.{t}" in df else pd.Series("False", index=df.index)
        on = ~v.isin(["False", "off", "nan", "None"])
        cols.append(np.where(on, np.where(v == "True", t, t + "=" + v), ""))
    return pd.Series([tuple(x for x in row if x) for row in zip(*cols)] if len(df) else [],
                     index=df.index, dtype=object)


def strategy_labels(df: pd.DataFrame) -> pd.Series:
    """Per row, the parallel strategy and rank count ("fsdp@2", "ddp@4", "tp2+sp@2") of a
    parallel cell, else "": a cell whose parallel section is not the default, or that runs
    on more ranks than the fewest in its workload/size/device group (the one-rank baseline)."""
    def col(name: str, default: str) -> pd.Series:
        if name not in df:
            return pd.Series(default, index=df.index, dtype=object)
        return df[name].fillna(default).astype(str).replace({"nan": default, "None": default, "": default})
    if df.empty:
        return pd.Series(dtype=object)
    ranks = pd.to_numeric(df["ranks"], errors="coerce").fillna(1).astype(int) if "ranks" in df else \
        pd.Series(1, index=df.index)
    fewest = ranks.groupby([df[c].astype(str) for c in GROUP]).transform("min")
    pp = [col(f"parallel.{k}", d) for k, d in (("pp", "1"), ("pp_virtual", "1"), ("pp_schedule", "1f1b"),
                                                ("microbatches", "4"), ("pp_split", ""), ("ep", "1"),
                                                ("batch_split", ""), ("cp", "1"), ("recompute", "none"),
                                                ("jobs", "1"))]
    keys = pd.Series(list(zip(col("parallel.data", "ddp"), col("parallel.tp", "1"), col("parallel.sp", "False"),
                              *pp, ranks, ranks > fewest)), index=df.index)
    return keys.map({k: _strategy_label(*k) for k in keys.unique()})  # a handful of distinct cells


def _strategy_label(data: str, tp: str, sp: str, pp: str, pp_virtual: str, pp_schedule: str, microbatches: str,
                    pp_split: str, ep: str, batch_split: str, cp: str, recompute: str, jobs: str, ranks: int,
                    more_ranks: bool) -> str:
    if (data == "ddp" and tp == "1" and pp == "1" and ep == "1" and cp == "1" and recompute == "none"
            and jobs == "1" and not batch_split and not more_ranks):
        return ""
    name = labels.strategy_name(data, int(tp), sp == "True", int(pp), int(pp_virtual), pp_schedule,
                                int(microbatches), pp_split, int(ep), batch_split, int(cp), recompute, int(jobs))
    return f"{name}@{ranks}"


def label_configs(df: pd.DataFrame) -> pd.Series:
    """baseline, +x (add-one-in), all_on, all_on-x (leave-one-out), or the joined toggles;
    parallel cells by strategy and ranks (fsdp@2), with their toggles after a '+'."""
    labels = pd.Series("", index=df.index, dtype=object)
    all_sets = toggle_sets(df)
    strategies = strategy_labels(df)
    for _, g in df.groupby(GROUP, dropna=False):
        sets = all_sets[g.index]
        runnable = sets[g["status"] != schema.UNSUPPORTED]
        widest = max(runnable, key=len, default=())
        for i, s in sets.items():
            labels[i] = config_label(s, widest)
    on = strategies != ""
    labels[on] = [config_label(s, (), st) for st, s in zip(strategies[on], all_sets[on])]
    return labels


def _finished_samples(g: pd.DataFrame) -> dict[str, Runs]:
    """config label -> raw steady step times per finished run (fail_accuracy etc. excluded)."""
    out: dict[str, Runs] = {}
    for config, c in g[g["status"] == schema.FINISHED].groupby("config", sort=False):
        sweeps = c["sweep"] if "sweep" in c else pd.Series("", index=c.index)
        repeats = c["repeat"] if "repeat" in c else pd.Series(0, index=c.index)
        got = [(r, (str(sw), str(rep))) for r, sw, rep in
               zip((step_samples(d) for d in c["record_dir"]), sweeps, repeats) if r]
        if got:
            out[config] = Runs([r for r, _ in got], [k for _, k in got])
    return out


def _labelled_groups(df: pd.DataFrame):
    """(group key, group rows with a `config` label, finished samples per config) per
    workload/size/device."""
    df = df.assign(config=label_configs(df))
    for key, g in df.groupby(GROUP, dropna=False):
        yield key, g, _finished_samples(g)


def speedup_table(df: pd.DataFrame, n_boot: int = stats.N_BOOT) -> pd.DataFrame:
    """Rows: workload, size, device, config, runs, status, median_step_ms, speedup, ci_lo,
    ci_hi, verdict, reason, stability, and beside the pooled ratio of medians the paired
    speedup (paired_speedup, paired_lo, paired_hi over `pairs` repeats). Speedups only for
    finished runs with a finished baseline."""
    if df.empty:
        return pd.DataFrame()
    out = []
    for key, g, samples in _labelled_groups(df):
        base_runs = samples.get("baseline")
        for config, c in g.groupby("config", sort=False):
            row = dict(zip(GROUP, key), config=config, runs=len(c),
                       status=",".join(sorted(c["status"].unique())),
                       reason="; ".join(sorted({r for r in c["reason"].fillna("") if r}))[:200])
            runs = samples.get(config)
            if runs:
                row["median_step_ms"] = 1000 * float(pd.Series([x for r in runs for x in r]).median())
                row["stability"] = stability.verdict(c[c["status"] == schema.FINISHED], runs)
            if runs and base_runs:
                sp = stats.speedup(base_runs, runs, n_boot=n_boot)
                row.update(speedup=sp["speedup"], ci_lo=sp["ci_lo"], ci_hi=sp["ci_hi"])
                if config != "baseline":
                    row.update(paired.paired_speedup(base_runs, runs, n_boot=n_boot) or {})
            if config != "baseline":
                row.update(paired.interleaved_speedup(c[c["status"] == schema.FINISHED]) or {})
            row.update(_verdict(row, config))
            out.append(row)
    table = pd.DataFrame(out)
    for col in SPEEDUP_FIGURES:  # present even when no configuration finished (an all-failed sweep)
        if col not in table:
            table[col] = float("nan") if col not in TEXT_FIGURES else None
    return table


SPEEDUP_FIGURES = ("median_step_ms", "speedup", "ci_lo", "ci_hi", "verdict", "verdict_on",
                   "paired_speedup", "paired_lo", "paired_hi", "pairs", "paired_method", "processes", "process_tau",
                   "process_direction")
TEXT_FIGURES = ("verdict", "paired_method", "verdict_on", "process_direction")
VERDICT_ON = {"interleaved": "in-process interleaved blocks, combined over processes",
              EVERY_PROCESS: "each process's own interleaved interval called it the same way (their sizes differ, "
                             "so the combined interval holds 1: the size is uncertain, the direction is not)",
              "paired": "separate processes paired by repeat",
              "pooled": "pooled medians (one run a side: no pairs)"}


def _verdict(row: dict, config: str) -> dict:
    """The verdict on the best interval the configuration has: the interleaved one (both sides in
    one process), else the per-repeat paired one (2+ pairs: valid at its count), else the pooled
    bootstrap. Which one is named in `verdict_on`. Where the interleaved interval holds 1 but every
    process called the same direction on its own (results/stats/interleaved.direction), the verdict
    is that direction, on EVERY_PROCESS."""
    if config == "baseline":
        return {"verdict": "baseline"} if "speedup" in row else {}
    for on, mid, lo, hi in (("interleaved", "paired_speedup", "paired_lo", "paired_hi"),
                            ("paired", "paired_speedup", "paired_lo", "paired_hi"), ("pooled", "speedup", "ci_lo", "ci_hi")):
        if on == "interleaved" and not row.get("processes"):
            continue
        lo_v, hi_v = row.get(lo), row.get(hi)
        if lo_v is not None and hi_v is not None and np.isfinite(lo_v) and np.isfinite(hi_v):
            if on == "interleaved" and row.get("process_direction"):  # set where interleaved.verdict says so
                return {"verdict": row["process_direction"], "verdict_on": EVERY_PROCESS}
            return {"verdict": stats.verdict(lo_v, hi_v, row[mid]), "verdict_on": on}
    return {}


def verdict_text(row) -> str:
    """The verdict as the summary and Overview print it: 'faster in every process' where only the
    direction was called (EVERY_PROCESS), else the verdict itself ('' without one)."""
    v = row.get("verdict")
    if not isinstance(v, str):
        return ""
    return f"{v} in every process" if row.get("verdict_on") == EVERY_PROCESS else v


def repeat_speedups(df: pd.DataFrame) -> pd.DataFrame:
    """One row per finished run: the pooled baseline median step time over the run's own median,
    the dots drawn beside each CI so that run-to-run noise is visible."""
    out = []
    for key, _, samples in _labelled_groups(df) if not df.empty else ():
        if not samples.get("baseline"):
            continue
        ref = float(pd.Series([x for r in samples["baseline"] for x in r]).median())
        for config, runs in samples.items():
            out += [dict(zip(GROUP, key), config=config, speedup=ref / float(pd.Series(r).median())) for r in runs if r]
    return pd.DataFrame(out, columns=[*GROUP, "config", "speedup"])


def attribution_table(df: pd.DataFrame, n_boot: int = stats.N_BOOT) -> pd.DataFrame:
    """Per toggle: add-one-in gain (+t over baseline) beside leave-one-out loss (all_on over
    all_on-t). When they differ, the toggle interacts with the others."""
    if df.empty:
        return pd.DataFrame()
    out = []
    for key, _, samples in _labelled_groups(df):
        toggles = sorted({c.split("-", 1)[1] for c in samples if c.startswith("all_on-")} |
                         {c[1:].split("=")[0] for c in samples if c.startswith("+")})
        for t in toggles:
            row = dict(zip(GROUP, key), toggle=t)
            plus = next((c for c in samples if c.startswith("+") and c[1:].split("=")[0] == t), None)
            if plus and "baseline" in samples:
                sp = stats.speedup(samples["baseline"], samples[plus], n_boot=n_boot)
                row.update(add_one_in=sp["speedup"], add_lo=sp["ci_lo"], add_hi=sp["ci_hi"])
            if f"all_on-{t}" in samples and "all_on" in samples:
                sp = stats.speedup(samples[f"all_on-{t}"], samples["all_on"], n_boot=n_boot)
                row.update(leave_one_out=sp["speedup"], loo_lo=sp["ci_lo"], loo_hi=sp["ci_hi"])
            out.append(row)
    return pd.DataFrame(out)


def geomean_table(df: pd.DataFrame, n_boot: int = stats.N_BOOT) -> pd.DataFrame:
    """Per device and config: geomean speedup across workloads (each at its own size), with CI."""
    if df.empty:
        return pd.DataFrame()
    pairs: dict[tuple[str, str], list] = {}
    for (_, _, device), _, samples in _labelled_groups(df):
        for config, runs in samples.items():
            if config != "baseline" and "baseline" in samples:
                pairs.setdefault((device, config), []).append((samples["baseline"], runs))
    out = []
    for (device, config), p in pairs.items():
        if len(p) > 1:
            g = stats.geomean_speedup(p, n_boot=n_boot)
            out.append({"device": device, "config": config, "workloads": g["n"], "geomean": g["speedup"],
                        "ci_lo": g["ci_lo"], "ci_hi": g["ci_hi"]})
    return pd.DataFrame(out)


def ttt_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per time-to-train campaign (a `ttt-...` sweep): the MLPerf olympic score."""
    from results.stats import scoring
    if df.empty or "mode" not in df:
        return pd.DataFrame()
    ttt = df[(df["mode"] == "ttt") & df["sweep"].fillna("").str.startswith("ttt-")]
    out = []
    for sweep, g in ttt.groupby("sweep"):
        ok = (g["status"] == schema.FINISHED) & (g.get("converged", pd.Series(0, index=g.index)) == 1)
        times = [t if good else None for t, good in zip(g["train_time_s"], ok)]
        wl = g["workload"].iloc[0]
        need = pd.to_numeric(g.get("mlperf_required_runs", pd.Series(dtype=float)), errors="coerce").dropna()
        sc = scoring.olympic(times, int(need.iloc[0]) if len(need) else scoring.DEFAULT_REQUIRED)
        out.append({"campaign": sweep, "workload": wl, "size": g["size"].iloc[0], "device": g["device"].iloc[0],
                    "ranks": g.get("ranks", pd.Series([1])).iloc[0],
                    "score_min": None if sc.score_s is None else sc.score_s / 60,
                    "runs_used": f"{sc.used} of {sc.runs}", "note": sc.note or "scored"})
    return pd.DataFrame(out)


MATCH_TOL = 0.01  # measured bytes per step vs the analytic volume: deterministic, so 1% is generous


def parallel_table(df: pd.DataFrame, speedups: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per parallel cell (strategy@ranks) of each workload/size/device: step time and
    speedup over the one-rank baseline (same global batch), bytes per step by collective
    measured beside the analytic volume, model-state and peak memory per rank, and the
    verdicts on the textbook claims (bytes = theory; FSDP's state 1/n of DDP's, ZeRO-1's
    optimizer state 1/n)."""
    if df.empty:
        return pd.DataFrame()
    df = df.assign(config=label_configs(df)) if "config" not in df else df
    cells = df[df["config"].astype(str).str.contains("@") & (df["status"] == schema.FINISHED)]
    if cells.empty:
        return pd.DataFrame()
    speedups = speedup_table(df) if speedups is None else speedups
    metrics = [c for c in cells.columns if c.startswith(("comm_", "mem_"))]
    med = cells.groupby([*GROUP, "config"], as_index=False)[metrics + ["median_step_s"]].median(numeric_only=True)
    rows = []
    for _, r in med.iterrows():
        key = {k: r[k] for k in (*GROUP, "config")}
        row = {**key, "runs": int(((cells[list(key)] == pd.Series(key)).all(axis=1)).sum()),
               "median_step_ms": 1000 * r["median_step_s"]}
        sp = speedups[(speedups[list(key)] == pd.Series(key)).all(axis=1)] if not speedups.empty else speedups
        if not sp.empty and "speedup" in sp:
            row.update(speedup=sp["speedup"].iloc[0], ci_lo=sp["ci_lo"].iloc[0], ci_hi=sp["ci_hi"].iloc[0])
        worst = 0.0
        for kind in COLLECTIVES:
            m, a = r.get(f"comm_{kind}_bytes_per_step"), r.get(f"comm_{kind}_analytic_bytes_per_step")
            m = 0.0 if pd.isna(m) else m
            a = 0.0 if pd.isna(a) else a
            if m or a:
                row[f"{kind}_mib"], row[f"{kind}_theory_mib"] = m / 2 ** 20, a / 2 ** 20
                worst = max(worst, abs(m - a) / max(a, 1.0))
        row["bytes_match_theory"] = "yes" if worst <= MATCH_TOL else f"no ({worst:.1%} off)"
        act = r.get("mem_activation_bytes_per_block")
        if act is not None and not pd.isna(act):  # what one forward keeps per block (recomputation, cp)
            row["activation_mib_per_block"] = act / 2 ** 20
        for part in ("model_state", "params", "grads", "optimizer", "peak", "peak_rss"):
            v = r.get(f"mem_{part}_bytes_per_rank")
            if v is not None and not pd.isna(v):
                row[f"{part}_mib_per_rank"] = v / 2 ** 20
        rows.append(row)
    out = pd.DataFrame(rows)
    # the sharding claims, against DDP at the same rank count
    for i, row in out.iterrows():
        strategy, _, ranks = str(row["config"]).partition("@")
        ddp = out[(out[GROUP] == row[GROUP]).all(axis=1) & (out["config"] == f"ddp@{ranks}")]
        if ddp.empty or strategy not in ("fsdp", "zero1"):
            continue
        part = "model_state" if strategy == "fsdp" else "optimizer"
        ratio = row[f"{part}_mib_per_rank"] / ddp[f"{part}_mib_per_rank"].iloc[0]
        out.loc[i, "claim"] = (f"{'model state' if part == 'model_state' else 'optimizer state'} per rank = "
                               f"{ratio:.3f} of DDP's (theory 1/{ranks} = {1 / int(ranks):.3f})")
    return out


def verdict_line(r) -> str:
    """One parallel_table row in words: 'fsdp@2: 75.2 ms/step, 0.50x [0.40, 0.61] vs 1 rank;
    bytes per step = theory: yes; model state per rank = 0.500 of DDP's (...)'."""
    parts = [f"{r['config']}: {r['median_step_ms']:.1f} ms/step"]
    if not pd.isna(r.get("speedup")):
        parts[0] += f", {fmt_interval(r['speedup'], r['ci_lo'], r['ci_hi'])} vs 1 rank"
    parts.append(f"bytes per step = theory: {r['bytes_match_theory']}")
    if isinstance(r.get("claim"), str):
        parts.append(r["claim"])
    return "; ".join(parts)


def fmt_interval(v, lo, hi) -> str:
    if pd.isna(v):
        return ""
    return f"{v:.2f}x [no interval]" if pd.isna(lo) else f"{v:.2f}x [{lo:.2f}, {hi:.2f}]"


def verdict_figure(row) -> tuple[float, float, float]:
    """(speedup, ci_lo, ci_hi) of the figure a speedup_table row's verdict is on: the paired one
    (interleaved or by repeat) where `verdict_on` says so, else the pooled one."""
    cols = ("paired_speedup", "paired_lo", "paired_hi") if row.get("verdict_on") in ("interleaved", "paired", EVERY_PROCESS) \
        else ("speedup", "ci_lo", "ci_hi")
    return tuple(float(row[c]) for c in cols)


def verdict_figures(t: pd.DataFrame) -> pd.DataFrame:
    """The speedup table with each row's speedup and interval replaced by verdict_figure's."""
    t = t.copy()
    if len(t):
        t[["speedup", "ci_lo", "ci_hi"]] = [verdict_figure(r) for _, r in t.iterrows()]
    return t
