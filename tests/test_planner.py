"""The heterogeneous planner: the step simulator against the pipeline's closed forms, the data-
and pipeline-parallel splits against the proportional rule, the inventory's bad input (one line,
exit 2), the three-vendor what-if, and a measured profile feeding a plan."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from results.planner import inventory
from results.planner import layer_costs
from results.planner import search as planner
from results.analysis import schedule as step_sim
from results.planner.inventory import PlanError
from results.planner.links import LinkModel
from results.analysis.bubble import predicted_makespan, theory
from tests.conftest import REPO, harness

FREE = inventory.Links(measured=False, busbw_gb_per_s=1e9, latency_us=1e-9)  # links that cost ~nothing


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(2, 1), (2, 4), (4, 4), (4, 8), (3, 5)])
def test_equal_stages_reproduce_the_bubble_formula(schedule, p, m):
    if schedule == "1f1b" and m < p:
        pytest.skip("torch's 1F1B needs M >= P")
    sim = step_sim.simulate(schedule, [step_sim.StageCost(1.0, 2.0)] * p, m)
    assert sim["bubble"] == pytest.approx(theory(p, m))  # (p-1)/(m+p-1)
    assert sim["pipeline_s"] == pytest.approx((m + p - 1) * 3.0)


def test_unequal_stages_gpipe_closed_form_and_the_1f1b_bound():
    costs = [step_sim.StageCost(1.0, 2.5), step_sim.StageCost(3.0, 4.0), step_sim.StageCost(0.5, 1.0)]
    f, b, m = [c.fwd_s for c in costs], [c.bwd_s for c in costs], 6
    gpipe = step_sim.simulate("gpipe", costs, m)["pipeline_s"]
    assert gpipe == pytest.approx(sum(f) + (m - 1) * max(f) + sum(b) + (m - 1) * max(b))
    # 1F1B: the slowest stage (the middle one) never idles once fed, so the step is the first
    # stage's first forward + m x its forward and backward + the first stage's last backward;
    # the textbook sum(f+b) + (m-1) max(f+b) = 47 overestimates it
    assert step_sim.simulate("1f1b", costs, m)["pipeline_s"] == pytest.approx(1.0 + m * 7.0 + 2.5)
    times = {s: {"fwd_s": c.fwd_s, "bwd_s": c.bwd_s} for s, c in enumerate(costs)}
    assert predicted_makespan("gpipe", m, times) == pytest.approx(gpipe)  # the Pipeline page predicts with it


def test_1f1b_order_warms_up_then_alternates_and_sends_delay_the_step():
    assert step_sim.order("1f1b", 0, 3, 4) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1),
                                                  ("B", 2), ("B", 3)]
    assert step_sim.order("1f1b", 2, 3, 4)[:2] == [("F", 0), ("B", 0)]  # the last stage: no warm-up
    free = step_sim.simulate("1f1b", [step_sim.StageCost(1, 1)] * 2, 4)["step_s"]
    sends = step_sim.simulate("1f1b", [step_sim.StageCost(1, 1, send_s=0.5)] * 2, 4)["step_s"]
    reduce = step_sim.simulate("1f1b", [step_sim.StageCost(1, 1, reduce_s=0.7, optimizer_s=0.1)] * 2, 4)["step_s"]
    assert sends > free and reduce == pytest.approx(free + 0.8)


def _linear(name: str, per_sample_s: float, n_blocks: int = 8, memory_per_sample: float = 1e6) -> layer_costs.Costs:
    """Costs linear in the batch: a block takes per_sample_s per sample (fwd 1/3, bwd 2/3)."""
    pts = {k: {"fwd": [(1, per_sample_s * w / 3), (8, 8 * per_sample_s * w / 3)],
               "bwd": [(1, 2 * per_sample_s * w / 3), (8, 16 * per_sample_s * w / 3)]}
           for k, w in (("embedding", 0.1), ("block", 1.0), ("head", 0.5))}
    return layer_costs.Costs(name=name, params={"embedding": 1000, "block": 1000, "head": 10}, n_blocks=n_blocks,
                             boundary_bytes_per_sample=1000, state_bytes_per_param=16, grad_bytes_per_param=4,
                             optimizer_s_per_param=0.0, times=pts,
                             saved_per_sample={"embedding": 0, "block": memory_per_sample, "head": 0},
                             recompute_per_sample=1000)


def _inv(*devices) -> inventory.Inventory:
    return inventory.Inventory(tuple(inventory.DeviceKind(k, n, mem) for k, n, mem in devices), FREE)


@pytest.mark.parametrize("ratio", [2, 4])
def test_data_parallel_split_is_proportional_to_speed_and_beats_uniform(ratio, tmp_path):
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.01 * ratio)}
    inv = _inv(("fast", 1, 1e12), ("slow", 1, 1e12))
    p = planner.plan(inv, costs, LinkModel(FREE, tmp_path), 60, "dp")
    fast, slow = p["batch_split"]
    assert fast + slow == 60 and fast == pytest.approx(ratio * slow, abs=1)  # k x faster takes k x the batch
    assert p["uniform"]["batch_split"] == [30, 30]
    assert p["predicted"]["step_s"] < p["uniform"]["predicted"]["step_s"]
    # with free links and no waiting the mixed job reaches the sum of what each device does alone
    assert p["predicted"]["utilization"] == pytest.approx(1.0, abs=0.02)
    assert p["uniform"]["predicted"]["utilization"] < 0.9


def test_the_uniform_pipeline_in_the_planned_order_is_priced_on_the_planned_ranks(tmp_path):
    """pp_uniform(order=...): the even split on the plan's stage order (what an interleaved check
    runs on the plan's ranks), priced as evaluate prices that split in that order."""
    from results.planner import evaluate
    from results.planner.pipeline_plan import pp_uniform
    costs = {"slow": _linear("slow", 0.03), "fast": _linear("fast", 0.01)}
    inv, links = _inv(("fast", 1, 1e12), ("slow", 1, 1e12)), LinkModel(FREE, tmp_path)
    p = planner.plan(inv, costs, links, 8, "pp")
    flipped = [k for k in reversed(p["uniform"]["stage_order"])]
    u = pp_uniform(inv, costs, links, 8, p, order=flipped)
    assert u["stage_order"] == flipped and u["pp_split"] == p["uniform"]["pp_split"] == [4, 4]
    assert u["predicted"]["step_s"] == pytest.approx(evaluate.step_s({**p, "uniform": u}, inv, costs, links, "uniform"))
    # the head sits on the last stage: the order changes the uniform split's step
    assert u["predicted"]["step_s"] != pytest.approx(p["uniform"]["predicted"]["step_s"])


def test_a_plan_says_where_it_priced_beyond_the_profiled_microbatches(tmp_path):
    """_linear's times are "profiled" at 1 and 8 samples: a data-parallel share of 40 is extrapolated
    and the plan says so per kind; a pipeline of microbatch 1 is not; an estimate never is."""
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    inv, links = _inv(("fast", 1, 1e12), ("slow", 1, 1e12)), LinkModel(FREE, tmp_path)
    dp = planner.plan(inv, costs, links, 60, "dp")
    assert dp["batch_split"] == [40, 20]
    assert dp["extrapolated"] == ["fast: microbatch 40 priced beyond the profiled 1-8 (extrapolated)",
                                  "slow: microbatch 20 priced beyond the profiled 1-8 (extrapolated)"]
    assert planner.plan(inv, costs, links, 12, "dp")["extrapolated"] == []  # 8 and 4: within 1-8
    pp = planner.plan(inv, costs, links, 8, "pp")
    assert pp["microbatch_size"] <= 8 and pp["extrapolated"] == []
    est = layer_costs.from_shape("e", layer_costs.SHAPES["llama2-70b"], 1e15)
    assert est.profiled_microbatches() is None


def test_pipeline_split_gives_the_faster_device_more_blocks_and_respects_memory(tmp_path):
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.03)}
    links = LinkModel(FREE, tmp_path)
    p = planner.plan(_inv(("fast", 1, 1e12), ("slow", 1, 1e12)), costs, links, 8, "pp")
    by_kind = dict(zip(p["stage_order"], p["pp_split"]))
    assert sum(p["pp_split"]) == 8 and by_kind["fast"] == 6 and by_kind["slow"] == 2  # 3x faster: 3x the blocks
    assert p["predicted"]["step_s"] < p["uniform"]["predicted"]["step_s"]
    # the fast device holds 3 blocks' activations of one microbatch: it recomputes, or takes fewer
    tight = planner.plan(_inv(("fast", 1, 3.2e6), ("slow", 1, 1e12)), costs, links, 8, "pp")
    assert all(st["mem_bytes"] <= (3.2e6 if st["kind"] == "fast" else 1e12) for st in tight["stages"])
    assert any(st["recompute"] for st in tight["stages"]) or dict(zip(tight["stage_order"], tight["pp_split"]))["fast"] < 6
    with pytest.raises(PlanError, match="too small for any stage"):
        planner.plan(_inv(("fast", 1, 1000), ("slow", 1, 1e12)), costs, links, 8, "pp")


@pytest.mark.parametrize("text, fragment", [
    ("devices: [{kind: a, count: 1, memory_gb: 8, peak_tflops: 10, efficiency: 0.5, colour: red}]",
     "unknown field 'colour'"),
    ("devices: [{kind: a, count: 0, memory_gb: 8, peak_tflops: 10, efficiency: 0.5}]", "count must be a whole number > 0"),
    ("devices: [{kind: a, count: -3, memory_gb: 8, peak_tflops: 10, efficiency: 0.5}]", "count must be a whole number > 0"),
    ("devices: [{kind: a, count: 2, memory_gb: -8, peak_tflops: 10, efficiency: 0.5}]", "memory_gb must be a number > 0"),
    ("devices: [{kind: a, count: 2, memory_gb: 8, peak_tflops: 10}]", "efficiency must be a number > 0"),
    ("devices: [{kind: a, count: 2, memory_gb: 8, peak_tflops: 10, efficiency: 0.5, calibration: 0}]",
     "calibration must be a number > 0"),
    ("devices: [{kind: a, count: 2, memory_gb: 0.001, peak_tflops: 10, efficiency: 0.5}]\n"
     "links: {busbw_gb_per_s: 10, latency_us: 5}", "too small for any stage"),
    ("devices: [{kind: a, count: 64, memory_gb: 80, peak_tflops: 10, efficiency: 0.5}]\n"
     "links: {busbw_gb_per_s: 10, latency_us: 5}", "global batch 16 is smaller than the 64 data-parallel ranks"),
    ("a: &x [1]\nb: *x\n", "aliases are not accepted"),
    ("links: {busbw_gb_per_s: 10, latency_us: 5}\ndevices: [{kind: a, count: 1, memory_gb: 8, profile: nowhere}]",
     "is not a profile record"),
])
def test_bad_inventory_is_one_line_exit_2(text, fragment, env, tmp_path):
    f = tmp_path / "inv.yaml"
    f.write_text(text)
    size = "llama2-70b" if "0.001" in text else "tiny"
    strategy = "dp" if "count: 64" in text else "auto"
    p = harness(env, "plan", "--devices", str(f), "--size", size, "--global-batch", "16", "--strategy", strategy,
                timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
    assert fragment in p.stderr


def test_three_vendor_what_if_is_planned_in_seconds_and_labelled_a_simulation(env, tmp_path):
    """The what-if without its nodes (no tensor or context groups): pipelines of the three kinds.
    tests/test_planner_strategy.py plans it with them."""
    import yaml
    inv = yaml.safe_load(Path("harness/inventories/three-vendor.yaml").read_text())
    for d in inv["devices"]:
        d.pop("node_size"), d.pop("node_busbw_gb_per_s")
    (tmp_path / "flat.yaml").write_text(yaml.safe_dump(inv))
    p = harness(env, "plan", "--devices", str(tmp_path / "flat.yaml"), "--size", "llama2-70b",
                "--global-batch", "6400", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "SIMULATION" in p.stdout and "ESTIMATE" in p.stdout and "H100: llama2-70b at 388 TFLOP/s" in p.stdout
    plan = json.loads(Path(p.stdout.split("plan: ")[-1].strip()).read_text())
    assert plan["strategy"] == "pp" and plan["replicas"] == 100 and len(plan["stage_order"]) == 16  # 5 + 4 + 7
    assert sum(plan["pp_split"]) == 80 and plan["estimate"]
    per_block = {st["kind"]: (st["fwd_s"] + st["bwd_s"]) / st["blocks"] for st in plan["stages"] if 0 < plan["stages"].index(st) < 15}
    assert per_block["H100"] < per_block["MI250X"] < per_block["Ascend-910B"]  # by peak: 969 > 383 > 256
    blocks = {k: max(st["blocks"] for st in plan["stages"] if st["kind"] == k) for k in per_block}
    assert blocks["H100"] > blocks["MI250X"] > blocks["Ascend-910B"]
    assert all(st["mem_bytes"] <= {"H100": 80e9, "Ascend-910B": 64e9, "MI250X": 128e9}[st["kind"]] for st in plan["stages"])
    assert any(st["recompute"] for st in plan["uniform"]["stages"])  # 5 blocks on an Ascend only fit recomputed
    assert plan["predicted"]["step_s"] < plan["uniform"]["predicted"]["step_s"]


def test_llama2_70b_shape_has_its_published_parameter_count():
    shape = layer_costs.SHAPES["llama2-70b"]
    p = shape.params()
    total = p["embedding"] + shape.n_layer * p["block"] + p["head"]
    assert total == pytest.approx(68.98e9, rel=0.002)


@pytest.fixture(scope="module")
def tiny_profile(tmp_path_factory):
    import os
    results = tmp_path_factory.mktemp("profile")
    env = {**os.environ, "HARNESS_RESULTS": str(results), "PYTHONPATH": str(REPO)}
    p = harness(env, "profile", "lm", "--size", "tiny", "--microbatches", "1,4", "--repeats", "2", "--threads", "1")
    assert p.returncode == 0, p.stderr
    (d,) = (results / "profiles").glob("profile-lm-tiny-*")
    return results, d


def test_profile_measures_every_layer_kind_and_counts_the_model_once(tiny_profile):
    from harness.config import registry
    _, d = tiny_profile
    s = json.loads((d / "summary.json").read_text())
    assert json.loads((d / "status.json").read_text())["status"] == "finished"
    wl = registry.get("lm")
    model = wl.build_model(wl.sizes["tiny"])
    block = sum(x.numel() for x in model.h[0].parameters())
    assert s["params"]["block"] == block
    assert s["params"]["embedding"] + s["n_blocks"] * block + s["params"]["head"] == sum(x.numel() for x in model.parameters())
    for kind in ("embedding", "block", "head"):
        rows = s["layers"][kind]
        assert [r["microbatch"] for r in rows] == [1, 4] and all(r["fwd_s"] > 0 and r["bwd_s"] > 0 for r in rows)
        assert rows[1]["saved_bytes"] > rows[0]["saved_bytes"] > 0  # activations grow with the microbatch
    # sampled to the precision target (default +-2%) or the per-cell budget, and the row says which
    assert s["precision"] == 0.02 and s["budget_s"] == 4.0
    for r in (r for rows in s["layers"].values() for r in rows):
        assert r["ended_by"] in ("precision", "budget") and len(r["fwd_samples_s"]) >= 2
        if r["ended_by"] == "precision":
            assert len(r["fwd_samples_s"]) >= 6 and r["half_width"] <= 0.02
    assert s["layers"]["block"][0]["out_bytes"] == s["boundary_bytes_per_sample"]  # what a stage boundary sends
    # DDP's gradient copies, per byte: into the buckets and back is 2 x 4 B moved a byte of fp32
    # gradient, so between 1 ns (8 GB/s) and 10 us (100 KB/s) a byte on any CPU this runs on
    assert 1e-11 < s["grad_copy_s_per_byte"] < 1e-5
    # a pipeline's gradient accumulation, per byte: read two fp32 bytes and write one, same bounds
    assert 1e-11 < s["grad_accumulate_s_per_byte"] < 1e-5
    assert s["timed"]["grad_accumulate"]["cost_s"] > 0 and s["timed"]["by"] == "wall seconds"  # no quota here


def test_plan_from_measured_profiles_writes_a_cell_that_names_the_split(tiny_profile, tmp_path):
    import os
    results, d = tiny_profile
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"devices:\n  - {{kind: a, count: 1, memory_gb: 4, profile: {d}}}\n"
                   f"  - {{kind: b, count: 1, memory_gb: 4, profile: {d}}}\n"
                   "links: {busbw_gb_per_s: 1, latency_us: 100}\n")
    env = {**os.environ, "HARNESS_RESULTS": str(results), "PYTHONPATH": str(REPO)}
    cell = tmp_path / "cell.yaml"
    p = harness(env, "plan", "--devices", str(inv), "--size", "tiny", "--global-batch", "16", "--strategy", "dp",
                "--cell", str(cell))
    assert p.returncode == 0, p.stderr
    assert "batch split  8,8" in p.stdout  # the same profile twice: equal devices, equal shares
    assert 'batch_split: "8,8"' in cell.read_text() and "ranks: [2]" in cell.read_text()
    # a pipeline from a measured profile: its expected step over the blocks' measured spread, the
    # step of median durations beside it (results/analysis/schedule.simulate_expected)
    p = harness(env, "plan", "--devices", str(inv), "--size", "tiny", "--global-batch", "16", "--strategy", "pp")
    assert p.returncode == 0, p.stderr
    plan = json.loads(Path(p.stdout.split("plan: ")[-1].split()[0]).read_text())
    assert plan["predicted"]["step_s"] > plan["predicted"]["step_s_typical"] > 0
    assert f"{1e3 * plan['predicted']['step_s_typical']:.1f} ms with every operation at its median" in p.stdout
    p = harness(env, "plan", "--devices", str(inv), "--size", "small", "--global-batch", "16")
    assert p.returncode == 2 and "its profile is of lm/tiny, not lm/small" in p.stderr


def test_rank_cpu_quota_throttles_for_real_and_removes_its_group():
    import subprocess
    import sys

    from harness.parallel import cpu_quota as rank_cpu
    reason = rank_cpu.unavailable()
    if reason:
        pytest.skip(reason)
    code = ("import json, resource, time\nfrom harness.parallel import cpu_quota\nq = cpu_quota.Quota(0.2)\n"
            "t0 = time.time(); c0 = time.process_time()\nwhile time.time() - t0 < 0.6: pass\n"
            "print(json.dumps({**q.throttled(), 'cpu_share': (time.process_time() - c0) / (time.time() - t0), "
            "'group': str(q.group)}))\nq.release()\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["nr_throttled"] > 0 and out["cpu_share"] < 0.5  # a busy loop held to ~0.2 of a CPU
    assert not Path(out["group"]).exists()


def test_a_group_left_by_a_killed_rank_is_swept_by_the_next_quota():
    """A rank killed by a signal never runs release(): its empty group goes when the next rank
    takes a quota; a live process's group stays."""
    import signal
    import subprocess
    import sys

    from harness.parallel import cpu_quota as rank_cpu
    reason = rank_cpu.unavailable()
    if reason:
        pytest.skip(reason)
    code = "import os, signal\nfrom harness.parallel import cpu_quota\nq = cpu_quota.Quota(0.5)\nos.kill(os.getpid(), signal.SIGKILL)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    left = rank_cpu.ROOT / f"harness-{proc.pid}"
    assert left.exists()  # what the killed rank left
    q = rank_cpu.Quota(1.0)
    try:
        assert not left.exists() and q.group.exists()
    finally:
        q.release()


def test_bad_rank_cpu_is_one_line_exit_2(env):
    p = harness({**env, "HARNESS_RANK_CPU": "fast"}, "run", "lm", "--no-ingest", timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
    assert "HARNESS_RANK_CPU must be CPUs per rank" in p.stderr


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 9), k=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_the_one_split_search_equals_brute_force(n, k, seed):
    """results/analysis/schedule.min_max_split (used by the pipeline's balanced split and the
    planner) against every composition: the least maximum, then the least sum of squares."""
    import itertools
    import math
    import random

    from results.analysis.schedule import min_max_split
    rng = random.Random(seed)
    table = {(s, b): (math.inf if rng.random() < 0.15 else rng.choice([0.5, 1.0, 1.5, 2.0]) * b + rng.random())
             for s in range(k) for b in range(1, n + 1)}
    cost = lambda s, b: table[(s, b)]  # noqa: E731
    best = None
    for cuts in itertools.combinations(range(1, n), k - 1):
        sp = [b - a for a, b in zip((0, *cuts), (*cuts, n))]
        cs = [cost(s, b) for s, b in enumerate(sp)]
        if math.inf in cs:
            continue
        key = (max(cs), sum(c * c for c in cs))
        best = key if best is None or key < best else best
    got = min_max_split(n, k, cost)
    # the planner's way in, a part's costs a row at a time, gives the same split
    assert min_max_split(n, k, rows=lambda s, upto: [cost(s, b) for b in range(1, upto + 1)]) == got
    if best is None:
        assert got is None
    else:
        cs = [cost(s, b) for s, b in enumerate(got)]
        assert sum(got) == n and len(got) == k and min(got) >= 1
        assert max(cs) == pytest.approx(best[0]) and sum(c * c for c in cs) == pytest.approx(best[1])


def test_recomputation_cost_is_read_from_the_profile_where_it_was_measured():
    """A profile that timed the block under torch.utils.checkpoint gives recomputation's cost as
    measured (its backward minus the plain one); without it, the formula's one more forward."""
    plain = _linear("plain", 0.03)
    assert plain.recompute_s(4) == pytest.approx(plain.fwd("block", 4)) and not plain.recompute_measured
    measured = _linear("measured", 0.03)
    measured._times["block_recompute"] = {"fwd": measured._times["block"]["fwd"],
                                          "bwd": [(1, 0.05), (8, 0.4)]}  # 0.05 s/sample: 0.03 more than plain
    assert measured.recompute_measured
    assert measured.recompute_s(4) == pytest.approx(0.2 - measured.bwd("block", 4))
    assert measured.recompute_s(4) != pytest.approx(measured.fwd("block", 4))


def test_layer_profile_times_the_block_under_full_recomputation():
    """`harness profile`'s figures include the block under full recomputation (timed; the planner
    reads its backward), which keeps less for backward than the plain block."""
    from harness.planning import profile
    got = profile.measure("lm", "tiny", [2], repeats=5)
    assert [r["microbatch"] for r in got["layers"]["block_recompute"]] == [2]
    assert set(got["layers"]) == {"embedding", "block", "head", "block_recompute"}
    assert got["layers"]["block_recompute"][0]["saved_bytes"] < got["layers"]["block"][0]["saved_bytes"]
