"""MLPerf scoring on hand-made run lists, and MFU against a hand calculation."""
import pytest

from results.stats.scoring import mfu_pct, olympic, weak_scaling


def test_olympic_drops_fastest_and_slowest():
    r = olympic([5.0, 1.0, 3.0, 4.0, 2.0], required=5)
    assert r.score_s == pytest.approx(3.0) and r.used == 3 and r.note == ""


def test_one_non_converged_run_is_the_dropped_slowest():
    r = olympic([5.0, 1.0, None, 4.0, 2.0], required=5)
    assert r.score_s == pytest.approx((2.0 + 4.0 + 5.0) / 3) and r.used == 3 and r.converged == 4


def test_two_non_converged_runs_make_it_invalid():
    r = olympic([5.0, None, None, 4.0, 2.0], required=5)
    assert r.score_s is None and r.note.startswith("invalid: 2 runs")


def test_fewer_runs_than_mlperf_requires_is_flagged_not_scored():
    r = olympic([3.0, 1.0, 2.0], required=10)
    assert r.score_s == pytest.approx(2.0) and r.note.startswith("not a scored result: MLPerf requires 10")
    assert olympic([1.0, 2.0]).score_s is None


def test_weak_scaling_ttta_and_models_per_minute():
    w = weak_scaling(starts_s=[100.0, 110.0], stops_s=[340.0, 400.0])
    assert w["ttta_s"] == 300.0 and w["models_per_min"] == pytest.approx(2 / 5.0)


def test_mfu_by_hand():
    # 10 GFLOP/sample at 50 samples/s = 0.5 TFLOP/s on a 2 TFLOP/s peak -> 25 %
    assert mfu_pct(10e9, 50.0, 2e12) == pytest.approx(25.0)
