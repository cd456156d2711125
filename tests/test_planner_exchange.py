"""A pipeline stage's exchanges with its neighbours where its rank does the transfer itself (a CPU
rank: results/analysis/schedule.py's model, StageCost.fwd_exchange_s / bwd_exchange_s): against a
closed form, against the same durations folded into the operations, and priced by the planner from
the boundary's send and the kind's occupancy (layer_costs.Costs.exchange_occupancy)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from results.analysis import schedule as step_sim
from results.planner import inventory, layer_costs, pipeline_plan, profile_figures
from results.planner import search as planner
from results.planner.links import LinkModel
from tests.test_planner import _inv, _linear


@pytest.mark.parametrize("m", [1, 3, 8])
def test_two_stages_gpipe_pay_every_forward_and_backward_exchange_on_the_chain(m):
    """GPipe over 2 equal stages: stage 1's forward i waits for stage 0's, whose exchange holds the
    handoff (no lag beside it), so its last forward ends at M (f + x) + f; then its M backwards,
    each with its exchange, then stage 0's last backward: (M + 1)(f + b) + 2 M x. With x = 0 that is
    the bubble formula's (M + P - 1)(f + b)."""
    f, b, x = 1.0, 2.0, 0.25
    sc = [step_sim.StageCost(f, b, send_s=0.5, fwd_exchange_s=x), step_sim.StageCost(f, b, bwd_exchange_s=x)]
    assert step_sim.simulate("gpipe", sc, m)["step_s"] == pytest.approx((m + 1) * (f + b) + 2 * m * x)
    # the busy figures stay compute only: the bubble counts the exchanges as the rank not computing
    assert step_sim.simulate("gpipe", sc, m)["busy_s"] == [m * (f + b)] * 2


def test_the_send_lag_counts_only_where_no_exchange_carries_it():
    gpu = step_sim.StageCost(1.0, 2.0, send_s=0.5)
    cpu = step_sim.StageCost(1.0, 2.0, send_s=0.5, fwd_exchange_s=0.1, bwd_exchange_s=0.1)
    assert step_sim.handoff_lag(gpu, "F") == 0.5 and step_sim.handoff_lag(cpu, "F") == 0.0
    assert step_sim.handoff_lag(gpu, "B", 0.7) == 0.7 and step_sim.handoff_lag(cpu, "B", 0.7) == 0.0


_pos = st.floats(1e-3, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(step_sim.SCHEDULES), st.integers(1, 8),
       st.lists(st.tuples(_pos, _pos, _pos, _pos, _pos), min_size=2, max_size=5))
def test_exchanges_are_the_same_step_as_longer_operations_with_no_lag(schedule, m, rows):
    """Every inner side with an exchange: the step is the one of stages whose forwards and backwards
    are that much longer and whose sends cost nothing (the exchange holds the handoff)."""
    p = len(rows)
    if schedule == "1f1b" and m < p:
        m = p
    sc = [step_sim.StageCost(f, b, send_s=s, fwd_exchange_s=fx if i < p - 1 else 0.0,
                             bwd_exchange_s=bx if i > 0 else 0.0) for i, (f, b, s, fx, bx) in enumerate(rows)]
    folded = [step_sim.StageCost(c.fwd_s + c.fwd_exchange_s, c.bwd_s + c.bwd_exchange_s) for c in sc]
    want = step_sim.simulate(schedule, folded, m)["step_s"]
    assert step_sim.simulate(schedule, sc, m)["step_s"] == pytest.approx(want)


def test_the_planner_prices_each_exchange_at_the_boundarys_send_times_the_kinds_occupancy(tmp_path):
    """Two kinds, one stage each: the first stage's rank exchanges after its forwards, the second's
    after its backwards, each for the boundary's send time x its own kind's occupancy; an
    estimated kind (occupancy 0: a GPU's copy engines) keeps only the lag, as before."""
    links = inventory.Links(measured=False, busbw_gb_per_s=0.001, latency_us=100.0)  # 1 MB/s: sends that count
    inv = _inv(("fast", 1, 1e12), ("slow", 1, 1e12))
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    lm = LinkModel(links, tmp_path)
    base = planner.plan(inv, costs, lm, 8, "pp")
    assert all(st["exchange_s"] == 0 for st in base["stages"])
    costs["fast"].exchange_occupancy, costs["slow"].exchange_occupancy = 2.0, 4.0
    busy = planner.plan(inv, costs, lm, 8, "pp")
    send = lm.send_s(1000 * busy["microbatch_size"])  # boundary_bytes_per_sample 1000 (_linear)
    occ = {"fast": 2.0, "slow": 4.0}
    assert [st["exchange_s"] for st in busy["stages"]] == pytest.approx([send * occ[k] for k in busy["stage_order"]])
    sc = pipeline_plan._stage_costs(busy["stages"], costs, lm, busy["microbatch_size"], 1, lambda a, b: False)
    first, last = sc
    assert (first.fwd_exchange_s, first.bwd_exchange_s) == (pytest.approx(send * occ[busy["stage_order"][0]]), 0.0)
    assert (last.fwd_exchange_s, last.bwd_exchange_s) == (0.0, pytest.approx(send * occ[busy["stage_order"][1]]))
    assert busy["predicted"]["step_s"] > base["predicted"]["step_s"]


def test_a_profiles_occupancy_is_its_wall_per_cpu_second_or_one():
    assert profile_figures.exchange_occupancy({"timed": {"wall_per_cpu": 3.92}}) == 3.92
    assert profile_figures.exchange_occupancy({"timed": {"wall_per_cpu": None}}) == 1.0  # not held to a quota
    assert profile_figures.exchange_occupancy({}) == 1.0  # a profile older than the figure
    assert _linear("x", 0.01).exchange_occupancy == 0.0  # not from a profile: as an estimate, none


def test_the_split_balances_compute_and_exchanges_together(tmp_path):
    """A stage's rank is busy with its exchanges as well as its blocks (_stage_costs), so the split
    minimises the slowest stage's fwd + bwd + exchanges per microbatch: checked against every split
    by hand. A slow kind whose exchanges cost two of its blocks gives up blocks to the fast one."""
    links = inventory.Links(measured=False, busbw_gb_per_s=0.001, latency_us=100.0)  # 1 MB/s: 1 ms a sample
    inv = _inv(("fast", 1, 1e12), ("slow", 1, 1e12))
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    lm = LinkModel(links, tmp_path)
    before = planner.plan(inv, costs, lm, 8, "pp")
    costs["slow"].exchange_occupancy = 40.0
    p = planner.plan(inv, costs, lm, 8, "pp")
    order, b, m = p["stage_order"], p["microbatch_size"], p["microbatches"]
    x = pipeline_plan._exchanges(order, costs, lm, b, lambda a, c: False)
    assert x[order.index("slow")] == pytest.approx(40 * lm.send_s(1000 * b)) and x[order.index("fast")] == 0

    def slowest(split):
        sts = pipeline_plan.stages_for(order, costs, {"fast": 1e12, "slow": 1e12}, split, b, m, "1f1b")
        return max(st["fwd_s"] + st["bwd_s"] + e for st, e in zip(sts, x))
    best = min(slowest([a, 8 - a]) for a in range(1, 8))
    assert slowest(p["pp_split"]) == pytest.approx(best)
    assert p["pp_split"][order.index("slow")] < before["pp_split"][before["stage_order"].index("slow")]
