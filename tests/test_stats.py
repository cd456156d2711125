"""Bootstrap speedup CIs on synthetic samples with known answers."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from results.stats import estimators as stats


def _runs(rng, median, spread, n_runs=5, n=40):
    return [median * (1 + spread * rng.standard_normal(n)) for _ in range(n_runs)]


def test_known_speedup_is_inside_a_tight_ci():
    rng = np.random.default_rng(0)
    s = stats.speedup(_runs(rng, 0.100, 0.02), _runs(rng, 0.050, 0.02))
    assert s["speedup"] == pytest.approx(2.0, rel=0.02)
    assert s["ci_lo"] < 2.0 < s["ci_hi"] and s["ci_hi"] - s["ci_lo"] < 0.1
    assert stats.verdict(s["ci_lo"], s["ci_hi"]) == "faster"


def test_slowdown_is_not_clipped():
    rng = np.random.default_rng(1)
    s = stats.speedup(_runs(rng, 0.060, 0.02), _runs(rng, 0.100, 0.02))
    assert s["speedup"] == pytest.approx(0.6, rel=0.03) and s["ci_hi"] < 1.0
    assert stats.verdict(s["ci_lo"], s["ci_hi"]) == "slower"


def test_same_distribution_is_within_noise():
    rng = np.random.default_rng(2)
    s = stats.speedup(_runs(rng, 0.1, 0.05), _runs(rng, 0.1, 0.05))
    assert s["ci_lo"] < 1.0 < s["ci_hi"]
    assert stats.verdict(s["ci_lo"], s["ci_hi"]) == "within noise"


def test_run_to_run_variation_widens_the_ci():
    """Two runs per config whose medians differ by 20%: the hierarchical bootstrap must not
    pretend the steps of one run are independent evidence."""
    rng = np.random.default_rng(3)
    base = [0.1 * (1 + 0.01 * rng.standard_normal(50)), 0.12 * (1 + 0.01 * rng.standard_normal(50))]
    cfg = [0.1 * (1 + 0.01 * rng.standard_normal(50)), 0.12 * (1 + 0.01 * rng.standard_normal(50))]
    s = stats.speedup(base, cfg)
    assert s["ci_hi"] - s["ci_lo"] > 0.1
    pooled = stats.speedup([np.concatenate(base)], [np.concatenate(cfg)])
    assert pooled["ci_hi"] - pooled["ci_lo"] < s["ci_hi"] - s["ci_lo"]


def test_geomean_of_known_speedups():
    rng = np.random.default_rng(4)
    pairs = [(_runs(rng, 0.1, 0.01), _runs(rng, 0.05, 0.01)), (_runs(rng, 0.1, 0.01), _runs(rng, 0.2, 0.01))]
    g = stats.geomean_speedup(pairs)
    assert g["speedup"] == pytest.approx(1.0, rel=0.02)  # sqrt(2 * 0.5)
    assert g["ci_lo"] < 1.0 < g["ci_hi"] and g["n"] == 2


def test_paired_ratio_cancels_drift_between_pairs():
    """Each pair shares a machine-speed factor that moves +-40% between pairs (as this VM's
    bandwidth does); the ratio within a pair is 0.9. Pairing recovers 0.9 with a tight CI."""
    rng = np.random.default_rng(5)
    drift = rng.uniform(0.6, 1.4, 15)
    den = drift * (1 + 0.01 * rng.standard_normal(15))
    num = 0.9 * drift * (1 + 0.01 * rng.standard_normal(15))
    r = stats.paired_ratio(num, den)
    assert r["ratio"] == pytest.approx(0.9, rel=0.01)
    assert r["ci_lo"] <= 0.9 <= r["ci_hi"] and r["ci_hi"] - r["ci_lo"] < 0.02
    unpaired = np.median(num) / np.median(den)  # what a ratio of medians would have said
    assert abs(unpaired - 0.9) > abs(r["ratio"] - 0.9)


def test_step_summary():
    s = stats.step_summary([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_step_s"] == 3.0 and s["n_steps"] == 5 and s["mean_step_s"] == 22.0


def _loop_boot_medians(runs, rng, n_boot):
    """The definition, one replicate at a time: k runs with replacement, then each chosen run's
    own number of steps with replacement, median of the pool."""
    out = []
    for _ in range(n_boot):
        chosen = rng.integers(0, len(runs), len(runs))
        out.append(np.median(np.concatenate([runs[i][rng.integers(0, runs[i].size, runs[i].size)] for i in chosen])))
    return np.array(out)


@pytest.mark.parametrize("lengths", [(40, 40, 40), (60, 10, 25)])
def test_vectorised_bootstrap_matches_the_loop_definition(lengths):
    """Equal and ragged run lengths (a short run must weigh only its own steps): the block-
    vectorised replicates have the distribution of the plain loop's."""
    rng = np.random.default_rng(5)
    runs = [rng.lognormal(np.log(0.1 * (1 + 0.3 * i)), 0.1, n) for i, n in enumerate(lengths)]
    fast = stats._boot_medians(runs, np.random.default_rng(6), 4000)
    slow = _loop_boot_medians(runs, np.random.default_rng(7), 4000)
    # two-sample Kolmogorov-Smirnov distance (the distribution is lumpy: few runs to choose
    # from, so single quantiles can sit on a jump); 0.05 is beyond the 99.9% critical value
    # 1.95 * sqrt(2 / 4000) = 0.044 for identical distributions
    grid = np.sort(np.concatenate([fast, slow]))
    ecdf = lambda a: np.searchsorted(np.sort(a), grid, side="right") / a.size  # noqa: E731
    assert np.abs(ecdf(fast) - ecdf(slow)).max() < 0.05
    assert np.quantile(fast, [0.025, 0.975]) == pytest.approx(np.quantile(slow, [0.025, 0.975]), rel=0.03)


def test_paired_speedup_cancels_load_that_hits_both_runs_of_a_repeat():
    """Repeat 1 ran under load (both runs 5-10x slower): the pooled ratio of medians mixes the
    loaded config run with quiet baseline runs, the per-repeat ratio does not."""
    from results.stats.paired import Runs, paired_speedup
    keys = [("s", str(i)) for i in range(6)]  # 6 repeats: the median's order-statistics interval applies
    base = Runs([[10.0] * 5, [100.0] * 5, [10.0] * 5] * 2, keys)
    conf = Runs([[5.0] * 5, [50.0] * 5, [5.0] * 5] * 2, keys)
    got = paired_speedup(base, conf, n_boot=200)
    assert got["paired_speedup"] == 2.0 and got["pairs"] == 6 and got["paired_method"] == stats.ORDER_STATS
    assert got["paired_lo"] == got["paired_hi"] == 2.0  # every pair says 2x
    conf_loaded_other = Runs([[5.0] * 5, [50.0] * 5, [50.0] * 5] * 2, keys)  # load moved to repeats 2 and 5's config runs
    assert paired_speedup(base, conf_loaded_other, n_boot=200)["paired_speedup"] == 2.0
    assert stats.speedup(base, conf_loaded_other, n_boot=200)["speedup"] == pytest.approx(10.0 / 50.0)
    assert paired_speedup(base, Runs([[5.0]], [("other", "0")])) is None  # no shared repeat


def test_few_pairs_get_an_interval_valid_at_their_count():
    """3 pairs: no bootstrap (10 distinct resamples); Student's t on the log ratios, its method named.
    A/A streams hold 1 in their interval about 95% of the time at 3 pairs (t) and at 8 pairs (order
    statistics, at least 95%); 1 pair has no interval."""
    from scipy.stats import t as student_t
    r = stats.paired_ratio([1.05, 1.11, 1.12], [1.0, 1.0, 1.0])
    logs = np.log([1.05, 1.11, 1.12])
    half = student_t.ppf(0.975, 2) * logs.std(ddof=1) / np.sqrt(3)
    assert r["method"] == stats.T_LOG
    assert r["ratio"] == pytest.approx(np.exp(logs.mean()))
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((np.exp(logs.mean() - half), np.exp(logs.mean() + half)))
    rng = np.random.default_rng(3)
    covered = 0
    for _ in range(400):  # A/A: the interval covers 1 about 95% of the time, never far less
        a = stats.paired_ratio(np.exp(0.05 * rng.standard_normal(3)), np.ones(3))
        covered += a["ci_lo"] <= 1.0 <= a["ci_hi"]
    assert 0.92 <= covered / 400 <= 0.98, covered
    covered = 0
    for _ in range(400):
        a = stats.paired_ratio(np.exp(0.05 * rng.standard_normal(8)), np.ones(8))
        assert a["method"] == stats.ORDER_STATS
        covered += a["ci_lo"] <= 1.0 <= a["ci_hi"]
    assert covered / 400 >= 0.95, covered  # 8 pairs: [min, max] of the ratios, 99.2% exactly
    assert stats.median_interval_ranks(8) == (0, 7) and stats.median_interval_ranks(9) == (1, 7)
    assert stats.median_interval_ranks(5) is None  # [min, max] of 5 covers 93.75% < 95%
    one = stats.paired_ratio([1.2], [1.0])
    assert one["method"] == stats.NO_INTERVAL and one["ci_lo"] != one["ci_lo"]


def test_a_change_below_the_noise_threshold_is_not_called():
    """criterion's rule at our precision target: an interval that excludes 1 around a 2% change
    is 'within noise'; the same interval around a 5% change is a finding."""
    assert stats.verdict(1.01, 1.03) == "faster"  # without the estimate: the interval alone
    assert stats.verdict(1.01, 1.03, 1.02) == "within noise"
    assert stats.verdict(0.951, 0.994, 0.972) == "within noise"
    assert stats.verdict(1.02, 1.08, 1.05) == "faster" and stats.verdict(0.90, 0.95, 0.93) == "slower"


def test_interleaved_pairs_get_the_hodges_lehmann_estimate_with_its_signed_rank_interval():
    """The cut k matches the Wilcoxon signed-rank table (two-sided 5%: n=6..30), n=5 has none;
    on 7 pairs the estimate is the median of the 28 Walsh averages and the interval their 3rd
    smallest and 3rd largest; A/A streams hold 1 about 95% of the time; one pair hit by load
    barely moves it; on normal log ratios it is narrower than the median's order statistics."""
    assert [stats.signed_rank_k(n) for n in (5, 6, 7, 8, 10, 14, 20, 30)] == [0, 1, 3, 4, 9, 22, 53, 138]
    ks = [stats.signed_rank_k(n) for n in range(190, 211)]  # exact up to 200, normal beyond: no jump
    assert all(0 < b - a < 100 for a, b in zip(ks, ks[1:]))
    logs = np.array([0.01, 0.05, 0.02, 0.09, 0.04, 0.12, 0.03])
    walsh = sorted((logs[i] + logs[j]) / 2 for i in range(7) for j in range(i, 7))
    got = stats.hodges_lehmann_ratio(np.exp(logs))
    assert got["method"] == stats.HODGES_LEHMANN
    assert (got["ratio"], got["ci_lo"], got["ci_hi"]) == pytest.approx(
        (np.exp(np.median(walsh)), np.exp(walsh[2]), np.exp(walsh[-3])))
    assert stats.hodges_lehmann_ratio([1.1, 1.2, 1.15])["method"] == stats.T_LOG  # below 6 pairs
    rng = np.random.default_rng(5)
    for n in (8, 20):
        covered = sum(lo <= 1.0 <= hi for lo, hi in (
            (h["ci_lo"], h["ci_hi"]) for h in (stats.hodges_lehmann_ratio(np.exp(0.05 * rng.standard_normal(n)))
                                              for _ in range(600))))
        assert 0.93 <= covered / 600 <= 0.98, (n, covered)
    clean = np.exp(0.02 * rng.standard_normal(12))
    hit = clean.copy()
    hit[4] *= 3.0  # a pair measured under load
    assert abs(np.log(stats.hodges_lehmann_ratio(hit)["ratio"] / stats.hodges_lehmann_ratio(clean)["ratio"])) < 0.02
    widths = []
    for _ in range(200):
        r = np.exp(0.05 * rng.standard_normal(12))
        h, o = stats.hodges_lehmann_ratio(r), stats.paired_ratio(r, np.ones(12))
        widths.append(np.log(h["ci_hi"] / h["ci_lo"]) / np.log(o["ci_hi"] / o["ci_lo"]))
    assert np.mean(widths) < 0.9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.05, 20.0), min_size=6, max_size=60), st.floats(0.1, 10.0))
def test_hodges_lehmann_holds_its_estimate_and_scales_with_the_ratios(ratios, scale):
    """Any positive ratios from 6 pairs: the estimate lies inside its interval, and multiplying every
    ratio by a constant multiplies the estimate and both bounds by it (it works on log ratios)."""
    a = stats.hodges_lehmann_ratio(ratios)
    b = stats.hodges_lehmann_ratio([r * scale for r in ratios])
    assert a["method"] == stats.HODGES_LEHMANN
    assert a["ci_lo"] <= a["ratio"] <= a["ci_hi"]
    assert (b["ratio"], b["ci_lo"], b["ci_hi"]) == pytest.approx((a["ratio"] * scale, a["ci_lo"] * scale,
                                                                   a["ci_hi"] * scale), rel=1e-9)
