"""Bootstrap speedup CIs on synthetic samples with known answers."""
from __future__ import annotations

import numpy as np
import pytest

from results import stats


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


def test_step_summary():
    s = stats.step_summary([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_step_s"] == 3.0 and s["n_steps"] == 5 and s["mean_step_s"] == 22.0
