"""The roofline: STREAM bytes counted STREAM's way, ops of known shape on the right side of this
machine's ridge, per-op FLOPs summing to the model's, the profile/counter join, fused kernels
seen by name, and `harness roofline` printing the ceilings."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import harness, run_dirs
from harness.measure import breakdown
from harness.measure import membw
from harness.measure import op_counts
from harness.measure import op_roofline
from harness.config import registry
from harness.measure import roofline

NAMES = registry.names()


def test_stream_bytes_are_counted_the_stream_way():
    mib = 2 ** 20
    copy = membw.stream("copy", "cpu", 1, nbytes=mib)
    triad = membw.stream("triad", "cpu", 1, nbytes=mib)
    assert copy["bytes"] == 2 * mib and triad["bytes"] == 3 * mib  # read b (+ c), write a
    assert copy["result_first"] == 1.0 and triad["result_first"] == 1.0 + 3.0 * 2.0  # a = b + 3c ran
    assert copy["gb_per_s"] == pytest.approx(copy["bytes"] / copy["best_s"] / 1e9)
    with pytest.raises(ValueError, match="valid: copy, triad"):
        membw.stream("scale", "cpu")


def test_bytes_of_an_op_are_its_distinct_inputs_and_outputs():
    a, b = torch.randn(256, 512), torch.randn(512, 128)
    bias = torch.randn(128).expand(256, 128)  # stride 0: 128 distinct elements, not 256 x 128
    got = op_counts.count(lambda: (a @ b + bias).t())
    assert got["aten::mm"] == {"calls": 1, "flops": 2.0 * 256 * 512 * 128, "bytes": 4.0 * (256 * 512 + 512 * 128 + 256 * 128)}
    assert got["aten::add"]["bytes"] == 4.0 * (256 * 128 + 128 + 256 * 128) and got["aten::add"]["flops"] == 0
    assert got["aten::t"]["bytes"] == 0  # a view moves nothing


def test_a_profiled_event_goes_to_its_outermost_counted_ancestor():
    chains = {("aten::mkldnn_convolution", "aten::_convolution", "aten::convolution", "aten::conv2d"): 3.0,
              ("aten::copy_", "aten::_to_copy", "aten::to"): 1.0,
              ("aten::addmm", "aten::linear"): 2.0, ("aten::t", "aten::linear"): 0.5,
              ("autograd::engine::evaluate_function: AddmmBackward0",): 0.25}
    got = op_roofline.attribute(chains, {"aten::convolution", "aten::_to_copy", "aten::copy_", "aten::addmm", "aten::t"})
    assert got == {"aten::convolution": 3.0, "aten::_to_copy": 1.0, "aten::addmm": 2.0, "aten::t": 0.5,
                   "(unattributed)": 0.25}


def test_a_large_matmul_and_an_add_land_on_either_side_of_this_machines_ridge(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))  # measured now, on this machine
    ceil = roofline.ceilings("cpu", "fp32")
    assert ceil["ridge_flop_per_byte"] == pytest.approx(ceil["peak_flop_per_s"] / ceil["bw_bytes_per_s"])
    n = 1024
    x, w = torch.randn(n, n), torch.randn(n, n)
    # Two distinct 64 MiB inputs, STREAM's array size (membw.ARRAY_BYTES): with `big + big` on
    # 16 MiB one tensor was read twice and the 48 MiB counted sat partly in a 32 MiB L3, so the
    # add ran at 1.61x its DRAM roof in a CI run.
    big, other = torch.randn(2 ** 24), torch.randn(2 ** 24)

    def step(_=None):
        return x @ w, big + other

    summary, chains = breakdown.profile_steps(step, iter([None] * 3), 3, "cpu")
    rows = {r["op"]: r for r in op_roofline.op_rows(op_counts.count(step), op_roofline.attribute(
        chains, {"aten::mm", "aten::add"}), 3, ceil)}
    mm, add = rows["aten::mm"], rows["aten::add"]
    assert mm["intensity"] == pytest.approx(2 * n ** 3 / (3 * 4 * n * n))  # n/6 = 171 FLOP/byte
    assert mm["bound"] == "compute_bound" and mm["class_by_name"] == "compute_bound" and not mm["disagree"]
    assert add["bound"] == "memory_bound" and add["bytes"] == 3 * 4 * 2 ** 24
    for r in (mm, add):  # each reaches a real fraction of its roof (a noisy machine can overshoot a little)
        assert 0 < r["roof_frac"] < 1.5, r


@pytest.mark.parametrize("name", NAMES)
def test_counted_flops_per_op_sum_to_the_models_flops(name):
    """The harness's own counter (default SDPA kernels on CPU, grouped-conv correction) on a
    real training step of each workload: per-op FLOPs sum to flops_per_sample x batch within 5%."""
    wl = registry.get(name)
    size = wl.sizes["tiny"]
    model = wl.build_model(size)
    x, y = wl.example_batch(size, 2)
    x = wl.preprocess(wl.to_model_input(x), None).contiguous()
    counts = op_counts.count(lambda: wl.loss(model(x), y).backward())
    total = sum(c["flops"] for c in counts.values())
    assert total == pytest.approx(2 * wl.flops_per_sample(size), rel=0.05)


def test_fused_kernels_are_memory_bound_work_by_name():
    assert breakdown.classify("graph_0_cpp_fused_convolution_backward_sum_1") == "memory_bound"
    assert breakdown.classify("triton_red_fused_native_layer_norm_0") == "memory_bound"
    assert breakdown.classify("aten::convolution_backward") == "compute_bound"


@pytest.mark.slow
def test_compile_fuses_ops_and_the_record_says_so(env):
    """LM tiny eager and compiled: the compiled step dispatches fewer ops, its generated kernels
    are profiled by name, and both runs carry a roofline block."""
    got = {}
    for compile_ in ("false", "true"):
        out = harness(env, "run", "lm", "--no-ingest", "--set", "steps=3", "--set", "warmup_steps=2",
                      "--set", f"toggles.compile={compile_}", timeout=900)
        assert out.returncode == 0, out.stderr
        got[compile_] = json.loads((run_dirs(env)[-1] / "summary.json").read_text())
    eager, compiled = got["false"], got["true"]
    assert compiled["ops_per_step"] < eager["ops_per_step"]
    assert compiled["roofline"]["counted_flops_per_step"] == pytest.approx(eager["roofline"]["counted_flops_per_step"])
    assert compiled["breakdown"]["fused_kernels_per_step"] > 0 and eager["breakdown"]["fused_kernels_per_step"] == 0
    assert compiled["time_frac_memory_bound"] > 0  # the fused kernels, classified by name


def test_roofline_command_prints_the_ceilings(env, tmp_path):
    out = harness({**env, "HARNESS_CACHE": str(tmp_path)}, "roofline", "--device", "cpu")
    assert out.returncode == 0, out.stderr
    assert "triad" in out.stdout and "ridge" in out.stdout and "fp32  peak" in out.stdout
    assert "(fp32 matmul, " in out.stdout  # the matmul that set each peak is named
    cached = json.loads((tmp_path / "membw.json").read_text())
    assert any("stream_triad" in k for k in cached)
    bad = harness(env, "roofline", "--device", "tpu")
    assert bad.returncode == 2 and bad.stderr.strip().startswith("harness: error: unknown or absent device 'tpu'")


def test_a_dtypes_peak_is_at_least_fp32s_and_says_which_matmul_set_it(monkeypatch, tmp_path):
    """On a CPU without bf16 instructions the bf16 matmul ran at 0.84 GFLOP/s against ~100 in fp32,
    and autocast's convolutions beat it ("MFU 141%"): the ceiling of any dtype is at least fp32's."""
    from harness.measure import peak
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    speeds = {"fp32": 100e9, "bf16": 0.84e9, "fp16": 300e9}
    monkeypatch.setattr(peak, "measure", lambda device, dtype: speeds[dtype])
    assert peak.measured_peak("cpu", "bf16") == 100e9
    assert peak.peak_source("cpu", "bf16") == "fp32 matmul; bf16's own reached 0.84 GFLOP/s"
    assert peak.measured_peak("cpu", "fp16") == 300e9 and peak.peak_source("cpu", "fp16") == "fp16 matmul"
    assert peak.for_run("cpu", "fp32") == {"peak_dtype": "fp32", "peak_flop_per_s_measured": 100e9,
                                           "peak_source": "fp32 matmul"}


def test_the_peak_matmul_grows_until_one_product_takes_long_enough():
    """A slow dtype is measured on a smaller product (six 1024-edge bf16 products took 15 s there);
    a fast one still reaches the full edge."""
    from harness.measure import peak
    # fake clock: the product's time is its FLOPs at a fixed speed
    at = lambda flops: lambda a, b, device: 2 * a.shape[0] ** 3 / flops  # noqa: E731
    assert peak.edge("cpu", "fp32", timed=at(100e9)) == peak.SIDE["cpu"]
    assert peak.edge("cpu", "fp32", timed=at(0.84e9)) == 512  # 256: 40 ms < MIN_S; 512: 0.32 s
    assert peak.edge("cpu", "fp32", timed=at(1e15)) == peak.SIDE["cpu"]
