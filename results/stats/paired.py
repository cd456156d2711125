"""Speedups from paired runs: a configuration's run and the baseline run of the same repeat.

Why: a speedup as the ratio of pooled medians (results/stats.speedup) mixes quiet and loaded
runs when the load on the machine comes and goes during a sweep; the ratio within each repeat
cancels load that lasts across the pair's few minutes (pyperf's advice for comparisons on a
noisy machine is the same: compare what ran together). `make perf` (paired_speedup) measures
which of the two is closer to the unloaded answer under a background burner.
"""
from __future__ import annotations

import numpy as np

from results.stats import estimators as stats


class Runs(list):
    """Raw steady step times per finished run, with each run's pair key (sweep, repeat): the
    sweep runs every configuration of one repeat back to back (harness/sweep.interleave), so
    runs sharing a key were measured minutes apart at most."""

    def __init__(self, runs: list[list[float]], keys: list[tuple]):
        super().__init__(runs)
        self.keys = keys


def paired_speedup(base: Runs, config: Runs, n_boot: int = stats.N_BOOT) -> dict | None:
    """Per repeat, baseline run's median step / the same repeat's config run's median step,
    summarised over the repeats with an interval valid at their count (results/stats/estimators
    paired_ratio: the median with its order-statistics interval from 6 pairs, t on log ratios
    below, the method named): load that
    comes and goes between repeats hits both runs of a pair and cancels in their ratio, where
    the pooled ratio of medians mixes quiet and loaded runs. None without a shared repeat."""
    b = {k: float(np.median(r)) for k, r in zip(base.keys, base)}
    pairs = [(b[k], float(np.median(r))) for k, r in zip(config.keys, config) if k in b]
    if not pairs:
        return None
    got = stats.paired_ratio([p[0] for p in pairs], [p[1] for p in pairs], n_boot=n_boot)
    return {"paired_speedup": got["ratio"], "paired_lo": got["ci_lo"], "paired_hi": got["ci_hi"],
            "pairs": len(pairs), "paired_method": got["method"]}


def interleaved_speedup(rows) -> dict | None:
    """The in-process interleaved estimates of a configuration's finished runs (one per process:
    ab_ratio [ab_lo, ab_hi] over ab_pairs block pairs, harness/run/interleave.py), combined over
    the processes by results/stats/interleaved.combine, and where the verdict rests on the
    direction every process called (interleaved.verdict), that direction (else None); None when
    no run was interleaved. Fills the paired
    columns, since both are ratios of what ran together."""
    from results.stats import interleaved
    if "ab_ratio" not in rows:
        return None
    got = rows.dropna(subset=["ab_ratio"])
    if got.empty:
        return None
    lo = got["ab_lo"] if "ab_lo" in got else np.nan
    hi = got["ab_hi"] if "ab_hi" in got else np.nan
    est = list(zip(got["ab_ratio"].astype(float), np.broadcast_to(np.asarray(lo, dtype=float), len(got)),
                   np.broadcast_to(np.asarray(hi, dtype=float), len(got))))
    c = interleaved.combine(est)
    if c is None:
        return None
    called, basis = interleaved.verdict(est)
    return {"paired_speedup": c["ratio"], "paired_lo": c["ci_lo"], "paired_hi": c["ci_hi"],
            "pairs": int(got["ab_pairs"].sum()) if "ab_pairs" in got else 0, "paired_method": c["method"],
            "processes": c["processes"], "process_tau": c["tau"],
            "process_direction": called if basis == interleaved.EVERY_PROCESS else None}
