"""Tensor and context parallel compute measured, not assumed: `harness profile --shards` times
one group member's share of a block (harness/planning/shards.py, workloads/lm/parallel_plan.py
shard_block), and the planner prices a group with it (results/planner/within_stage.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from harness.config import registry
from harness.config.errors import UsageError
from harness.planning import in_step, shards
from results.planner import search as planner
from results.planner.inventory import DeviceKind, Inventory
from results.planner.links import LinkModel
from results.planner.within_stage import Group, GroupCosts, NodeLinks
from tests.test_planner import FREE, _linear
from workloads.lm.model import Block
from workloads.lm.parallel_plan import shard_block


@pytest.mark.parametrize("tp", [2, 3])
def test_the_tensor_parallel_shards_of_a_block_sum_to_the_block(tp):
    """Megatron's split (row parallel after column parallel): summed over the tp ranks, the
    shards' attention and MLP outputs are the block's, less tp - 1 copies of the row-parallel
    bias, which the real plan adds once. So each shard is exactly a rank's part of the work."""
    size = registry.get("lm").sizes["small"]  # 6 heads: tp 2 and 3 both divide them
    torch.manual_seed(0)
    block = Block(size).eval()
    parts = [shard_block(block, tp, r) for r in range(tp)]
    x = torch.randn(2, 16, size.d_model)
    with torch.no_grad():
        h = block.ln_1(x)
        got = sum(p.attn(h) for p in parts) - (tp - 1) * block.attn.c_proj.bias
        assert torch.allclose(got, block.attn(h), atol=1e-5)
        h = block.ln_2(x)
        got = sum(p.mlp(h) for p in parts) - (tp - 1) * block.mlp[2].bias
        assert torch.allclose(got, block.mlp(h), atol=1e-5)
    matmul = lambda m: sum(p.numel() for n, p in m.named_parameters() if n.endswith("weight") and p.dim() == 2)  # noqa: E731
    assert matmul(parts[0]) * tp == matmul(block)
    assert sum(p.attn.c_attn.weight.shape[0] for p in parts) == block.attn.c_attn.weight.shape[0]


def _flops(module, x) -> int:
    with FlopCounterMode(display=False) as fc:
        module(x).sum().backward()
    return fc.get_total_flops()


@pytest.mark.parametrize("name", ["tp2", "cp2", "cp4"])
def test_a_members_share_does_one_nth_of_the_blocks_flops(name):
    """torch.utils.flop_counter over forward and backward: a tpN or cpN member's block does
    exactly 1/N of the whole block's matmul and attention FLOPs (the counter counts attention
    over all s x s scores, as the member's masked attention over s/N x s)."""
    wl = registry.get("lm")
    size = wl.sizes["small"]
    torch.manual_seed(0)
    block = Block(size)
    make = shards.stream(size.d_model)
    module, inp = shards.layer(wl, size, block, name, make)
    n = int(name[2:])
    x = inp(2)
    assert x.shape == (2, size.seq_len // (n if name.startswith("cp") else 1), size.d_model)
    assert _flops(module, x) * n == _flops(block, make(2, size.seq_len))
    assert module is not block and block.attn.attend is None  # a copy: the model is left as it was


def test_shard_names_parse_and_bad_ones_name_the_valid_choices():
    assert shards.parse("tp2,cp2") == ["tp2", "cp2"] and shards.parse("none") == [] and shards.parse("tp2,tp2") == ["tp2"]
    for bad in ("tp1", "xp2", "tp", "tp2;cp2", "2tp"):
        with pytest.raises(UsageError, match="valid: tpN or cpN"):
            shards.parse(bad)
    wl = registry.get("lm")
    assert "does not divide n_head" in shards.why_not(wl, wl.sizes["tiny"], "tp3")
    assert shards.why_not(wl, wl.sizes["tiny"], "cp2") is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30))
def test_shard_parser_fuzz_answers_a_list_or_one_usage_error(text):
    try:
        got = shards.parse(text)
    except UsageError as e:
        assert "\n" not in str(e)
        return
    assert all(shards._SPEC.match(n) for n in got)


def _with_shard(base, name: str, fraction: float):
    """base's costs plus a measured `name` member's share of the block, `fraction` at every size."""
    base._shares[f"block_{name}"] = {d: [(1, fraction), (8, fraction)] for d in ("fwd", "bwd")}
    return base


def test_a_group_is_priced_with_the_measured_share_where_the_profile_has_it(tmp_path):
    """tp2 measured at 0.7 of the block (efficiency 0.71): a member's block compute is 0.7 x the
    block's, not 1/2; cp2 unmeasured stays 1/2; both together multiply (0.7 x 0.5). The
    embeddings and head keep 1/(t c), and collectives are as before."""
    links = NodeLinks(LinkModel(FREE, tmp_path))
    base = _with_shard(_linear("a", 0.03), "tp2", 0.7)
    tp = GroupCosts(base, Group(tp=2), links)
    assert tp.fwd("block", 4) == pytest.approx(0.7 * base.fwd("block", 4))
    assert tp.bwd("block", 4) == pytest.approx(0.7 * base.bwd("block", 4))
    assert tp.fwd("head", 4) == pytest.approx(base.fwd("head", 4) / 2)
    assert tp.recompute_s(4) == pytest.approx(0.7 * base.recompute_s(4))
    assert "tp2 compute measured" in tp.source
    both = GroupCosts(base, Group(tp=2, cp=2), links)
    assert both.fwd("block", 4) == pytest.approx(0.35 * base.fwd("block", 4))
    assert "cp2 compute / 2" in both.source
    plain = GroupCosts(_linear("b", 0.03), Group(tp=2), links)
    assert plain.fwd("block", 4) == pytest.approx(base.fwd("block", 4) / 2)


def test_a_measured_inefficient_split_turns_the_search_from_tensor_parallel_to_pipelines(tmp_path):
    """test_planner_groups' model too big for one device (state 144,160 B on 100,000 B devices,
    two per node). Modelled as an even split, dp x2 of tp2 pairs wins: 16 samples x 8.6 block-times
    / 4 = 34.4 against the 2-stage pipelines' 40.5. With the tp2 member measured at 0.95 of the
    block, a pair member's sample costs 8 x 0.95 + 0.6 / 2 = 7.9, 8 samples 63.2: a pipeline wins
    (of cp2 pairs, whose share is still the even 1/2 here, or of single devices)."""
    inv = Inventory((DeviceKind("a", 4, 100_000, node_size=2),), FREE)
    even = planner.plan(inv, {"a": _linear("a", 0.01, memory_per_sample=10)}, LinkModel(FREE, tmp_path), 16, "auto")
    assert planner.label(even) == "dp x2 of a tp2 groups"
    slow = _with_shard(_linear("a", 0.01, memory_per_sample=10), "tp2", 0.95)
    p = planner.plan(inv, {"a": slow}, LinkModel(FREE, tmp_path), 16, "auto")
    assert p["strategy"] == "pp" and all(g["tp"] == 1 for g in p.get("groups", {}).values())
    tp = {c["plan"]: c["step_s"] for c in p["candidates"] if "tp2" in c["plan"]}
    assert tp["dp x2 of a tp2 groups"] == pytest.approx(0.01 / 3 * 3 * 63.2, rel=0.01)
    assert p["predicted"]["step_s"] < tp["dp x2 of a tp2 groups"]


def test_profile_times_the_shards_this_size_has_and_says_why_not_the_others(tmp_path):
    """lm tiny has 2 heads: tp2 and cp2 are timed, tp3 is not (named with the reason); the
    planner's costs read the measured shares from the record."""
    from harness.planning import profile
    from results.planner import layer_costs
    got = profile.measure("lm", "tiny", [2], repeats=3, shard_names=("tp2", "cp2", "tp3"))
    assert {"block_tp2", "block_cp2"} <= set(got["layers"]) and "block_tp3" not in got["layers"]
    assert got["shards"]["tp2"] == got["shards"]["cp2"] == "measured"
    assert "does not divide n_head" in got["shards"]["tp3"]
    lines = shards.efficiency_lines(got)
    assert any(ln.startswith("tp3: not timed (parallel.tp=3 does not divide") for ln in lines)
    assert any(ln.startswith("tp2: one member's compute at mb2 ") for ln in lines)
    d = tmp_path / "rec"
    from results.record import schema
    d.mkdir()
    schema.write_json(d / schema.CONFIG, {"kind": schema.PROFILE_KIND, "run_id": "rec", "workload": "lm",
                                          "size": "tiny", "record_version": schema.RECORD_VERSION})
    schema.write_json(d / schema.ENV, {})
    schema.open_record(d, 0.0)
    schema.close_record(d, {**got, "constraint": {"cpus": None, "how": "unconstrained"}}, schema.FINISHED, "", 0.0)
    c = layer_costs.from_profile("tiny", d)
    row = got["layers"]["block_tp2"][0]
    assert c.shard_fraction("tp", 2, 2, False) == row["share_fwd"]  # the interleaved pairs' median ratio
    assert c.shard_fraction("tp", 2, 64, True) == row["share_bwd"]  # a share, unlike a time, is not extrapolated
    assert len(row["share_samples"]) == len(row["fwd_samples_s"]) >= 3
    assert c.shard_fraction("tp", 4, 2, False) is None and "tp2 measured" in c.source
    # one rank has no group to time: the record says so, and the links price the collectives
    one = "needs a group of ranks: profile under mpiexec -n T or more"
    assert got["in_step"] == {"tp2": one, "cp2": one}
    assert c.group_in_step_s("tp", 2, 2) is None and "group timed" not in c.source
    assert "tp2 group in the step: not timed (needs a group of ranks" in "\n".join(lines)
    # end to end: `harness plan` on it says where its costs came from, and that only the links are estimated
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"devices:\n  - {{kind: cpu, count: 4, memory_gb: 1, node_size: 2, profile: {d}}}\n"
                   "links: {busbw_gb_per_s: 1, latency_us: 50}\n")
    r = subprocess.run([sys.executable, "-m", "harness", "plan", "--devices", str(inv), "--size", "tiny",
                        "--global-batch", "8", "--strategy", "auto"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "HARNESS_RESULTS": str(tmp_path / "res")})
    assert r.returncode == 0, r.stderr
    assert "SIMULATION (estimates: links ESTIMATE: 1 GB/s busbw, 50 us latency)" in r.stdout.splitlines()[0]
    plan = json.loads(Path(r.stdout.split("plan: ")[-1].split()[0]).read_text())
    assert "tp2 measured" in plan["sources"]["cpu"] and "cp2 measured" in plan["sources"]["cpu"]


def test_a_share_is_timed_in_alternating_passes_with_the_block(monkeypatch):
    """cells.Share on a fake clock: the block takes 10 + 20 ms, the member 6 + 12 ms, so its share
    is 0.6 both ways, every pair's; the passes alternate A B B A (drift within a pair cancels
    over two pairs), and the member's own times are its row's."""
    from harness.measure import cells
    clock, order = [0.0], []
    costs = {"whole": (0.010, 0.020), "part": (0.006, 0.012)}

    def fake_pass(module, make_input, loss_fn):
        order.append(module)
        f, b = costs[module]
        clock[0] += f + b
        return f, b, 100, 10, f, b
    monkeypatch.setattr(cells, "one_pass", fake_pass)
    monkeypatch.setattr(cells, "now", lambda: clock[0])
    row = cells.time_in_rounds({"share": cells.Share(("whole", None), ("part", None))}, repeats=4)["share"]
    assert row["share_fwd"] == pytest.approx(0.6) and row["share_bwd"] == pytest.approx(0.6)
    assert row["fwd_s"] == pytest.approx(0.006) and row["bwd_s"] == pytest.approx(0.012)
    assert order[2:10] == ["whole", "part", "part", "whole", "whole", "part", "part", "whole"]  # after 2 untimed
    assert row["ended_by"] == "repeats" and row["share_samples"] == pytest.approx([0.6] * 4)


def test_profile_cli_refuses_a_bad_shard_in_one_line():
    r = subprocess.run([sys.executable, "-m", "harness", "profile", "lm", "--shards", "tp1"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--shards: 'tp1' not understood; valid: tpN or cpN" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_group_timed_in_the_step_replaces_the_link_priced_collectives(tmp_path):
    """tp_step found the real step's collectives cost what the links price plus as much again in
    waiting and DTensor: where the profile timed the real group (0.05 s a block at b=4, 0.08 at 8),
    a member's block is its compute + half that each way, not the links' 2 all-reduces; with cp2
    beside it, tp's is read at b / c and cp's gather priced on the links until it is timed too;
    without the measurements, the links again."""
    from results.planner.links import LinkModel
    links = NodeLinks(LinkModel(FREE, tmp_path))
    base = _with_shard(_linear("a", 0.03), "tp2", 0.5)
    base._in_step = {"tp2": [(4, 0.05), (8, 0.08)]}
    tp = GroupCosts(base, Group(tp=2), links)
    assert tp.fwd("block", 4) == pytest.approx(0.5 * base.fwd("block", 4) + 0.025)
    assert tp.bwd("block", 8) == pytest.approx(0.5 * base.bwd("block", 8) + 0.04)
    assert tp.fwd("head", 4) == pytest.approx(base.fwd("head", 4) / 2 + links.gather_s(
        base.boundary_bytes_per_sample * 4, 2))  # outside the blocks: the links, as before
    assert "tp2 collectives timed in the step" in tp.source
    both = GroupCosts(base, Group(tp=2, cp=2), links)
    kv = links.gather_s(base.kv_bytes_per_sample * 8 / 2, 2)
    assert both.fwd("block", 8) == pytest.approx(0.25 * base.fwd("block", 8) + 0.025 + kv)
    assert "tp2 collectives timed in the step, the others on the node's links" in both.source
    base._in_step["cp2"] = [(4, 0.02), (8, 0.03)]
    both = GroupCosts(base, Group(tp=2, cp=2), links)
    assert both.fwd("block", 8) == pytest.approx(0.25 * base.fwd("block", 8) + 0.025 + 0.015)
    assert "tp2 and cp2 collectives timed in the step" in both.source
    assert "others" not in both.source
    even = GroupCosts(base.without_shards(), Group(tp=2), links)
    act = base.boundary_bytes_per_sample * 4
    assert even.fwd("block", 4) == pytest.approx(base.fwd("block", 4) / 2 + 2 * links.all_reduce_s(act, 2))
    assert "collectives on the node's links" in even.source


def test_a_two_rank_profile_times_the_real_tp2_and_cp2_groups_against_their_members(tmp_path):
    """Under mpiexec -n 2 the profile times the block as parallel.tp=2 runs it (DTensor, its
    collectives) and as parallel.cp=2 does (the real all-gather of K and V) against one member's,
    the same rounds on both ranks, and the planner's costs read both."""
    from harness.parallel.dist import mpiexec
    from results.planner import layer_costs
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path), "PYTHONPATH": str(repo)}
    p = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "harness", "profile", "lm", "--size", "tiny",
                        "--microbatches", "1,4", "--repeats", "1", "--threads", "1", "--cell-s", "0.1",
                        "--budget-s", "1", "--shards", "tp2,cp2"], env=env, cwd=repo, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "tp2 group in the step: mb1 +" in p.stdout and "cp2 group in the step: mb1 +" in p.stdout
    recs = sorted((tmp_path / "profiles").glob("profile-lm-tiny-*"))
    assert len(recs) == 2
    for rec in recs:
        got = json.loads((rec / "summary.json").read_text())["in_step"]
        c = layer_costs.from_profile("cpu", rec)
        for name in ("tp2", "cp2"):
            rows = got[name]
            assert [r["microbatch"] for r in rows] == [1, 4]
            for r in rows:
                assert len(r["extra_samples_s"]) == r["rounds"] >= in_step.MIN_ROUNDS and r["in_step_s"] >= 0
                # sampled to the profile's +-2% of the group's pass, or 3x its 1 s budget of passes, or
                # (tiny's passes are ms: 400 rounds may come first, CI 2026-12-04) the rounds cap
                assert r["ended_by"] in ("precision", "budget", "rounds cap")
                assert r["ended_by"] != "precision" or r["half_width"] <= 0.02
                assert r["ended_by"] != "budget" or r["sampled_s"] >= 3 * 1.0
                assert r["ended_by"] != "rounds cap" or (r["rounds"] == in_step.MAX_ROUNDS and r["sampled_s"] < 3 * 1.0)
                # at tiny, a group's collectives (4 all-reduces; 2 all-gathers and their reduce-scatters)
                # outweigh a member's small matmuls
                assert r["group_s"] > r["member_s"] > 0
            assert c.group_in_step_s(name[:2], 2, 4) == rows[1]["in_step_s"] and f"{name} group timed" in c.source


def test_the_groups_timing_is_sampled_until_its_median_extra_is_precise():
    """in_step.stop on synthetic rounds: never before MIN_ROUNDS; then when the median extra's
    interval is within +-precision of the group's pass, else at the budget; --precision 0 keeps
    the fixed MIN_ROUNDS."""
    n = in_step.MIN_ROUNDS
    group = [0.100] * 40
    tight = [0.010 + 0.0001 * (i % 5) for i in range(40)]     # spread 0.4 ms: +-0.2% of 100 ms
    wide = [0.010 + 0.0100 * (i % 2) for i in range(40)]      # alternating 10 / 20 ms: +-5%
    assert in_step.stop(tight[:n - 1], group[:n - 1], 99.0, 0.02, 4.0) is None
    assert in_step.stop(tight[:n], group[:n], 0.1, 0.02, 4.0) == "precision"
    assert in_step.half_width(tight[:n], group[:n]) <= 0.02
    assert in_step.stop(wide[:n], group[:n], 0.1, 0.02, 4.0) is None   # not precise, budget left
    assert in_step.stop(wide[:n], group[:n], 4.0, 0.02, 4.0) == "budget"
    assert in_step.half_width(wide[:20], group[:20]) == pytest.approx(0.05)
    assert in_step.stop(wide[:n], group[:n], 0.1, 0.0, 4.0) == "rounds"
    many = wide * (in_step.MAX_ROUNDS // len(wide))
    assert in_step.stop(many, [0.1] * len(many), 0.1, 0.02, 4.0) == "rounds cap"
    assert in_step.half_width(tight[:5], group[:5]) == float("inf")  # too few for an interval
