"""Statistics of the interleaved A/B engine (harness/run/interleave.py): block-pair ratios, the
precision target that ends sampling, and the combination of several processes' estimates.

Why blocks and pairs: a VM's speed drifts over seconds to minutes (other tenants, frequency,
page cache), so the ratio of two sides measured minutes apart carries that drift. Measured in
alternating blocks of >= ~0.2 s (A B | B A | A B ...: Google Benchmark's random interleaving,
the reference-vs-ours step ratios of kernel comparators), each pair's ratio sees the same
machine; the ABBA order cancels a linear drift inside the pairs as well.

Per process: the pairs' ratios (baseline block's median step / the variant block's, > 1 = the
variant is faster) summarised by results/stats/estimators.hodges_lehmann_ratio (from 6 pairs the
Hodges-Lehmann estimate of the log ratio with its signed-rank 95% interval; t on the log ratios
below). Sampling stops at the first pair after MIN_PAIRS
where the interval's half-width is at most the target (criterion samples to a time, pyperf
calibrates its loops; this samples to a precision), or when the time budget is spent.

Across processes (separate-process repeats, kept so that an effect of the process itself -
allocator layout, thread placement - still shows): a random-effects combination of the
processes' log ratios (DerSimonian and Laird 1986), each weighted by its own precision plus the
between-process variance tau^2. When the processes agree (tau^2 = 0) that is the fixed-effect
(inverse-variance) interval; when they disagree, tau^2 widens the interval and is reported as a
process effect. With 2 or 3 processes tau^2 is a rough estimate (the interval is then an
approximation, not exact): the A/A calibration (`python -m harness calibrate`) measures how often
the whole rule calls a difference where there is none.

When processes disagree on the size but each one's own interval calls the same direction, the
random-effects interval may still hold 1; `direction` then says which way every process went
(an intersection-union test, below), and the verdict is on that (results/analysis/speedups).
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

from results.stats import estimators

MIN_PAIRS = 10          # block pairs before the precision target may end sampling (>= MIN_ORDER_PAIRS)
Z95 = NormalDist().inv_cdf(0.975)  # the two-sided 95% normal quantile, 1.95996
COMBINED = "interleaved, random effects over processes"
EVERY_PROCESS = "every process"  # the basis of a verdict called by `direction`


def abba_first(pair: int) -> str:
    """Which side opens block pair `pair`: A B | B A | A B ... ("A" = baseline)."""
    return "A" if pair % 2 == 0 else "B"


def half_width(lo: float, hi: float, ratio: float) -> float:
    """The interval's half-width relative to its estimate (0.03 = +-3%); inf without one."""
    if not all(map(math.isfinite, (lo, hi, ratio))) or ratio <= 0:
        return math.inf
    return (hi - lo) / (2 * ratio)


def summarise(ratios: Sequence[float]) -> dict:
    """The pairs' ratios so far: ratio, ci_lo, ci_hi, method, half_width, pairs."""
    s = estimators.hodges_lehmann_ratio(list(ratios))
    s["half_width"] = half_width(s["ci_lo"], s["ci_hi"], s["ratio"])
    s["pairs"] = len(ratios)
    return s


def precise_enough(ratios: Sequence[float], target: float) -> bool:
    """The stop rule: at least MIN_PAIRS pairs and the 95% interval's half-width <= target."""
    return len(ratios) >= MIN_PAIRS and summarise(ratios)["half_width"] <= target


def _log_se(lo: float, hi: float) -> float:
    """A log ratio's standard error from its 95% interval (its width on the log scale / 2z)."""
    return (math.log(hi) - math.log(lo)) / (2 * Z95)


def combine(estimates: Sequence[tuple[float, float, float]]) -> dict | None:
    """Random-effects combination of per-process (ratio, ci_lo, ci_hi): ratio, ci_lo, ci_hi,
    method, processes, tau (between-process sd of the log ratio; 0 = the processes agree),
    process_effect (bool). Processes without a finite interval are left out; None if none is left."""
    ok = [(r, lo, hi) for r, lo, hi in estimates
          if all(map(math.isfinite, (r, lo, hi))) and 0 < lo <= r <= hi]
    if not ok:
        return None
    y = np.array([math.log(r) for r, _, _ in ok])
    se = np.array([max(_log_se(lo, hi), 1e-6) for _, lo, hi in ok])
    k = len(ok)
    if k == 1:
        return {"ratio": ok[0][0], "ci_lo": ok[0][1], "ci_hi": ok[0][2], "method": COMBINED, "processes": 1,
                "tau": 0.0, "process_effect": False}
    w = 1 / se ** 2
    fixed = float((w * y).sum() / w.sum())
    q = float((w * (y - fixed) ** 2).sum())  # Cochran's Q: k - 1 expected when the processes agree
    tau2 = max(0.0, (q - (k - 1)) / float(w.sum() - (w ** 2).sum() / w.sum()))
    wr = 1 / (se ** 2 + tau2)
    mid = float((wr * y).sum() / wr.sum())
    half = Z95 * math.sqrt(1 / float(wr.sum()))
    return {"ratio": math.exp(mid), "ci_lo": math.exp(mid - half), "ci_hi": math.exp(mid + half),
            "method": COMBINED, "processes": k, "tau": math.sqrt(tau2), "process_effect": tau2 > 0}


def direction(estimates: Sequence[tuple[float, float, float]]) -> str | None:
    """'faster' or 'slower' when 2+ processes each called it so on its own (ratio, ci_lo, ci_hi)
    (estimators.verdict: the interval excludes 1 and the change is at least its noise threshold),
    else None; None as well when any process has no finite interval (every process must have spoken).

    Why: on an EPYC with bf16 units (2026-12-04) +amp=bf16's processes landed at 1.03-1.08x or at
    1.25-1.34x, each to +-2-5%. Two processes in different modes gave a random-effects interval
    [0.996, 1.338], "within noise", though each process had called it faster; two demos later,
    both processes in the high mode, "faster". The random-effects interval answers how large the
    effect is across processes; this answers which way it went in every process measured. It is an
    intersection-union test (Berger 1982): each process's two-sided 95% interval, so with no effect
    all k processes call the same direction with probability 2 x 0.025^k at most (0.125% at k = 2);
    the A/A calibration counts it with the rest of the rule."""
    if len(estimates) < 2 or not all(all(map(math.isfinite, e)) and 0 < e[1] <= e[0] <= e[2] for e in estimates):
        return None
    calls = {estimators.verdict(lo, hi, r) for r, lo, hi in estimates}
    return calls.pop() if len(calls) == 1 and calls <= {"faster", "slower"} else None


def verdict(estimates: Sequence[tuple[float, float, float]]) -> tuple[str, str] | None:
    """The verdict over processes and its basis, the one rule the sweep's rows (results/analysis/
    speedups) and the A/A calibration's two-process figure use: the random-effects interval's
    ("interleaved"), or where that holds 1, the direction every process called (EVERY_PROCESS).
    None when no process has an interval to combine."""
    c = combine(estimates)
    if c is None:
        return None
    v = estimators.verdict(c["ci_lo"], c["ci_hi"], c["ratio"])
    d = direction(estimates) if v == "within noise" else None
    return (d, EVERY_PROCESS) if d else (v, "interleaved")


def wants_more(estimates: Sequence[tuple[float, float, float]], precision: float, most: int) -> tuple[bool, float]:
    """The process top-up's rule (harness/experiments/top_up.py), here so the A/A calibration
    applies the same one: (another process wanted?, the combined 95% half-width). Wanted while
    there are fewer than `most` processes and the combined half-width is above `precision`
    (infinite when no process has an interval); never without a process (a configuration whose
    processes all failed would fail again)."""
    if not estimates or len(estimates) >= most:
        return False, math.inf if not estimates else _combined_half_width(estimates)
    hw = _combined_half_width(estimates)
    return hw > precision, hw


def _combined_half_width(estimates) -> float:
    c = combine(estimates)
    return half_width(c["ci_lo"], c["ci_hi"], c["ratio"]) if c else math.inf


def topped_up_groups(estimates: Sequence[tuple[float, float, float]], start: int, precision: float,
                     most: int) -> list[list[tuple[float, float, float]]]:
    """Consecutive processes grouped as a topped-up sweep groups them: `start` first, then one more
    at a time while wants_more says so; the last group is dropped when the processes run out
    before its rule is met (it is not a group the sweep would have stopped at)."""
    groups, i = [], 0
    while i + start <= len(estimates):
        g = list(estimates[i:i + start])
        i += start
        while wants_more(g, precision, most)[0] and i < len(estimates):
            g.append(estimates[i])
            i += 1
        if wants_more(g, precision, most)[0]:
            break
        groups.append(g)
    return groups
