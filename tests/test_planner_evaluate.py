"""A plan predicted again with other costs (results/planner/evaluate.py): with the costs it was
made from it gives the plan's own figures back, planned and uniform; with a device twice as slow
the same split (not a new one) is priced slower; what it cannot price is one line."""
from __future__ import annotations

import dataclasses

import pytest

from results.planner import evaluate
from results.planner import inventory
from results.planner import search as planner
from results.planner.inventory import PlanError
from results.planner.links import LinkModel
from tests.test_planner import _linear

LINKS = inventory.Links(measured=False, busbw_gb_per_s=1.0, latency_us=100.0)


def _setup(tmp_path, memory: float = 1e12):
    inv = inventory.Inventory((inventory.DeviceKind("fast", 2, memory), inventory.DeviceKind("slow", 2, memory)), LINKS)
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.03)}
    return inv, costs, LinkModel(LINKS, tmp_path)


@pytest.mark.parametrize("strategy", ["dp", "pp"])
def test_the_costs_a_plan_was_made_from_give_its_own_figures_back(strategy, tmp_path):
    inv, costs, links = _setup(tmp_path)
    p = planner.plan(inv, costs, links, 24, strategy)
    assert p["strategy"] == strategy
    for side, want in (("planned", p["predicted"]), ("uniform", p["uniform"]["predicted"])):
        assert evaluate.step_s(p, inv, costs, links, side) == pytest.approx(want["step_s"], rel=1e-12)


@pytest.mark.parametrize("strategy", ["dp", "pp"])
def test_a_slower_profile_prices_the_same_split_slower(strategy, tmp_path):
    inv, costs, links = _setup(tmp_path)
    p = planner.plan(inv, costs, links, 24, strategy)
    slower = {**costs, "slow": _linear("slow", 0.06)}  # the slow kind profiled twice as slow
    before = evaluate.step_s(p, inv, costs, links)
    after = evaluate.step_s(p, inv, slower, links)
    assert after > before
    # the split being priced is the plan's, not the one a new plan would choose
    again = planner.plan(inv, slower, links, 24, strategy)
    key = "batch_split" if strategy == "dp" else "pp_split"
    if again[key] != p[key]:
        assert after >= again["predicted"]["step_s"] - 1e-12  # the new plan is at least as good on its costs


def test_data_parallel_repriced_is_the_closed_form_of_its_split(tmp_path):
    """No overlap: the slowest rank's compute on its share, then the ring all-reduce."""
    links_cfg = dataclasses.replace(LINKS, overlap=False)
    inv = inventory.Inventory((inventory.DeviceKind("fast", 2, 1e12), inventory.DeviceKind("slow", 2, 1e12)), links_cfg)
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.03)}
    links = LinkModel(links_cfg, tmp_path)
    p = planner.plan(inv, costs, links, 24, "dp")
    slower = {**costs, "slow": _linear("slow", 0.06)}
    grads = costs["fast"].total_params * costs["fast"].grad_bytes_per_param
    want = max(slower[k].sample_s(b) * b for k, b in zip(p["devices"], p["batch_split"])) + links.all_reduce_s(grads, 4)
    assert evaluate.step_s(p, inv, slower, links) == pytest.approx(want, rel=1e-12)


def test_what_it_cannot_price_is_one_line(tmp_path):
    inv, costs, links = _setup(tmp_path)
    p = planner.plan(inv, costs, links, 24, "dp")
    with pytest.raises(PlanError, match="unknown side 'best'; valid: planned, uniform"):
        evaluate.step_s(p, inv, costs, links, "best")
    with pytest.raises(PlanError, match="cannot predict a 'kinds' plan again; valid strategies: dp, pp"):
        evaluate.step_s({**p, "strategy": "kinds"}, inv, costs, links)


def test_the_profile_samples_until_its_median_is_precise_or_the_budget_ends(monkeypatch):
    """harness/measure/cells.stop on synthetic pass times, with a clock the test moves."""
    from harness.measure import cells
    clock = [0.0]
    monkeypatch.setattr(cells, "now", lambda: clock[0])
    steady = [1.0, 1.001, 0.999, 1.0, 1.002, 0.998]
    assert cells.stop(steady[:2], 0.0, 2, 0.0, 0.0, 4.0) == "repeats"  # precision off: just the repeats
    assert cells.stop(steady[:5], 0.0, 2, 0.0, 0.02, 4.0) is None  # 5 samples: no 95% interval of a median yet
    assert cells.stop(steady, 0.0, 2, 0.0, 0.02, 4.0) == "precision"
    assert cells.stop(steady, 0.0, 10, 0.0, 0.02, 4.0) is None  # never before `repeats` passes
    clock[0] = 0.5
    assert cells.stop(steady, 0.0, 2, 1.0, 0.02, 4.0) is None  # nor before cell_s (ranks busy together)
    noisy = [1.0, 1.5, 0.7, 1.3, 0.9, 1.6, 0.8]
    assert cells.stop(noisy, 0.0, 2, 0.0, 0.02, 4.0) is None  # wide interval, budget left: go on
    clock[0] = 4.0
    assert cells.stop(noisy, 0.0, 2, 0.0, 0.02, 4.0) == "budget"
    assert cells.half_width(steady) == pytest.approx((1.002 - 0.998) / 2 / 1.0)


def test_a_cohort_ends_a_cell_only_when_every_rank_has_met_its_rule():
    """harness/planning/cohort.Cohort on torch's own key-value store, three ranks in one process."""
    import torch.distributed as td

    from harness.planning.cohort import Cohort
    store = td.HashStore()
    starts = []
    ranks = [Cohort(lambda: starts.append(1), td.PrefixStore("p", store), 3) for _ in range(3)]
    for c in ranks:
        c.start()
    assert not ranks[0].done(True)  # its rule is met; the others' are not: it samples on
    assert not ranks[0].done(True)  # said once only: asking again does not count it twice
    assert not ranks[1].done(False) and not ranks[2].done(False)
    assert not ranks[1].done(True)
    assert ranks[2].done(True)  # the last rank's rule met: the cell ends for it ...
    assert ranks[0].done(False) and ranks[1].done(True)  # ... and for the others at their next pass
    for c in ranks:
        c.start()  # a new cell counts afresh
    assert not ranks[0].done(True) and len(starts) == 6


def test_a_cohort_rank_whose_peers_never_finish_stops_with_an_error():
    """A peer gone mid-cell never says it is done: the waiting rank stops after its patience."""
    import torch.distributed as td

    from harness.planning.cohort import Cohort
    clock = [0.0]
    c = Cohort(lambda: None, td.HashStore(), 2, patience_s=10.0, clock=lambda: clock[0])
    c.start()
    assert not c.done(True)
    clock[0] = 10.0
    assert not c.done(False)  # still within its patience
    clock[0] = 10.5
    with pytest.raises(TimeoutError, match="1 of 2 ranks finished measurement 1"):
        c.done(False)


def test_in_a_cohort_the_rounds_go_on_until_every_rank_is_done():
    """time_in_rounds with a cohort that ends after its peers: passes go on after this rank's
    rules were met, are kept, and counted as held."""
    import torch

    from harness.measure import cells

    class Peers:  # this rank's rules are met at once; the peers' after 5 more of its rounds
        def __init__(self):
            self.asked, self.started = 0, 0

        def start(self):
            self.started += 1

        def done(self, mine):
            self.asked += mine
            return self.asked > 5

    def layer():
        return cells.Layer(torch.nn.Linear(4, 4), lambda: torch.ones(2, 4))
    peers = Peers()
    rows = cells.time_in_rounds({"a": layer(), "b": layer()}, repeats=1, cohort=peers)
    assert peers.started == 1  # one measurement: the whole profile, started together
    for row in rows.values():
        assert row["ended_by"] == "repeats" and row["held_passes"] == 5 and len(row["fwd_samples_s"]) == 6
        assert row["rounds"] == 6
    alone = cells.time_in_rounds({"a": layer()}, repeats=1)["a"]
    assert alone["held_passes"] == 0 and len(alone["fwd_samples_s"]) == 1
