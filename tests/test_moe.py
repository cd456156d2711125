"""Mixture of Experts (workloads/lm/moe.py) and expert parallel (harness/parallel/expert.py):
the layer's routing, capacity, dropping and Switch loss pinned on hand-made routers; the
active-parameter FLOPs; expert parallel under real mpiexec at 2 and 4 ranks gated against the
one-rank MoE, its all-to-all bytes against the routing's; moe-tiny learns the Markov source."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

from harness.config.run_config import RunConfig
from harness.config.errors import UsageError
from results.record import schema
from tests.conftest import REPO, harness, run_dirs
from harness.parallel.dist import mpiexec
from workloads.lm import WORKLOAD as LM
from workloads.lm import n_params_no_pos
from workloads.lm.model import GPT
from workloads.lm.moe import MoE

MPIEXEC = mpiexec()  # harness/parallel/dist.py: the one lookup
STEPS = ["--set", "steps=3", "--set", "warmup_steps=1", "--set", "profile_steps=0", "--no-ingest"]
TINY = LM.sizes["moe-tiny"]


def test_every_other_mlp_is_a_mixture_of_experts():
    model = GPT(TINY)
    assert isinstance(model.h[1].mlp, MoE) and not isinstance(model.h[0].mlp, MoE)
    moe = model.h[1].mlp
    assert len(moe.experts) == 4 and moe.router.bias is None and moe.router.weight.shape == (4, 64)
    assert [m.__class__.__name__ for m in moe.experts[0]] == ["Linear", "GELU", "Linear"]
    assert moe.experts[0][0].weight.shape == (256, 64)  # each expert the dense MLP (d -> 4d -> d)
    small = LM.sizes["moe-small"]
    assert [isinstance(b.mlp, MoE) for b in GPT(small).h] == [False, True] * 3 and small.top_k == 2


def test_flops_count_only_the_active_experts():
    dense = LM.sizes["tiny"]
    assert n_params_no_pos(TINY) == n_params_no_pos(dense) + 64 * 4  # + the router; k=1: one MLP active
    small, dense_small = LM.sizes["moe-small"], LM.sizes["small"]
    mlp = 8 * 384 ** 2 + 5 * 384
    assert n_params_no_pos(small) == n_params_no_pos(dense_small) + 3 * (384 * 8 + mlp)  # 3 layers, top-2
    total = sum(p.numel() for p in GPT(small).parameters()) - small.seq_len * small.d_model
    assert total > n_params_no_pos(small) + 3 * 5 * mlp  # 6 of 8 experts per layer are idle per token


def _layer(k=1, cf=1.25) -> MoE:
    torch.manual_seed(0)
    layer = MoE(type("S", (), dict(n_experts=4, top_k=k, capacity_factor=cf, aux_loss_coef=0.01, d_model=8))())
    return layer


def test_capacity_drops_the_overflow_and_the_switch_loss_reaches_the_router():
    layer = _layer()
    x = torch.randn(3, 16, 8)
    x[..., 0] = 1.0
    with torch.no_grad():  # a router that sends every token to expert 0
        layer.router.weight.zero_()
        layer.router.weight[0, 0] = 10.0
    x.requires_grad_(True)
    y = layer(x)
    cap = math.ceil(1.25 * 16 * 1 / 4)
    assert layer.capacity(16) == cap == 5
    assert layer.stats["tokens_per_expert"].tolist() == [3 * cap, 0, 0, 0]
    assert layer.stats["dropped"] == 3 * (16 - cap)
    # kept tokens (the first C of each sequence): expert 0's output x its gate; dropped ones 0
    gate = torch.softmax(torch.tensor([10.0, 0, 0, 0]), 0)[0]
    with torch.no_grad():
        want = layer.experts[0](x[:, :cap]) * gate
    assert torch.allclose(y[:, :cap], want, atol=1e-6) and torch.all(y[:, cap:] == 0)
    # Switch's loss (coef x E x sum f_e P_e = 0.01 x 4 x 1 x gate here) reaches the router even
    # where the output's gradient is zero
    layer.train()
    layer(x).mul(0).sum().backward()
    assert layer.router.weight.grad.abs().sum() > 0


def test_top2_gates_renormalise_and_second_choices_queue_behind_first():
    layer = _layer(k=2, cf=2.0)
    x = torch.randn(2, 8, 8)
    layer(x)
    assert layer.stats["routed"] == 2 * 8 * 2
    assert layer.stats["tokens_per_expert"].sum() + layer.stats["dropped"] == 32


def test_routing_is_per_sequence_so_sharding_the_batch_changes_nothing():
    """Expert parallel's premise: capacity per sequence (GShard's group), so each half of a
    batch gives the same outputs and drops as the whole."""
    layer = _layer(cf=1.0)
    x = torch.randn(4, 16, 8)
    whole = layer(x)
    dropped = layer.stats["dropped"]
    layer.reset_stats()
    halves = torch.cat([layer(x[:2]), layer(x[2:])])
    assert torch.allclose(whole, halves, atol=1e-6) and layer.stats["dropped"] == dropped > 0


@pytest.mark.parametrize("parallel, size, fragment", [
    ({"ep": 2}, "tiny", "parallel.ep=2 needs a Mixture-of-Experts size (moe-tiny, moe-small); lm tiny is dense"),
    ({"ep": 3}, "moe-tiny", "parallel.ep=3 does not divide the 4 experts of lm moe-tiny; valid: 1, 2, 4"),
    ({"ep": 2, "data": "zero1"}, "moe-tiny", "composes with parallel.data=ddp or fsdp so far"),
    ({"ep": 2, "pp": 2}, "moe-tiny", "composes with parallel.data=ddp or fsdp so far"),
    ({"tp": 2}, "moe-tiny", "spread its experts with parallel.ep instead"),
    ({"ep": 0}, "moe-tiny", "parallel.ep must be an integer >= 1"),
])
def test_bad_expert_parallel_sections(parallel, size, fragment):
    with pytest.raises(UsageError) as e:
        RunConfig.from_dict({"workload": "lm", "size": size, "parallel": parallel})
    assert fragment in str(e.value)


def test_bad_expert_parallel_input_is_one_line_exit_2(env):
    for args, fragment in ((("--set", "parallel.ep=2"), "lm tiny is dense"),
                           (("--size", "moe-tiny", "--set", "parallel.ep=2", "--set", "ranks=3"),
                            "parallel.ep=2 does not divide ranks=3")):
        p = harness(env, "run", "lm", *args, timeout=120)
        assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and fragment in p.stderr, p.stderr
    assert not run_dirs(env)


# -- real ranks ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def moe_env(tmp_path_factory, data_root):
    results = tmp_path_factory.mktemp("moe")
    env = {**os.environ, "HARNESS_RESULTS": str(results), "HARNESS_DATA": str(data_root), "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    p = harness(env, "run", "lm", "--size", "moe-tiny", *STEPS)
    assert p.returncode == 0, p.stderr[-2000:]
    (ref,) = run_dirs(env)
    return env, ref


@pytest.mark.slow
@pytest.mark.parametrize("ranks, ep", [(2, 2), (4, 2)])
def test_expert_parallel_matches_one_rank_and_accounts_the_all_to_all(moe_env, ranks, ep):
    env, ref = moe_env
    before = set(run_dirs(env))
    p = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "harness", "run", "lm", "--size", "moe-tiny",
                        *STEPS, "--set", f"parallel.ep={ep}", "--set", f"reference_run={ref}"],
                       env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (d,) = [d for d in run_dirs(env) if d not in before]
    rec = schema.read_record(d, with_metrics=True)
    assert rec["status"]["status"] == "finished", rec["status"]  # the gate: the one-rank losses
    steps = [m for m in rec["metrics"] if m["kind"] == "step"]
    ref_steps = [m for m in schema.read_metrics(ref) if m["kind"] == "step"]
    assert [m["loss"] for m in steps] == pytest.approx([m["loss"] for m in ref_steps], rel=1e-5)
    for mine, one in zip(steps, ref_steps):  # the same routing: same tokens per expert, same drops
        assert mine["moe_tokens_per_expert"] == one["moe_tokens_per_expert"]
        assert mine["moe_dropped_frac"] == pytest.approx(one["moe_dropped_frac"])
        assert mine["moe_a2a_bytes_expected"] > 0 and one["moe_a2a_bytes_expected"] == 0
        assert mine["moe_load_max_over_mean"] >= 1.0
    acc = rec["summary"]["parallel"]
    for measured, analytic in zip(acc["measured_per_rank"], acc["analytic_per_rank"]):
        assert {k: v["bytes"] for k, v in measured.items()} == pytest.approx(analytic, rel=0.01)
        assert analytic["all_to_all"] > 0
    if ranks > ep:  # each expert has a copy on the other ep group: their gradients all-reduced too
        dense = sum(p.numel() * 4 for n, p in GPT(TINY).named_parameters() if ".experts." not in n and n != "lm_head.weight")
        assert acc["analytic_per_step"]["all_reduce"] > dense


@pytest.mark.slow
def test_moe_tiny_learns_the_markov_source(tmp_path, data_root, monkeypatch):
    """Time-to-train: moe-tiny reaches the entropy rate + margin, as the dense tiny does."""
    from harness.run.runner import execute
    monkeypatch.setenv("HARNESS_DATA", str(data_root))
    ref = LM.reference
    cfg = RunConfig(workload="lm", size="moe-tiny", mode="ttt", steps=ref.ttt_step_cap, warmup_steps=0,
                    eval_every=ref.ttt_eval_every, profile_steps=0)
    out = execute(cfg, tmp_path)
    s = schema.read_record(out.dir)["summary"]
    assert out.status == "finished" and s["quality"] <= s["quality_target"] and s["steps_done"] < ref.ttt_step_cap
