"""Planner II, the rest of the strategy: tensor and context parallel groups inside a node
(results/planner/within_stage.py) and data parallel over each kind's own job, pipelines of unlike
depth (results/planner/kind_jobs.py); small inventories whose answers are worked out by hand."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from results.planner import inventory
from results.planner import search as planner
from results.planner.inventory import DeviceKind, Inventory, PlanError
from results.planner.kind_jobs import _split
from results.planner.links import LinkModel
from results.planner.within_stage import Group, GroupCosts, NodeLinks, options
from tests.test_planner import FREE, _linear

SLOW = inventory.Links(measured=False, busbw_gb_per_s=1e-3, latency_us=1)  # 1 MB/s: 1000 B take 2 ms to all-reduce


def test_a_tensor_parallel_member_does_half_the_work_holds_half_the_weights_and_pays_two_all_reduces(tmp_path):
    """Megatron with sequence parallel, t = 2: per block forward compute / 2 plus 2 all-reduces of
    b x 1000 B (the boundary activations) at the node's 1 MB/s busbw: 2 x (1 us + 2 (1/2) x 1000 b / 1e6 s)."""
    base = _linear("a", 0.03)
    links = LinkModel(SLOW, tmp_path)
    g = GroupCosts(base, Group(tp=2), NodeLinks(links, busbw_gb_per_s=1e-3))
    comm = 2 * (1e-6 + 1000 * 4 / 1e6)
    assert g.fwd("block", 4) == pytest.approx(base.fwd("block", 4) / 2 + comm)
    assert g.bwd("block", 4) == pytest.approx(base.bwd("block", 4) / 2 + comm)
    assert g.params == {"embedding": 500, "block": 500, "head": 5}
    assert g.saved("block", 4) == pytest.approx(base.saved("block", 4) / 2)
    assert g.group_reduce_s(1000) == 0.0  # tensor ranks hold different weights: nothing to reduce among them
    cp = GroupCosts(base, Group(cp=2), NodeLinks(links, busbw_gb_per_s=1e-3))
    assert cp.params == base.params and cp.saved("block", 4) == pytest.approx(base.saved("block", 4) / 2)
    # context parallel: K and V (2 x the boundary) gathered forward, half an all-reduce's volume
    assert cp.fwd("block", 4) == pytest.approx(base.fwd("block", 4) / 2 + 1e-6 + 2000 * 4 / 1e6 / 2)
    assert cp.group_reduce_s(1000) == pytest.approx(1e-6 + 4000 / 1e6)  # its ranks' gradients, all-reduced


def test_a_plan_that_keeps_the_vocabulary_replicated_is_priced_so(tmp_path):
    """The harness's LM plan splits only the blocks (workloads/lm/parallel_plan.py): each tensor
    rank runs the embeddings and the head whole, holds their weights whole and exchanges nothing
    for them; only context parallel's sequence split divides them. A what-if (Megatron's
    vocabulary-parallel embedding and head) divides them by t and pays their collectives."""
    base = _linear("a", 0.03)
    base.tp_splits = ("block",)
    node = NodeLinks(LinkModel(SLOW, tmp_path), busbw_gb_per_s=1e-3)
    g = GroupCosts(base, Group(tp=2), node)
    for kind in ("embedding", "head"):
        assert g.fwd(kind, 4) == pytest.approx(base.fwd(kind, 4)) and g.bwd(kind, 4) == pytest.approx(base.bwd(kind, 4))
    assert g.fwd("block", 4) == pytest.approx(base.fwd("block", 4) / 2 + 2 * (1e-6 + 1000 * 4 / 1e6))
    assert g.params == {"embedding": 1000, "block": 500, "head": 10} and g.total_params == 1000 + 8 * 500 + 10
    assert "embedding and head replicated over tp" in g.source
    both = GroupCosts(base, Group(tp=2, cp=2), node)
    assert both.fwd("head", 4) == pytest.approx(base.fwd("head", 4) / 2)  # the sequence still halves it
    assert both.saved("block", 4) == pytest.approx(base.saved("block", 4) / 4)
    megatron = GroupCosts(_linear("a", 0.03), Group(tp=2), node)
    head_comm = 1e-6 + (1000 * 4 / 1e6) / 2  # an all-gather of b x 1000 B: half an all-reduce's volume
    assert megatron.fwd("head", 4) == pytest.approx(base.fwd("head", 4) / 2 + head_comm)
    assert megatron.params["embedding"] == 500 and "replicated" not in megatron.source


def test_the_lm_profile_says_its_plan_splits_only_the_blocks():
    """What profile_layers declares is read off the plan itself: Colwise/Rowwise styles only
    under h.*; a plan that split the head or the embedding would be classified so."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    from harness.config import registry
    from workloads.lm.parallel_plan import split_kinds
    wl = registry.get("lm")
    for size in ("tiny", "small"):
        model = wl.build_model(wl.sizes[size])
        assert wl.profile_layers(model, wl.sizes[size])["tp_splits"] == ["block"]
        assert all(k.startswith("h.") for k, v in wl.tensor_parallel_plan(model, 2, True).items()
                   if isinstance(v, (ColwiseParallel, RowwiseParallel)))
    assert split_kinds({"tok_embeddings": RowwiseParallel(), "h.0.mlp.0": ColwiseParallel(),
                        "lm_head": ColwiseParallel()}) == ["block", "embedding", "head"]


def test_groups_stay_in_a_node_divide_the_count_and_the_kv_heads():
    c = _linear("a", 0.01)
    assert options(DeviceKind("a", 8, 1e9, node_size=1), c, 1) == [Group()]
    got = options(DeviceKind("a", 8, 1e9, node_size=4), c, 4)
    assert set(got) == {Group(), Group(2, 1), Group(4, 1), Group(1, 2), Group(2, 2), Group(1, 4)}
    assert Group(4, 1) not in options(DeviceKind("a", 6, 1e9, node_size=4), c, 4)  # 6 devices: no group of 4
    c.kv_heads = 2
    assert Group(4, 1) not in options(DeviceKind("a", 8, 1e9, node_size=4), c, 4)  # 2 KV heads over 4 ranks


def test_a_model_too_big_for_a_device_trains_data_parallel_over_tensor_parallel_pairs(tmp_path):
    """The depth test's model (state 144,160 B) on four 100,000 B devices, now two per node: a tp2
    member holds 72,080 B, so data parallel over two pairs fits. By hand, in block-times per sample
    with free links: 16 samples x 8.6 / 4 devices = 34.4, against the 2-stage pipelines' 40.5."""
    costs = {"a": _linear("a", 0.01, memory_per_sample=10)}
    inv = Inventory((DeviceKind("a", 4, 100_000, node_size=2),), FREE)
    p = planner.plan(inv, costs, LinkModel(FREE, tmp_path), 16, "auto")
    assert planner.label(p) == "dp x2 of a tp2 groups" and p["groups"] == {"a": {"tp": 2, "cp": 1}}
    assert p["batch_split"] == [8, 8] and len(p["devices"]) == 4
    assert p["predicted"]["step_s"] == pytest.approx(0.01 / 3 * 3 * 34.4, rel=0.01)
    plain = [c["step_s"] for c in p["candidates"] if c["plan"] == "pp 2 x (2 a stages)"]
    assert plain and p["predicted"]["step_s"] < plain[0]  # the plain shapes are still compared
    # a group's share is priced from its device kind's profile (1-8 samples): 8 is inside it, 20 is not
    assert p["extrapolated"] == []
    wide = planner.plan(inv, costs, LinkModel(FREE, tmp_path), 40, "dp")
    assert wide["extrapolated"] == ["a tp2: microbatch 20 priced beyond the profiled 1-8 (extrapolated)"]


def test_node_sizes_only_add_choices_the_plan_is_never_slower(tmp_path):
    costs = {"f": _linear("f", 0.01, memory_per_sample=10), "s": _linear("s", 0.03, memory_per_sample=10)}
    links = LinkModel(SLOW, tmp_path)
    flat = Inventory((DeviceKind("f", 4, 120_000), DeviceKind("s", 4, 120_000)), SLOW)
    nodes = Inventory((DeviceKind("f", 4, 120_000, node_size=4), DeviceKind("s", 4, 120_000, node_size=4)), SLOW)
    a, b = planner.plan(flat, costs, links, 32), planner.plan(nodes, costs, links, 32)
    assert b["predicted"]["step_s"] <= a["predicted"]["step_s"] * (1 + 1e-12)


def test_data_parallel_over_each_kinds_own_pipeline_reaches_the_seeds_bound(tmp_path):
    """Kind p (small devices) trains alone only as a 2-stage pipeline, kind d as one replica: their
    own jobs at their own speed are the seed's bound, and with free links the per-kind plan reaches
    it but for the rounding of the batch into whole pipelines; its shares sum to the batch."""
    costs = {"p": _linear("p", 0.01, memory_per_sample=10), "d": _linear("d", 0.02, memory_per_sample=10)}
    inv = Inventory((DeviceKind("p", 2, 100_000), DeviceKind("d", 1, 1e12)), FREE)
    p = planner.plan(inv, costs, LinkModel(FREE, tmp_path), 48, "auto")
    kinds = next(c for c in p["candidates"] if c["plan"].startswith("per kind"))
    assert "p pp 1 x (2 p stages)" in kinds["plan"] and "d dp x1" in kinds["plan"]
    alone = planner.alone_jobs(inv, costs, LinkModel(FREE, tmp_path), 48, "1f1b")
    from results.planner.kind_jobs import kinds_plan
    k = kinds_plan(inv, costs, LinkModel(FREE, tmp_path), 48, "1f1b", alone)
    assert sum(j["global_batch"] for j in k["jobs"].values()) == 48
    steps = [j["step_s"] for j in k["jobs"].values()]
    assert max(steps) / min(steps) < 1.15  # the kinds finish together, to a sample
    bound = sum(r["samples_per_s"] for r in planner.homogeneous_rates(alone).values())
    assert k["predicted"]["samples_per_s"] / bound == pytest.approx(1.0, abs=0.08)
    assert k["predicted"]["step_s"] < k["uniform"]["predicted"]["step_s"]


def test_the_per_kind_split_is_exact_in_whole_replicas():
    """Quanta 25, 16 and 70 (the what-if's pipeline replica counts) and a batch of 6400: the
    greedy fill left a remainder no quantum fits; the split searches the remainders."""
    inv = Inventory((DeviceKind("h", 1, 1), DeviceKind("a", 1, 1), DeviceKind("m", 1, 1)), FREE)
    q = {"h": (25, 25), "a": (16, 16), "m": (70, 70)}
    got = _split(inv, q, {"h": 0.5, "a": 0.12, "m": 0.38}, 6400)
    assert sum(got.values()) == 6400 and all(got[k] % q[k][0] == 0 for k in q)
    assert abs(got["h"] / 6400 - 0.5) < 0.02 and abs(got["a"] / 6400 - 0.12) < 0.02
    with pytest.raises(PlanError, match="does not split"):
        _split(inv, {"h": (20, 20), "a": (40, 40), "m": (60, 60)}, {"h": 0.3, "a": 0.3, "m": 0.4}, 6410)


def _run_plan(args, cwd):
    return subprocess.run([sys.executable, "-m", "harness", "plan", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_the_what_if_chooses_groups_per_kind_and_says_it_cannot_write_a_cell(tmp_path):
    """Three kinds with their nodes (SIMULATION): the chosen strategy per kind is printed and in
    the plan; no sweep cell can hold per-kind tensor/context groups, so --cell fails in one line."""
    root = Path(__file__).resolve().parent.parent
    cell = tmp_path / "cell.yaml"
    p = _run_plan(["--devices", "harness/inventories/three-vendor.yaml", "--size", "llama2-70b", "--global-batch",
                   "6400", "--cell", str(cell)], root)
    assert p.returncode == 2 and not cell.exists()
    assert p.stderr.count("\n") == 1 and "cell not written" in p.stderr and "one tp and cp" in p.stderr
    plan = json.loads(Path(p.stdout.split("plan: ")[-1].strip()).read_text())
    assert plan["groups"] and set(plan["real_kind"].values()) == {"H100", "Ascend-910B", "MI250X"}
    nodes = {d["kind"]: d["node_size"] for d in yaml.safe_load(
        (root / "harness/inventories/three-vendor.yaml").read_text())["devices"]}
    for planned, g in plan["groups"].items():
        assert g["tp"] * g["cp"] <= nodes[planned]  # keyed by the real kind
    for kind in ("H100", "Ascend-910B", "MI250X"):
        assert f"  {kind} x" in p.stdout  # the per-kind line: its group and its part
    assert plan["predicted"]["step_s"] < plan["uniform"]["predicted"]["step_s"]
    assert plan["predicted"]["utilization_seed"] > 0.5 and len(plan["devices"]) == 1600
    Path(p.stdout.split("plan: ")[-1].strip()).unlink()


def test_accumulation_then_recomputation_where_memory_not_speed_limits_a_share(tmp_path):
    """fast (3x slow) holds 12 samples' activations (8 blocks x 1 MB each): the balanced split
    wants ~24. Accumulating its gradients over microbatches of 8 (its best profiled size: per-sample
    time is flat here, the larger wins) it takes 24 in 3, by hand max(24 x 0.086, 8 x 0.258) = 2.064 s.
    Recomputing keeps 8 x 1000 B + one block's 1 MB per sample, so it takes 22 at 4/3 its block time
    (a forward again in backward): max(22 x 0.1127, 10 x 0.258) = 2.58 s; the capped split's
    20 x 0.258 = 5.16 s. Where not even one sample's activations fit, only recomputation trains it."""
    state = (1000 + 8 * 1000 + 10) * 16
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.03)}
    inv = Inventory((DeviceKind("fast", 1, state + 12 * 8e6 + 1), DeviceKind("slow", 1, 1e12)), FREE)
    p = planner.plan(inv, costs, LinkModel(FREE, tmp_path), 32, "dp")
    assert planner.label(p) == "dp x2 (microbatches 3.1)" and p["microbatch_limit"] == {"fast": 8, "slow": 8}
    assert p["batch_split"] == [24, 8] and p["predicted"]["step_s"] == pytest.approx(2.064, rel=0.01)
    steps = {c["plan"]: c["step_s"] for c in p["candidates"]}
    assert steps["dp x2 (recompute on fast)"] == pytest.approx(2.58, rel=0.01)
    assert steps["dp x2"] == pytest.approx(20 * 0.258, rel=0.01)
    # half a sample's activations: data parallel plain or accumulating can't hold one; recomputing, 3
    tight = Inventory((DeviceKind("fast", 1, state + 4e6), DeviceKind("slow", 1, 1e12)), FREE)
    p = planner.plan(tight, costs, LinkModel(FREE, tmp_path), 32, "dp")
    assert planner.label(p) == "dp x2 (recompute on fast)" and p["batch_split"] == [3, 29]
