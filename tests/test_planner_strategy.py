"""Planner II: the strategy search (data parallel or pipelines of every depth), the seed's
utilization, DDP's overlap against its closed forms, and the host relay between unlike libraries;
on small inventories whose answers are worked out by hand."""
from __future__ import annotations

import pytest

from results.analysis import schedule as step_sim
from results.planner import inventory
from results.planner import search as planner
from results.planner.inventory import PlanError
from results.planner.links import LinkModel
from tests.test_planner import FREE, _inv, _linear


# -- the whole strategy: data parallel or pipelines of every depth (search.candidates) -------------
def test_auto_chooses_the_pipeline_depth_a_model_too_big_for_one_device_needs(tmp_path):
    """Model state 144,160 B (8 blocks of 16,000 + embedding 16,000 + head 160) on devices of
    100,000 B: no replica fits one device, so data parallel and 4 one-stage pipelines are refused;
    2 replicas x 2 stages and 1 x 4 stages fit. By hand (free links, 1F1B, one sample per
    microbatch): 2 stages of 4.1 and 4.5 block-times take (8 + 1) x 4.5 = 40.5, 4 stages of at most
    2.5 take (16 + 3) x 2.5 = 47.5: depth 2 wins."""
    costs = {"a": _linear("a", 0.01, memory_per_sample=10)}
    p = planner.plan(_inv(("a", 4, 100_000)), costs, LinkModel(FREE, tmp_path), 16, "auto")
    assert p["strategy"] == "pp" and p["replicas"] == 2 and p["pp_split"] == [4, 4]
    assert [c["plan"] for c in p["candidates"]] == ["pp 2 x (2 a stages)", "pp 1 x (4 a stages)"]
    assert p["candidates"][0]["step_s"] < p["candidates"][1]["step_s"]
    assert any(r.startswith("dp: device a") and "too small for a data-parallel replica" in r for r in p["refused"])
    assert "pp 2 x (2 a stages) predicts" in p["why"] and "faster than the next, pp 1 x (4 a stages)" in p["why"]


def test_auto_prefers_data_parallel_when_a_replica_fits(tmp_path):
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    p = planner.plan(_inv(("fast", 2, 1e12), ("slow", 2, 1e12)), costs, LinkModel(FREE, tmp_path), 64, "auto")
    assert p["strategy"] == "dp" and p["candidates"][0]["plan"] == "dp x4"
    assert {c["plan"] for c in p["candidates"][1:]} == {"pp 2 x (1 fast+1 slow stages)", "pp 1 x (2 fast+2 slow stages)"}
    assert "no pipeline bubble" in p["why"]


def test_seed_utilization_holds_the_mixed_job_against_each_kinds_own_best_job(tmp_path):
    """Linear costs and free links: a device's rate does not depend on its batch, so the balanced
    mixed job reaches the homogeneous jobs' sum (1.0 by HETHUB's definition) and the uniform split
    does not; each homogeneous job gets the mixed job's samples per device."""
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.03)}
    p = planner.plan(_inv(("fast", 1, 1e12), ("slow", 3, 1e12)), costs, LinkModel(FREE, tmp_path), 60, "dp")
    assert {k: r["global_batch"] for k, r in p["homogeneous"].items()} == {"fast": 15, "slow": 45}
    assert p["predicted"]["utilization_seed"] == pytest.approx(1.0, abs=0.03)
    assert p["uniform"]["predicted"]["utilization_seed"] < 0.8


def test_seed_utilization_is_not_defined_when_a_kind_cannot_train_alone(tmp_path):
    """A device that holds one block but not the model: it trains only inside a mixed pipeline."""
    costs = {"big": _linear("big", 0.01, memory_per_sample=10), "small": _linear("small", 0.01, memory_per_sample=10)}
    p = planner.plan(_inv(("big", 1, 1e12), ("small", 1, 40_000)), costs, LinkModel(FREE, tmp_path), 8, "auto")
    assert p["strategy"] == "pp" and dict(zip(p["stage_order"], p["pp_split"]))["small"] <= 2
    assert p["predicted"]["utilization_seed"] is None and p["homogeneous"]["small"]["samples_per_s"] is None
    assert "too small" in p["homogeneous"]["small"]["why"]
    assert p["homogeneous"]["big"]["samples_per_s"] > 0


# -- DDP's overlap of the gradient all-reduce with the backward (schedule.overlapped_reduce_end) ----
@pytest.mark.parametrize("k, c", [(4, 0.1), (4, 0.25), (4, 0.6), (10, 0.05), (1, 0.3)])
def test_overlap_model_matches_the_closed_forms(k, c):
    """k equal buckets, F = 1 s forward, B = 2 s backward, each bucket's all-reduce c seconds:
    F + B + c when c <= B/k (only the last bucket is exposed), F + B/k + k c otherwise."""
    o = step_sim.Overlap([1.0], [2.0], [1.0] * k, lambda b: c)
    want = 1.0 + 2.0 + c if c <= 2.0 / k else 1.0 + 2.0 / k + k * c
    assert step_sim.overlapped_reduce_end(o) == pytest.approx(want)
    no = step_sim.data_parallel_step([3.0], k * c, [0.0])
    yes = step_sim.data_parallel_step([3.0], k * c, [0.0], overlap=o)
    assert no["step_s"] == pytest.approx(3.0 + k * c) and yes["step_s"] == pytest.approx(want)
    assert yes["step_s"] <= no["step_s"] + 1e-12
    assert yes["exposed_reduce_s"] == pytest.approx(want - 3.0)


def test_overlap_waits_for_the_slowest_rank_and_buckets_fill_as_ddp_fills_them():
    o = step_sim.Overlap([1.0, 1.0], [2.0, 4.0], [1.0, 1.0], lambda b: 0.1)  # rank 1's backward twice as slow
    assert step_sim.overlapped_reduce_end(o) == pytest.approx(1.0 + 4.0 + 0.1)
    mib = 2 ** 20
    # 1 MiB first bucket, then 25 MiB ones, each closing at the parameter that reaches its limit
    assert step_sim.ddp_buckets([0.5 * mib] * 3 + [10 * mib] * 5) == [1.0 * mib, 30.5 * mib, 20 * mib]
    assert step_sim.ddp_buckets([100 * mib, 1.0]) == [100 * mib, 1.0]


# -- the host relay between kinds that share no collective library ---------------------------------
def test_the_host_relay_adds_two_pcie_copies_to_the_direct_path(tmp_path):
    est = inventory.Links(measured=False, busbw_gb_per_s=10, latency_us=1, pcie_gb_per_s=5)
    links = LinkModel(est, tmp_path)
    nbytes = 4e6
    assert links.send_s(nbytes, relay=True) == pytest.approx(links.send_s(nbytes) + 2 * nbytes / 5e9)
    assert links.all_reduce_s(nbytes, 4, relay=True) == pytest.approx(links.all_reduce_s(nbytes, 4) + 2 * nbytes / 5e9)
    with pytest.raises(PlanError, match="harness comm --via host"):
        LinkModel(inventory.Links(measured=False, busbw_gb_per_s=10, latency_us=1), tmp_path).send_s(1e6, relay=True)


def test_pipeline_boundaries_between_unlike_libraries_take_the_relay(tmp_path):
    costs = {"a": _linear("a", 0.01), "b": _linear("b", 0.01)}
    est = inventory.Links(measured=False, busbw_gb_per_s=1, latency_us=1, pcie_gb_per_s=0.01)  # a slow relay
    same = inventory.Inventory((inventory.DeviceKind("a", 1, 1e12, library="nccl"),
                                inventory.DeviceKind("b", 1, 1e12, library="nccl")), est)
    unlike = inventory.Inventory((inventory.DeviceKind("a", 1, 1e12, library="nccl"),
                                  inventory.DeviceKind("b", 1, 1e12, library="rccl")), est)
    p_same = planner.plan(same, costs, LinkModel(est, tmp_path), 8, "pp")
    p_unlike = planner.plan(unlike, costs, LinkModel(est, tmp_path), 8, "pp")
    assert p_same["host_relay"] == [False] and p_unlike["host_relay"] == [True]
    assert p_unlike["predicted"]["step_s"] > p_same["predicted"]["step_s"]
    dp = planner.plan(unlike, costs, LinkModel(est, tmp_path), 8, "dp")
    assert dp["host_relay"] is True and dp["predicted"]["reduce_s"] > planner.plan(
        same, costs, LinkModel(est, tmp_path), 8, "dp")["predicted"]["reduce_s"]


# -- branch and bound: a candidate is simulated only if its bound could beat the best -------------
from hypothesis import given, settings, strategies as st  # noqa: E402

_exchange = st.one_of(st.just(0.0), st.floats(0, 1))  # a GPU's stage (0) or a CPU rank's (pipeline_plan._stage_costs)
_stage = st.builds(step_sim.StageCost, st.floats(0.01, 5), st.floats(0.01, 5), st.floats(0, 1), st.floats(0, 2),
                   st.floats(0, 1), fwd_exchange_s=_exchange, bwd_exchange_s=_exchange)


@settings(max_examples=80, deadline=None)
@given(st.lists(_stage, min_size=1, max_size=6), st.integers(1, 12), st.sampled_from(["gpipe", "1f1b"]))
def test_the_pipeline_lower_bound_never_exceeds_the_simulated_step(stages, m, schedule):
    """If the bound ever exceeded a simulated step, pp_plan could prune the best candidate."""
    from results.planner.pipeline_plan import lower_bound
    if schedule == "1f1b" and m < len(stages):
        m = len(stages)
    assert lower_bound(stages, m) <= step_sim.simulate(schedule, stages, m)["step_s"] * (1 + 1e-9)


def test_the_lower_bound_is_tight_for_one_stage():
    from results.planner.pipeline_plan import lower_bound
    c = step_sim.StageCost(1.0, 2.0, 0.0, 0.5, 0.25)
    assert lower_bound([c], 4) == pytest.approx(step_sim.simulate("1f1b", [c], 4)["step_s"]) == pytest.approx(12.75)
