"""The pipeline's expected step over noisy operations (results/analysis/schedule.simulate_expected)
against closed forms and bounds, the block's spread read from a profile's passes
(layer_costs.Costs.cv), and a pipeline plan that carries both figures."""
from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from results.analysis import schedule as step_sim
from results.planner import layer_costs, profile_figures
from results.planner import pipeline_plan
from results.planner import search as planner
from results.planner.links import LinkModel
from tests.test_planner import FREE, _inv, _linear


def _stages(cv: float, p: int = 2, f: float = 0.1, b: float = 0.2) -> list[step_sim.StageCost]:
    return [step_sim.StageCost(f, b, cv_fwd=cv, cv_bwd=cv) for _ in range(p)]


def test_without_a_spread_the_expectation_is_the_step_itself():
    sc = [step_sim.StageCost(0.1, 0.2, 0.01), step_sim.StageCost(0.15, 0.25)]
    assert step_sim.simulate_expected("1f1b", sc, 8) == step_sim.simulate("1f1b", sc, 8)


def test_one_microbatch_runs_in_series_so_the_expectation_is_the_sum_of_lognormal_means():
    """M = 1: every forward and backward waits for the one before it, so the step is their sum,
    and a lognormal with median t and spread cv has mean t * sqrt(1 + cv^2)."""
    cv = 0.3
    got = step_sim.simulate_expected("gpipe", _stages(cv, p=3), 1, draws=4000)
    assert got["draws"] == 4000
    assert got["step_s"] == pytest.approx(3 * 0.3 * math.sqrt(1 + cv * cv), rel=0.02)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_handoffs_cost_more_than_the_mean_durations_and_more_with_more_spread(schedule):
    """Jensen: a step is a maximum over paths of sums, convex in the durations, so its expectation
    is at least the step of the mean durations (t * sqrt(1 + cv^2) each); with 12 microbatches
    handed between two equal stages it is strictly above, and grows with the spread."""
    typical = step_sim.simulate(schedule, _stages(0.0), 12)["step_s"]
    got = [step_sim.simulate_expected(schedule, _stages(cv), 12)["step_s"] for cv in (0.05, 0.1, 0.2)]
    for cv, g in zip((0.05, 0.1, 0.2), got):
        assert g > 1.005 * typical * math.sqrt(1 + cv * cv)
    assert got[0] < got[1] < got[2]
    assert step_sim.simulate_expected(schedule, _stages(0.1), 12) == step_sim.simulate_expected(schedule, _stages(0.1), 12)


def test_a_profiles_passes_give_the_blocks_spread_at_each_microbatch():
    rows = [{"microbatch": 1, "fwd_samples_s": [0.9, 1.0, 1.1], "bwd_samples_s": [2.0, 2.0, 2.0]},
            {"microbatch": 4, "fwd_samples_s": [3.0, 4.0, 5.0], "bwd_samples_s": [7.0, 8.0, 9.0]}]
    spread = profile_figures.spread(rows)
    assert spread["fwd"][0] == (1, pytest.approx(math.sqrt(2 / 3) * 0.1 / 1.0))
    assert spread["bwd"][0] == (1, 0.0)
    c = _linear("x", 0.01)
    assert c.cv(2) == (0.0, 0.0)  # no measured spread: none assumed
    c._spread = spread
    assert c.cv(1) == spread["fwd"][0][1:] + spread["bwd"][0][1:]
    assert c.cv(16) == spread["fwd"][1][1:] + spread["bwd"][1][1:]  # beyond the profiled sizes: the nearest
    assert profile_figures.spread([{**rows[0], "fwd_samples_s": [1.0, 1.0]}]) is None  # too few passes for a spread


def test_a_pipeline_plan_prices_its_expected_step_beside_the_typical_one(tmp_path):
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    inv, links = _inv(("fast", 1, 1e12), ("slow", 1, 1e12)), LinkModel(FREE, tmp_path)
    plain = planner.plan(inv, costs, links, 8, "pp")
    assert "step_s_typical" not in plain["predicted"]
    for c in costs.values():
        c._spread = {"fwd": [(1, 0.1)], "bwd": [(1, 0.1)]}
    noisy = planner.plan(inv, costs, links, 8, "pp")
    assert noisy["pp_split"] == plain["pp_split"]  # ranked by the typical step: the same plan
    assert noisy["predicted"]["step_s_typical"] == pytest.approx(plain["predicted"]["step_s"])
    assert noisy["predicted"]["step_s"] > noisy["predicted"]["step_s_typical"]
    assert noisy["uniform"]["predicted"]["step_s"] > plain["uniform"]["predicted"]["step_s"]
    # the same stages as 2 data-parallel replicas: their all-reduce waits for the slower
    args = (noisy["stages"], costs, links, noisy["microbatch_size"], noisy["microbatches"])
    one, two = (pipeline_plan.pp_predict(*args, dp, noisy["schedule"]) for dp in (1, 2))
    assert "replica_wait_s" not in one and two["replica_wait_s"] > 0
    assert two["step_s"] == pytest.approx(one["step_s"] + two["replica_wait_s"], rel=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(step_sim.SCHEDULES), st.integers(1, 8),
       st.lists(st.tuples(st.floats(1e-3, 1.0), st.floats(1e-3, 1.0), st.floats(1e-4, 0.3), st.floats(0.0, 0.3)),
                min_size=1, max_size=4), st.integers(0, 2**16), st.integers(1, 40))
def test_the_expected_step_is_never_below_the_typical_one_whatever_the_draws(schedule, m, stages, seed, draws):
    """The step is convex in the draws' normal deviates, and the draws come in antithetic pairs
    (z, -z): their mean is at least the step of the medians for every seed and draw count. CI
    once saw a 256-draw mean 7e-6 below it on a profile of tiny spread (independent draws)."""
    sc = [step_sim.StageCost(f, b, send_s=0.001, cv_fwd=cf, cv_bwd=cb) for f, b, cf, cb in stages]
    got = step_sim.simulate_expected(schedule, sc, m, draws=draws, seed=seed)
    assert got["draws"] % 2 == 0
    assert got["step_s"] >= step_sim.simulate(schedule, sc, m)["step_s"]


def test_replicas_wait_for_the_slowest_as_pairs_drawn_one_by_one_do():
    """Data-parallel replicas of a pipeline each draw their own durations and their all-reduce
    waits for the slowest: the expected step of 2 replicas over one's against pairs of one
    replica's steps drawn independently (brute force); expected_max_normal against its closed
    forms (1/sqrt(pi) at 2, 3/(2 sqrt(pi)) at 3); without a spread, nothing added."""
    assert step_sim.expected_max_normal(1) == 0.0
    assert step_sim.expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    assert step_sim.expected_max_normal(3) == pytest.approx(1.5 / math.sqrt(math.pi), rel=1e-9)
    sc = _stages(0.2, p=3)
    one = step_sim.simulate_expected("1f1b", sc, 8, draws=4000)
    two = step_sim.simulate_expected("1f1b", sc, 8, draws=4000, replicas=2)
    rng = random.Random(7)

    def draw(seconds: float, cv: float) -> float:
        return seconds * math.exp(math.sqrt(math.log(1 + cv * cv)) * rng.gauss(0.0, 1.0))
    steps = [step_sim.simulate("1f1b", sc, 8, draw)["step_s"] for _ in range(8000)]
    slower = statistics.mean(max(steps[i], steps[i + 1]) for i in range(0, len(steps), 2))
    assert two["replica_wait_s"] > 0 and two["pipeline_s"] == one["pipeline_s"]
    assert two["step_s"] - one["step_s"] == pytest.approx(slower - statistics.mean(steps), rel=0.15)
    flat = _stages(0.0)
    assert step_sim.simulate_expected("1f1b", flat, 8, replicas=4) == step_sim.simulate("1f1b", flat, 8)
