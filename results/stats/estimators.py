"""Statistics shared by the CLI and the portal: step-time summaries, speedups with bootstrap
confidence intervals, geomeans, verdicts. numpy only.

Speedup = median(baseline step time) / median(config step time). Its 95% CI comes from a
two-level (hierarchical) bootstrap: resample whole runs (repeats) with replacement, then steps
within each chosen run, and recompute the ratio of pooled medians. Run-to-run variation is
usually larger than step-to-step variation, and resampling only steps would hide it.
Slowdowns stay < 1.0: nothing is clipped.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

N_BOOT = 2000
BLOCK_ELEMS = 1 << 22  # resampled values held at once (32 MiB of float64)
CI = 0.95


def step_summary(step_s: Sequence[float]) -> dict[str, float]:
    a = np.asarray(step_s, dtype=float)
    if a.size == 0:
        return {}
    q10, q25, q50, q75, q90 = np.percentile(a, [10, 25, 50, 75, 90])
    return {"median_step_s": float(q50), "mean_step_s": float(a.mean()), "p10_step_s": float(q10),
            "p90_step_s": float(q90), "iqr_step_s": float(q75 - q25), "n_steps": int(a.size),
            "cv_step": float(a.std() / a.mean()) if a.mean() > 0 else 0.0}  # pyperf warns above 0.10


def _as_runs(runs: Sequence[Sequence[float]]) -> list[np.ndarray]:
    out = [np.asarray(r, dtype=float) for r in runs if len(r)]
    if not out:
        raise ValueError("no samples")
    return out


def _boot_medians(runs: list[np.ndarray], rng: np.random.Generator, n_boot: int) -> np.ndarray:
    """n_boot bootstrap replicates of the pooled median (runs, then steps within runs).
    Vectorised over replicates in blocks of about BLOCK_ELEMS resampled values: one replicate
    picks k runs with replacement and len(run) steps from each, as a loop over replicates would."""
    k = len(runs)
    lens = np.array([r.size for r in runs])
    width = int(lens.max())
    table = np.full((k, width), np.nan)
    for i, r in enumerate(runs):
        table[i, :r.size] = r
    ragged = bool((lens != width).any())
    meds = np.empty(n_boot)
    block = max(1, BLOCK_ELEMS // (k * width))
    for start in range(0, n_boot, block):
        b = min(block, n_boot - start)
        chosen = rng.integers(0, k, (b, k)) if k > 1 else np.zeros((b, 1), dtype=int)
        n = lens[chosen][..., None]                                   # (b, k, 1) steps per chosen run
        steps = (rng.random((b, chosen.shape[1], width)) * n).astype(int)  # uniform in [0, n)
        pooled = table[chosen[..., None], steps].reshape(b, -1)
        if ragged:  # a shorter run contributes only its own length: blank the excess positions
            pooled[(np.arange(width) >= n).reshape(b, -1)] = np.nan
            meds[start:start + b] = np.nanmedian(pooled, axis=1)
        else:
            meds[start:start + b] = np.median(pooled, axis=1)
    return meds


def speedup(baseline: Sequence[Sequence[float]], config: Sequence[Sequence[float]],
            n_boot: int = N_BOOT, seed: int = 0, level: float = CI) -> dict[str, float]:
    """Speedup of `config` over `baseline` from raw step times, grouped by run.
    Returns point estimate, CI bounds and the bootstrap replicates' standard error."""
    b, c = _as_runs(baseline), _as_runs(config)
    point = float(np.median(np.concatenate(b)) / np.median(np.concatenate(c)))
    rng = np.random.default_rng(seed)
    ratios = _boot_medians(b, rng, n_boot) / _boot_medians(c, rng, n_boot)
    lo, hi = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return {"speedup": point, "ci_lo": float(lo), "ci_hi": float(hi), "replicates": ratios}


def geomean_speedup(pairs: Sequence[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]],
                    n_boot: int = N_BOOT, seed: int = 0) -> dict[str, float]:
    """Geometric mean of per-workload speedups, CI from the per-workload bootstrap replicates
    combined replicate by replicate (workloads are independent)."""
    results = [speedup(b, c, n_boot=n_boot, seed=seed + i) for i, (b, c) in enumerate(pairs)]
    point = float(np.exp(np.mean([np.log(r["speedup"]) for r in results])))
    reps = np.exp(np.mean([np.log(r["replicates"]) for r in results], axis=0))
    lo, hi = np.quantile(reps, [(1 - CI) / 2, (1 + CI) / 2])
    return {"speedup": point, "ci_lo": float(lo), "ci_hi": float(hi), "n": len(results)}


# Intervals valid at the number of pairs (no bootstrap over 3 pairs: it has 10 distinct resamples
# and understates the uncertainty - a 1.11x [1.11, 1.20] "finding" for a toggle that cannot change
# the step). From MIN_ORDER_PAIRS pairs: the median with its distribution-free interval from order
# statistics (the sign test's: coverage >= 95% for any continuous distribution of ratios, and robust
# to one pair hit by load). Fewer pairs cannot reach 95% that way (5 pairs: [min, max] covers 94%),
# so there the geometric mean with Student's t on the log ratios; one pair has no interval.
MIN_ORDER_PAIRS = 6
ORDER_STATS, T_LOG, NO_INTERVAL = "median, order statistics", "t on log ratios", "none (1 pair)"


@functools.lru_cache(maxsize=4096)  # a pure function of n, called after every sample by stop rules
def median_interval_ranks(n: int, level: float = CI) -> tuple[int, int] | None:
    """0-based ranks (lo, hi) of the sorted sample bounding the median with coverage >= level
    (P(Binomial(n, 1/2) < k) <= (1-level)/2 for the largest such k), or None when n is too small."""
    from scipy.special import bdtr  # Binomial(n, p)'s CDF; scipy.special, not .stats: a run imports
    k = 0                             # this after its steps and scipy.stats takes 0.7 s more to load
    while k + 1 <= n and bdtr(k, n, 0.5) <= (1 - level) / 2:
        k += 1
    return None if k == 0 else (k - 1, n - k)


def median_interval(samples: Sequence[float]) -> tuple[float, float] | None:
    """(lo, hi): the distribution-free 95% interval of the samples' median (order statistics), or
    None with fewer than MIN_ORDER_PAIRS samples."""
    ranks = median_interval_ranks(len(samples)) if len(samples) >= MIN_ORDER_PAIRS else None
    if ranks is None:
        return None
    a = sorted(samples)
    return float(a[ranks[0]]), float(a[ranks[1]])


def paired_ratio(num: Sequence[float], den: Sequence[float], n_boot: int = N_BOOT,
                 seed: int = 0) -> dict[str, float | str]:
    """Per-pair ratios num[i] / den[i] (each pair measured back to back, so drift between pairs
    cancels), summarised with an interval valid at their count, the method named:
    - n >= MIN_ORDER_PAIRS: their median, its order-statistics interval (exact, distribution-free);
    - 2 <= n < MIN_ORDER_PAIRS: their geometric mean, Student's t interval on the log ratios;
    - n = 1: the ratio, no interval (NaN).
    (n_boot and seed are kept for callers; no resampling is needed.)"""
    r = np.asarray(num, dtype=float) / np.asarray(den, dtype=float)
    if r.size == 0:
        raise ValueError("no samples")
    interval = median_interval(r.tolist())
    if interval is not None:
        return {"ratio": float(np.median(r)), "ci_lo": interval[0], "ci_hi": interval[1], "method": ORDER_STATS}
    if r.size == 1:
        return {"ratio": float(r[0]), "ci_lo": float("nan"), "ci_hi": float("nan"), "method": NO_INTERVAL}
    from scipy.special import stdtrit  # Student's t quantile (scipy.stats.t.ppf's, without loading .stats)
    logs = np.log(r)
    half = float(stdtrit(r.size - 1, (1 + CI) / 2)) * float(logs.std(ddof=1)) / np.sqrt(r.size)
    mid = float(logs.mean())
    return {"ratio": float(np.exp(mid)), "ci_lo": float(np.exp(mid - half)), "ci_hi": float(np.exp(mid + half)),
            "method": T_LOG}


# Interleaved block pairs (results/stats/interleaved.py) from MIN_ORDER_PAIRS pairs: the
# Hodges-Lehmann estimate of the log ratio (the median of the Walsh averages (l_i + l_j) / 2, i <= j)
# with the Wilcoxon signed-rank interval (Hollander & Wolfe, Nonparametric Statistical Methods,
# ch. 3): exact coverage >= 95% for any continuous distribution symmetric about its centre, which an
# A/A pair's log ratio is (the ABBA order gives each side each position equally often). Why not the
# median's order-statistics interval: it is the sign test's, 64% efficient on normal data; re-read
# on 23 of this VM's interleaved records (2026-12-04, 6-26 pairs each) this one was narrower in 19,
# by 17% at the median, from 43% narrower to 13% wider (+amp=bf16, 7 pairs: +-11.0% against +-9.1%;
# +channels_last, 23 pairs: +-7.8% against +-6.0%). It stays robust to a pair hit by load
# (breakdown point 29%).
HODGES_LEHMANN = "Hodges-Lehmann, signed-rank"
EXACT_RANKS_UP_TO = 200  # pairs; above, the signed-rank statistic's normal approximation


@functools.lru_cache(maxsize=4096)  # a pure function of n, called after every pair by the stop rule
def signed_rank_k(n: int, level: float = CI) -> int:
    """The number k of Walsh averages cut from each end for a `level` interval over n pairs: the
    largest k with P(T+ <= k - 1) <= (1 - level) / 2 under the null (T+ the signed-rank statistic);
    0 when n is too small for one (n <= 5 at 95%)."""
    alpha = (1 - level) / 2
    if n > EXACT_RANKS_UP_TO:
        from scipy.special import ndtri  # the normal quantile (scipy.special: see median_interval_ranks)
        mean, sd = n * (n + 1) / 4, np.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        return max(0, int(np.floor(mean + float(ndtri(alpha)) * sd + 0.5)))  # continuity-corrected
    p = np.zeros(n * (n + 1) // 2 + 1)
    p[0] = 1.0
    for r in range(1, n + 1):  # rank r in or out of T+ with probability 1/2 each
        p[r:] = (p[r:] + p[:-r]) / 2  # the right side is read before it is written
        p[:r] /= 2
    return int(np.searchsorted(np.cumsum(p), alpha + 1e-12, side="right"))


def hodges_lehmann_ratio(ratios: Sequence[float]) -> dict[str, float | str]:
    """Ratios of interleaved block pairs summarised on the log scale: from MIN_ORDER_PAIRS pairs
    the Hodges-Lehmann estimate with its signed-rank interval (exp'd back); fewer, paired_ratio's
    t interval on the log ratios (or none for 1 pair)."""
    r = np.asarray(ratios, dtype=float)
    k = signed_rank_k(r.size) if r.size >= MIN_ORDER_PAIRS else 0
    if k == 0:
        return paired_ratio(r.tolist(), [1.0] * r.size)
    logs = np.log(r)
    i, j = np.triu_indices(r.size)
    walsh = np.sort((logs[i] + logs[j]) / 2)
    return {"ratio": float(np.exp(np.median(walsh))), "ci_lo": float(np.exp(walsh[k - 1])),
            "ci_hi": float(np.exp(walsh[walsh.size - k])), "method": HODGES_LEHMANN}


# criterion's noise threshold, set at the interleaved engine's precision target: a change smaller
# than the precision the measurement samples to is not called, even when its interval excludes 1.
# Measured why (2026-12-02, two demos back to back): +dali came out 0.972x [0.951, 0.994] "slower",
# then 1.011x [0.892, 1.146]; a 3% effect is at the edge of what this VM reproduces.
NOISE_THRESHOLD = 0.03


def verdict(ci_lo: float, ci_hi: float, ratio: float | None = None) -> str:
    """For a ratio where > 1 means faster: a plain word, 'within noise' when the CI holds 1 or,
    given the ratio, when it moves less than NOISE_THRESHOLD (either way, on a log scale)."""
    if ratio is not None and abs(np.log(ratio)) < np.log1p(NOISE_THRESHOLD):
        return "within noise"
    if ci_lo > 1.0:
        return "faster"
    if ci_hi < 1.0:
        return "slower"
    return "within noise"
