"""Performance across commits, and the one rule that calls a change a regression.

The rule is asv's (`asv compare`, see ../shared/reference/parallelism.md §5): a change counts
only when the ratio of median step times is beyond 1.10 either way AND it is significant.
asv's significance test is a Mann–Whitney U test at p < 0.002 on the raw samples (here: every
steady step of every run), and, with few samples, non-overlapping 99% intervals. Steps of one
run share that run's machine state, so the U test alone would call a rerun on a busier machine
a regression; we therefore also require the two-level (runs, then steps) bootstrap 99% interval
of the ratio to exclude 1, which sees run-to-run variation whenever a side has 2+ runs.

Whole sweeps drift too: on the 2-core CI machine two sweeps of the same commit 20 s apart gave
13.3 and 11.4 ms median steps, every run of each. Where a series has been measured by 2+ sweeps
at one commit, that measured drift (largest sweep median over smallest) raises the 1.10 factor
for the series, as Conbench judges a change against the noise of earlier runs on the same
hardware. And BASE and HEAD at the same clean commit are a rerun: the difference is reported as
drift, never as a regression.

Used by `python -m harness compare BASE HEAD` and the portal's Trends page: both show the same
verdicts from the same records.
"""
from __future__ import annotations

import subprocess

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from results.analysis import speedups as report
from results.record import schema, sweep_ids
from results.stats import estimators as stats
from results.store.frames import step_samples

RATIO = 1.10      # asv compare's default factor
P_MAX = 0.002     # asv's Mann–Whitney U threshold
LEVEL = 0.99      # asv's interval for few samples
SERIES = ["workload", "size", "device", "config"]
REGRESSION, IMPROVEMENT, BEYOND_NOISE, SAME = "regression", "improvement", "not significant", "no change"
RERUN = "same commit: drift"


def labelled(df: pd.DataFrame) -> pd.DataFrame:
    """Finished runs with their configuration label (baseline, +channels_last, fsdp@2, ...)."""
    if df.empty or "status" not in df:
        return df.iloc[0:0]
    out = df.copy()
    if "config" not in out:
        out["config"] = report.label_configs(out)
    ids = out["sweep"].fillna("").astype(str)
    out["sweep_name"] = [sweep_ids.name_of(i) or i for i in ids]
    return out[out["status"] == schema.FINISHED]


def resolve(df: pd.DataFrame, ref: str, repo=None) -> tuple[pd.Series, str]:
    """Runs selected by REF: a sweep id (demo@20261201-...), a sweep name (its newest sweep),
    a git sha or prefix (4+ hex digits), or anything `git rev-parse` names (HEAD, main, a tag)
    in the repository at `repo`. Raises ValueError naming the valid choices."""
    sweeps = df["sweep"].fillna("").astype(str)
    if ref and (sweeps == ref).any():
        return sweeps == ref, f"sweep {ref}"
    names = df["sweep_name"]
    if ref and (names == ref).any():
        newest = df[names == ref].sort_values("started")["sweep"].iloc[-1]
        return sweeps == newest, f"sweep {newest} (newest of {ref})"
    shas = df["git_sha"].fillna("").astype(str)
    sha = ref.lower() if len(ref) >= 4 and all(c in "0123456789abcdef" for c in ref.lower()) else ""
    if not sha and repo is not None:
        sha = _rev_parse(ref, repo)
    if sha and shas.str.startswith(sha).any():
        hits = sorted(set(shas[shas.str.startswith(sha)]))
        if len(hits) > 1:
            raise ValueError(f"{ref!r} names {len(hits)} commits ({', '.join(h[:12] for h in hits)}): give more digits")
        return shas == hits[0], f"commit {hits[0][:12]}"
    known = sorted(set(names[names != ""]))
    commits = df.sort_values("started")["git_sha"].dropna().astype(str).str[:12].unique()[-5:]
    raise ValueError(f"{ref!r} is not a sweep or commit with finished runs here; sweeps: "
                     f"{', '.join(known) or 'none'}; newest commits: {', '.join(commits) or 'none'}")


def _rev_parse(ref: str, repo) -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def drift(g: pd.DataFrame, cache: dict | None = None) -> float:
    """One series' largest same-commit drift: over commits measured by 2+ sweeps, the largest
    ratio of one sweep's pooled median step time to another's (1.0 when never rerun)."""
    worst = 1.0
    for _, c in g.groupby("git_sha"):
        if c["sweep"].nunique() < 2:
            continue
        meds = [float(np.median(np.concatenate(r)))
                for r in (_samples(s, cache) for _, s in c.groupby("sweep")) if r]
        if len(meds) > 1:
            worst = max(worst, max(meds) / min(meds))
    return worst


def decide(base: list[list[float]], head: list[list[float]], threshold: float = RATIO) -> dict:
    """HEAD against BASE from raw step times grouped by run (seconds). `ratio` is HEAD's median
    step time over BASE's: above 1 is slower. The interval is the two-level bootstrap at LEVEL;
    `threshold` the factor a change must exceed (RATIO, or the series' measured drift)."""
    b, h = np.concatenate(base), np.concatenate(head)
    ratio = float(np.median(h) / np.median(b))
    p = float(mannwhitneyu(h, b, alternative="two-sided").pvalue)
    sp = stats.speedup(base, head, level=LEVEL)  # speedup of HEAD over BASE = 1 / time ratio
    lo, hi = 1 / sp["ci_hi"], 1 / sp["ci_lo"]
    beyond = ratio > threshold or ratio < 1 / threshold
    significant = p < P_MAX and (lo > 1 or hi < 1)
    if beyond and significant:
        verdict = REGRESSION if ratio > 1 else IMPROVEMENT
    else:
        verdict = BEYOND_NOISE if beyond else SAME
    return {"base_ms": float(np.median(b)) * 1e3, "head_ms": float(np.median(h)) * 1e3, "ratio": ratio,
            "ratio_lo": lo, "ratio_hi": hi, "p": p, "base_runs": len(base), "head_runs": len(head),
            "threshold": threshold, "verdict": verdict}


def _samples(g: pd.DataFrame, cache: dict | None = None) -> list[list[float]]:
    """Steady step times per run of `g`; `cache` (record dir -> samples) keeps one read per
    metrics file when drift, base, head and baselines look at the same runs."""
    cache = {} if cache is None else cache
    for d in g["record_dir"]:
        if d not in cache:
            cache[d] = step_samples(d)
    return [cache[d] for d in g["record_dir"] if cache[d]]


def _one_clean_commit(g: pd.DataFrame) -> str:
    shas = set(g["git_sha"].dropna().astype(str))
    dirty = "git_dirty" in g and g["git_dirty"].fillna(True).astype(bool).any()
    return shas.pop() if len(shas) == 1 and not dirty else ""


def compare(df: pd.DataFrame, base: pd.Series, head: pd.Series) -> pd.DataFrame:
    """One row per series (workload, size, device, configuration) present on both sides."""
    rows, cache = [], {}
    heads = {k: g for k, g in df[head].groupby(SERIES, dropna=False)}
    every = {k: g for k, g in df.groupby(SERIES, dropna=False)}
    for key, g in df[base].groupby(SERIES, dropna=False):
        if key not in heads:
            continue
        b, h = _samples(g, cache), _samples(heads[key], cache)
        if b and h:
            d = decide(b, h, max(RATIO, drift(every[key], cache)))
            sha = _one_clean_commit(g)
            if sha and sha == _one_clean_commit(heads[key]):
                d["verdict"] = RERUN
            rows.append({**dict(zip(SERIES, key)), **d})
    return pd.DataFrame(rows, columns=[*SERIES, "base_ms", "head_ms", "ratio", "ratio_lo", "ratio_hi", "p",
                                       "base_runs", "head_runs", "threshold", "verdict"])


def history(df: pd.DataFrame) -> pd.DataFrame:
    """Per series and commit, in the order commits were first measured: median step time (ms),
    per-run medians, speedup over the same commit's baseline, and the verdict against the
    previous commit measured for that series."""
    df = df[df["git_sha"].notna() & (df["git_sha"].astype(str) != "")]
    rows, cache = [], {}
    for key, g in df.groupby(SERIES[:3], dropna=False):
        order = g.groupby("git_sha")["started"].min().sort_values().index
        baseline = {sha: _samples(c, cache) for sha, c in g[g["config"] == "baseline"].groupby("git_sha")}
        for config, c in g.groupby("config"):
            threshold = max(RATIO, drift(c, cache))
            prev = None
            for sha in order:
                runs = _samples(c[c["git_sha"] == sha], cache)
                if not runs:
                    continue
                pooled = np.concatenate(runs)
                base = baseline.get(sha)
                row = {**dict(zip(SERIES[:3], key)), "config": config, "git_sha": sha,
                       "first_run": c[c["git_sha"] == sha]["started"].min(), "runs": len(runs),
                       "median_ms": float(np.median(pooled)) * 1e3,
                       "run_medians_ms": [float(np.median(r)) * 1e3 for r in runs],
                       "speedup": float(np.median(np.concatenate(base)) / np.median(pooled)) if base else np.nan,
                       "vs_previous": np.nan, "threshold": threshold, "verdict": "first"}
                if prev is not None:
                    d = decide(prev, runs, threshold)
                    row.update(vs_previous=d["ratio"], verdict=d["verdict"])
                rows.append(row)
                prev = runs
    return pd.DataFrame(rows, columns=[*SERIES, "git_sha", "first_run", "runs", "median_ms", "run_medians_ms",
                                       "speedup", "vs_previous", "threshold", "verdict"])
