"""Stability verdict: can a configuration's numbers be trusted, and if not, why.

Two kinds of trouble, told apart because they call for different answers:
- noisy: step times vary more than 10% within a run (CV_MAX) and nothing else is wrong. This VM's
  own noise does that with nothing else running; the figure is still measured, and its interval
  says how precisely. Reported, not warned about.
- disturbed: other processes took the CPUs, the hypervisor stole time, or repeat medians drifted
  apart. The figures are suspect: the sweep ends with a warning naming the cause.
The thresholds:
- CV_MAX: steady step times' standard deviation above 10% of their mean (pyperf's warning).
- OTHERS_MAX: other processes used more than 10% of the machine's CPU time during the run
  (harness/measure/machine_state.py). Our runs use every core; a competitor taking a tenth of them can
  move step times by that much, the same size as pyperf's threshold.
- STEAL_MAX: the hypervisor took more than 5% of CPU time (a noisy neighbour outside the VM).
- SPREAD_MAX: repeat medians differing by more than 1.10x (asv's factor for a real change):
  run-to-run noise as large as the effects being measured.
The reason names the cause in numbers ("other processes used 45% of the 2 CPUs during the run,
load average 4.5 at its end"), so the user knows what to fix.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from results.stats import estimators

CV_MAX, OTHERS_MAX, STEAL_MAX, SPREAD_MAX = 0.10, 0.10, 0.05, 1.10
HELD = "its verdict held in every process"  # a process effect on the size alone
STABLE, NOISY, DISTURBED = "stable", "noisy", "disturbed"
# the summary figures a verdict reads: a store (results/store/ingest.py) must carry them all, or the
# portal judges from fewer causes than the CLI does from the records
RUN_FIGURES = ("cv_step", "others_cpu_frac", "steal_frac", "cpu_per_wall", "cpus", "load_1m_start", "load_1m_end")


def _num(row: pd.Series, key: str) -> float | None:
    v = row.get(key)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(v) else v


def run_reasons(row: pd.Series) -> list[str]:
    """Why one run's numbers are suspect (empty: no sign of trouble, or nothing recorded)."""
    out = []
    others, cpus, load = _num(row, "others_cpu_frac"), _num(row, "cpus"), _num(row, "load_1m_end")
    if others is not None and others > OTHERS_MAX:
        out.append(f"other processes used {others:.0%} of the {int(cpus or 0) or '?'} CPUs during the run"
                   + (f", load average {load:.1f} at its end" if load is not None else ""))
    steal = _num(row, "steal_frac")
    if steal is not None and steal > STEAL_MAX:
        out.append(f"the hypervisor took {steal:.0%} of CPU time (steal)")
    cv = _num(row, "cv_step")
    if cv is not None and cv > CV_MAX:
        out.append(f"step times vary {cv:.0%} within a run (CV above pyperf's 10%)")
    return out


def verdict(rows: pd.DataFrame, runs: Sequence[Sequence[float]] | None = None) -> str:
    """'stable', 'noisy: <why>' (within-run variation alone: measured, see its interval) or
    'disturbed: <reasons>' (load, steal or drift between repeats: suspect) for one configuration:
    its runs' rows (summary columns) and, when given, their raw steady step times (for the
    spread of repeat medians)."""
    reasons: list[str] = []
    for key, prefix in (("others_cpu_frac", "other processes"), ("steal_frac", "the hypervisor"),
                        ("cv_step", "step times")):  # per cause, the figures of the run worst hit
        v = pd.to_numeric(rows[key], errors="coerce") if key in rows else pd.Series(dtype=float)
        if v.notna().any():
            reasons += [r for r in run_reasons(rows.loc[v.idxmax()]) if r.startswith(prefix)]
    meds = [float(np.median(r)) for r in runs or [] if len(r)]
    apart = _processes_apart(rows)
    if apart is not None:  # interleaved: drift between processes cancels in each one's ratio; what
        if apart:          # is left to disagree is the ratio itself
            reasons.append(apart)
    elif len(meds) > 1 and max(meds) / min(meds) > SPREAD_MAX:
        reasons.append(f"repeat medians differ by {max(meds) / min(meds) - 1:.0%} ({min(meds) * 1e3:.1f} to "
                       f"{max(meds) * 1e3:.1f} ms)")
    if not reasons:
        return STABLE
    disturbed = any(not r.startswith("step times") for r in reasons)
    return f"{DISTURBED if disturbed else NOISY}: " + "; ".join(reasons)


def _processes_apart(rows: pd.DataFrame) -> str | None:
    """For interleaved runs (ab_ratio [ab_lo, ab_hi] per process): the reason when two processes'
    speedups differ by more than SPREAD_MAX with intervals that do not overlap, else ""; None
    when the runs were not interleaved."""
    if "ab_ratio" not in rows:
        return None
    got = rows.dropna(subset=[c for c in ("ab_ratio", "ab_lo", "ab_hi") if c in rows])
    if got.empty or not {"ab_lo", "ab_hi"} <= set(got):
        return None
    r, lo, hi = (pd.to_numeric(got[c], errors="coerce") for c in ("ab_ratio", "ab_lo", "ab_hi"))
    i, j = r.idxmin(), r.idxmax()
    if r[j] / r[i] > SPREAD_MAX and hi[i] < lo[j]:
        said = (f"the speedup differs between processes ({r[i]:.2f}x [{lo[i]:.2f}, {hi[i]:.2f}] to "
                f"{r[j]:.2f}x [{lo[j]:.2f}, {hi[j]:.2f}]): the machine's state moved the effect itself")
        # each process's own verdict: where they agree, the size moved and the verdict did not (two
        # demos on an emulated-bf16 CPU: +amp 0.04x in one process, 0.05x in the next, "slower" in both)
        verdicts = {estimators.verdict(a, b, x) for x, a, b in zip(r, lo, hi)}
        return said + (f"; {HELD} ({verdicts.pop()})" if len(verdicts) == 1 else "")
    return ""


def kind(v) -> str:
    """stable, noisy or disturbed, from a verdict string (anything else: stable)."""
    v = v if isinstance(v, str) else ""
    return DISTURBED if v.startswith(DISTURBED) else NOISY if v.startswith(NOISY) else STABLE


def warning(table: pd.DataFrame) -> str | None:
    """One line for the end of a sweep when a configuration was measured on a disturbed machine,
    else None. Noisy-but-measured configurations get no warning: their intervals carry the noise."""
    if table.empty or "stability" not in table:
        return None
    if "interleaved" in table and "config" in table:
        # every verdict measured both sides in one process: the baseline's own runs set none of them
        others = table[table["config"] != "baseline"]
        if len(others) and others["interleaved"].all():
            table = others
    bad = table[[kind(v) == DISTURBED for v in table["stability"]]]
    if bad.empty:
        return None
    reasons = bad["stability"].iloc[0].removeprefix(f"{DISTURBED}: ").split("; ")
    first = next((r for r in reasons if not r.startswith("step times")), reasons[0])  # the disturbing cause, not the noise
    if all(_only_size_moved(v) for v in bad["stability"]):
        # only sizes moved between processes, every verdict held in each: say that, not "can't be trusted"
        return (f"warning: {len(bad)} of {len(table)} configurations measured on a disturbed machine ({first}): "
                "their sizes moved between processes but every verdict held in each; rerun on a quiet machine "
                "for the sizes")
    return (f"warning: {len(bad)} of {len(table)} configurations measured on a disturbed machine ({first}): these "
            "speedups can't be trusted; rerun on a quiet machine")


def _only_size_moved(v: str) -> bool:
    """A disturbed verdict whose one cause (beside noise) is a process effect on the speedup's
    size, with every process's own verdict the same (_processes_apart's HELD)."""
    causes = [r for r in v.removeprefix(f"{DISTURBED}: ").split("; ") if not r.startswith("step times")]
    return len(causes) == 2 and "differs between processes" in causes[0] and causes[1].startswith(HELD)
