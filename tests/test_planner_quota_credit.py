"""A pipeline stage whose rank is held to a CPU quota gets part of each wait back
(results/analysis/schedule.quota_credit): against the closed form, on the event engine by hand,
as a bound on any schedule, and from a profile's quota into the planner's pipeline price."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from results.analysis import schedule as step_sim
from results.planner import inventory, layer_costs, profile_figures
from results.planner import search as planner
from results.planner.links import LinkModel
from tests.test_planner import _inv, _linear

P = 0.01  # the harness's period (harness/parallel/cpu_quota.py PERIOD_US): 10 ms


@pytest.mark.parametrize("gap, seconds, throttled, want", [
    (0.004, 1.0, 0.5, 0.004),    # a wait shorter than a period comes back whole
    (0.5, 1.0, 0.5, P),          # a long one: one period's worth (the quota does not carry over)
    (0.5, 0.006, 0.5, 0.003),    # a short operation can at most run unheld: half of it at 0.5 CPU
    (0.5, 1.0, 0.0, 0.0),        # not throttled: nothing to get back
])
def test_the_credit_is_the_least_of_the_wait_a_period_and_the_unheld_gain(gap, seconds, throttled, want):
    assert step_sim.quota_credit(gap, seconds, P, throttled) == pytest.approx(want)


def test_the_engine_takes_the_credit_off_the_operation_after_a_wait():
    """Worker b waits for a's operation; held at 0.5 CPU its own ends a period sooner after a long
    wait, the whole wait sooner after a short one; a's (no wait) and an unheld b are as before."""
    def ends(a_s: float, quota: dict | None) -> dict:
        done, _ = step_sim.run_events({"a": [("a0", a_s, None, 0.0)], "b": [("b0", 2.0, "a0", 0.0)]}, quota)
        return done
    assert ends(1.0, None) == {"a0": 1.0, "b0": 3.0}
    assert ends(1.0, {"b": (P, 0.5)}) == pytest.approx({"a0": 1.0, "b0": 3.0 - P})
    assert ends(0.004, {"b": (P, 0.5)}) == pytest.approx({"a0": 0.004, "b0": 2.0})
    assert ends(1.0, {"a": (P, 0.5)}) == {"a0": 1.0, "b0": 3.0}  # a never waited


def test_two_stages_gpipe_one_microbatch_by_hand():
    """GPipe, 2 stages, M=1, f = 1, b = 2 s, both held at 0.5 CPU: stage 1's forward waits 1 s for
    stage 0's (credit P), its backward follows at once; stage 0's backward waits for it (credit P):
    step 2f + 2b - 2P. Unheld, or with a period of 0, the bubble formula's (M + P - 1)(f + b)."""
    held = [step_sim.StageCost(1.0, 2.0, quota_period_s=P, quota_cpus=0.5)] * 2
    assert step_sim.simulate("gpipe", held, 1)["step_s"] == pytest.approx(6.0 - 2 * P)
    for free in ([step_sim.StageCost(1.0, 2.0)] * 2, [step_sim.StageCost(1.0, 2.0, quota_cpus=0.5)] * 2,
                 [step_sim.StageCost(1.0, 2.0, quota_period_s=P, quota_cpus=1.0)] * 2):
        assert step_sim.simulate("gpipe", free, 1)["step_s"] == 6.0


_pos = st.floats(1e-3, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(step_sim.SCHEDULES), st.integers(1, 8), st.floats(0.1, 0.9),
       st.lists(st.tuples(_pos, _pos, st.floats(0.0, 0.05)), min_size=2, max_size=5))
def test_held_stages_never_step_slower_and_gain_at_most_a_period_an_operation(schedule, m, cpus, rows):
    """An operation's end is nondecreasing in when its rank is free and when its input is ready,
    and never later than without the credit, so the held step is at most the unheld one; each
    operation takes at most one period off, and a step is 1-Lipschitz in each duration, so it is
    at least the unheld step minus one period per operation (2 M P of them)."""
    p = len(rows)
    free = [step_sim.StageCost(f, b, send_s=s) for f, b, s in rows]
    held = [step_sim.StageCost(f, b, send_s=s, quota_period_s=P, quota_cpus=cpus) for f, b, s in rows]
    unheld, got = step_sim.simulate(schedule, free, m)["step_s"], step_sim.simulate(schedule, held, m)["step_s"]
    assert unheld - 2 * m * p * P - 1e-9 <= got <= unheld + 1e-9


def test_a_profiles_quota_is_its_period_and_cpus_or_none():
    assert profile_figures.held_quota({"constraint": {"cpus": 0.5, "cfs_period_us": 10_000}}) == (0.01, 0.5)
    assert profile_figures.held_quota({"constraint": {"cpus": None, "how": "unconstrained"}}) is None
    assert profile_figures.held_quota({"constraint": {"cpus": 0.5}}) is None  # a profile older than the key
    assert profile_figures.held_quota({}) is None
    assert _linear("x", 0.01).quota is None  # not from a profile: an estimate is not held


def test_the_planner_prices_a_held_kinds_pipeline_lower_and_its_data_parallel_alike(tmp_path):
    """Two kinds, a 2-stage pipeline: with each kind's profile held to a quota, the stages' waits
    are partly paid back, so the same plan is priced lower (by at most a period an operation);
    data parallel, which has no waits between operations in this model, is priced as before."""
    links = inventory.Links(measured=False, busbw_gb_per_s=0.001, latency_us=100.0)
    inv = _inv(("fast", 1, 1e12), ("slow", 1, 1e12))
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    lm = LinkModel(links, tmp_path)
    before = {s: planner.plan(inv, costs, lm, 8, s) for s in ("pp", "dp")}
    costs["fast"].quota, costs["slow"].quota = (P, 0.5), (P, 0.25)
    after = {s: planner.plan(inv, costs, lm, 8, s) for s in ("pp", "dp")}
    pp0, pp1 = before["pp"], after["pp"]
    assert (pp1["stage_order"], pp1["microbatches"]) == (pp0["stage_order"], pp0["microbatches"])
    ops = 2 * pp1["microbatches"] * len(pp1["stages"])
    assert pp0["predicted"]["step_s"] - ops * P <= pp1["predicted"]["step_s"] < pp0["predicted"]["step_s"]
    assert after["dp"]["predicted"]["step_s"] == before["dp"]["predicted"]["step_s"]
