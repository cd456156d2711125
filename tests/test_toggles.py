"""Each toggle on tiny CosmoFlow: what it changes, that it runs (or says why it can't)."""
from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

from harness.config import registry
from harness.run import runner
from harness.config.run_config import RunConfig, Toggles
from harness.run.build import TrainStep, build
from harness.run.build import check as unsupported_reason
from results.record import schema

WL = registry.get("cosmoflow")


def _cfg(**toggles) -> RunConfig:
    return RunConfig(workload="cosmoflow", steps=2, warmup_steps=1, toggles=Toggles(**toggles))


def _step(cfg: RunConfig) -> TrainStep:
    size = WL.sizes["tiny"]
    model = WL.build_model(size)
    return build(cfg, WL, model, lambda m: WL.build_optimizer(m, size, 8, 10))


def _batch():
    return torch.randint(0, 30, (2, 32, 32, 32, 4), dtype=torch.int16), torch.zeros(2, 4)  # N,D,H,W,C


def _layout_copies(ts) -> int:
    """aten::clone calls in prepare(): the layout copies (dtype casts are aten::_to_copy)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        ts.prepare(*_batch())
    return sum(e.count for e in prof.key_averages() if e.key == "aten::clone")


def test_channels_last_model_and_input_without_layout_copies():
    ts = _step(_cfg(channels_last=True))
    conv = ts.eval_model.convs[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last_3d) and not conv.is_contiguous()
    xp, _ = ts.prepare(*_batch())
    assert xp.shape == (2, 4, 32, 32, 32) and xp.dtype == torch.float32
    assert xp.is_contiguous(memory_format=torch.channels_last_3d)
    assert _layout_copies(ts) == 0  # the NDHWC batch is consumed as it lies


def test_channels_last_off_makes_ncdhw_with_one_copy():
    ts = _step(_cfg())
    x, y = _batch()
    xp, _ = ts.prepare(x, y)
    assert xp.is_contiguous() and ts.eval_model.convs[0].weight.is_contiguous()
    torch.testing.assert_close(xp, torch.log1p(x.float()).permute(0, 4, 1, 2, 3).contiguous())
    assert _layout_copies(ts) == 1


def test_amp_bf16_autocasts_forward():
    ts = _step(_cfg(amp="bf16"))
    x, y = ts.prepare(*_batch())
    with ts.autocast():
        h = ts.model.convs[0](x)
    assert h.dtype == torch.bfloat16
    assert torch.isfinite(ts(x, y))


@pytest.mark.parametrize("toggles, fragment", [
    ({"cuda_graphs": True}, "cuda_graphs needs a CUDA device"),
    ({"amp": "fp16"}, "amp=fp16 needs CUDA"),
])
def test_cpu_unsupported_reasons(toggles, fragment):
    if torch.cuda.is_available():
        pytest.skip("CPU-only expectation")
    assert fragment in unsupported_reason(_cfg(**toggles), WL)


def test_supported_toggles_have_no_reason():
    for t in ({"dali": True}, {"channels_last": True}, {"compile": True}, {"amp": "bf16"}):
        assert unsupported_reason(_cfg(**t), WL) is None, t


def test_missing_dali_is_unsupported_not_a_silent_torch_run(tmp_path, data_root, monkeypatch):
    monkeypatch.setitem(sys.modules, "nvidia.dali", None)  # None in sys.modules: import raises ImportError
    monkeypatch.setenv("HARNESS_DATA", str(data_root))
    out = runner.execute(_cfg(dali=True), root=tmp_path)
    assert out.status == "unsupported"
    assert "nvidia-dali is not importable" in out.reason
    assert schema.read_record(out.dir)["status"]["reason"] == out.reason


# compile's end-to-end run (32 s) is in make test-all; make test covers compile through the sweeps' cells
@pytest.mark.parametrize("toggles", [{"dali": True}, {"amp": "bf16"},
                                     pytest.param({"compile": True}, marks=pytest.mark.slow)])
def test_toggle_runs_end_to_end(tmp_path, data_root, monkeypatch, toggles):
    monkeypatch.setenv("HARNESS_DATA", str(data_root))
    out = runner.execute(_cfg(**toggles), root=tmp_path)
    assert out.status == "finished", out.reason
    rec = schema.read_record(out.dir)
    assert rec["config"]["toggles"] == {**dataclasses.asdict(Toggles()), **toggles}
    # warm-up (which pays torch.compile) is recorded apart and kept out of the steady statistics
    assert rec["summary"]["first_step_s"] > 0 and rec["summary"]["warmup_s"] >= rec["summary"]["first_step_s"]
    assert rec["summary"]["n_steps"] == 2 and rec["summary"]["steps_done"] == 3


def test_cuda_graphs_record_is_unsupported_never_eager(tmp_path, monkeypatch, data_root):
    if torch.cuda.is_available():
        pytest.skip("CPU-only expectation")
    monkeypatch.setenv("HARNESS_DATA", str(data_root))
    out = runner.execute(_cfg(cuda_graphs=True), root=tmp_path)
    assert out.status == "unsupported"
    assert not (out.dir / schema.METRICS).read_text()  # not a single eager step was run
    assert "CUDA" in json.loads((out.dir / schema.STATUS).read_text())["reason"]
    assert not (out.dir / schema.MLPERF_LOG).exists()  # no empty log for the checker to fail on


def test_graph_safe_sgd_keeps_numerics_and_schedule():
    """cuda_graphs switches CosmoFlow's SGD to a device-tensor LR and the fused kernel (the
    foreach path would read the LR on the host inside the capture). Same updates, same schedule."""
    from harness.run.graph_capture import graph_safe_optimizer

    torch.manual_seed(0)
    size = WL.sizes["tiny"]
    models = [WL.build_model(size) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [WL.build_optimizer(m, size, global_batch=8, steps_per_epoch=3) for m in models]
    graph_safe_optimizer(opts[1][0], torch.device("cpu"))
    assert isinstance(opts[1][0].param_groups[0]["lr"], torch.Tensor) and opts[1][0].param_groups[0]["fused"]
    x, y = _batch()
    x = WL.preprocess(WL.to_model_input(x), None)
    for _ in range(4):  # crosses the warm-up into the decayed schedule
        for m, (opt, sched) in zip(models, opts):
            opt.zero_grad()
            WL.loss(m(x), y).backward()
            opt.step()
            sched.step()
    assert isinstance(opts[1][0].param_groups[0]["lr"], torch.Tensor)  # filled in place, not replaced
    assert float(opts[1][0].param_groups[0]["lr"]) == pytest.approx(opts[0][0].param_groups[0]["lr"], rel=1e-6)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("workload", ["cosmoflow", "deepcam"])
def test_training_state_restore_undoes_warmup_steps(workload):
    """cuda_graphs warms up on the first batch before capture; TrainingState.restore must put
    weights, BN statistics and optimizer state back so the first replay is a true step 0
    (on an H200 the un-restored version started at half the baseline loss: fail_accuracy)."""
    from harness.run.graph_capture import TrainingState, graph_safe_optimizer

    wl = registry.get(workload)
    size = wl.sizes["tiny"]
    torch.manual_seed(0)
    ref, m = wl.build_model(size), wl.build_model(size)
    m.load_state_dict(ref.state_dict())
    (ref_opt, _), (opt, _) = (wl.build_optimizer(model, size, 8, 3) for model in (ref, m))
    if workload == "cosmoflow":  # capturable AdamW refuses CPU tensors; SGD's fused form runs here
        graph_safe_optimizer(opt, torch.device("cpu"))
        x, y = _batch()
    else:
        x, y = torch.randn(2, size.height, size.width, 16), torch.randint(0, 3, (2, size.height, size.width))  # N,H,W,C
    x = wl.preprocess(wl.to_model_input(x), None)

    def step(model, o):
        o.zero_grad(set_to_none=True)
        loss = wl.loss(model(x), y)
        loss.backward()
        o.step()
        return loss.item()

    first = step(ref, ref_opt)
    second = step(ref, ref_opt)
    state = TrainingState(m, opt)
    for _ in range(3):
        step(m, opt)
    assert step(m, opt) != pytest.approx(first, rel=1e-3)  # the warm-up did change the model
    state.restore()
    assert step(m, opt) == pytest.approx(first, rel=1e-5)
    assert step(m, opt) == pytest.approx(second, rel=1e-4)  # optimizer state restarted too
    for a, b in zip(ref.state_dict().values(), m.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


# -- the ordered builder and the one toggle declaration ----------------------------------------
def test_build_steps_run_in_the_documented_order():
    import harness.run.build as opt
    names = [n for n, _ in opt.BUILD_STEPS]
    assert names == ["device", "layout", "amp", "pipeline_split", "tensor_parallel", "context_parallel",
                     "expert_parallel", "recompute", "data_parallel", "accumulation", "compile", "pipeline_schedule",
                     "optimizer", "graph_capture"]
    doc_order = sorted(names, key=lambda n: opt.__doc__.index(f"\n  {n} "))
    assert doc_order == names  # the module docstring lists the same order
    assert all(fn.__name__ == f"apply_{n}" for n, fn in opt.BUILD_STEPS)


def test_build_applies_layout_amp_and_compile_outside_the_model():
    ts = _step(_cfg(channels_last=True, amp="bf16", compile=True))
    assert ts.mem_format == torch.channels_last_3d and ts.dtype == "bf16"
    assert ts.eval_model is not ts.model  # compiled wrapper for the step, the plain model for eval
    assert ts.eval_model.convs[0].weight.is_contiguous(memory_format=torch.channels_last_3d)


def test_cuda_graphs_with_fp16_is_refused_up_front_on_any_machine():
    reason = unsupported_reason(_cfg(cuda_graphs=True, amp="fp16"), WL)
    assert reason.startswith("cuda_graphs with amp=fp16")


def test_every_toggle_is_read_only_in_its_declared_owner():
    """`<x>.toggles.<name>` attribute reads (not strings or docs) across harness/, staging/ and
    workloads/: each toggle appears in exactly its owner module (results/record/toggles.py)."""
    import ast
    from pathlib import Path

    from results.record.toggles import TOGGLES
    from tests.conftest import REPO
    readers: dict[str, set[str]] = {t.name: set() for t in TOGGLES}
    for pkg in ("harness", "staging", "workloads"):
        for p in (REPO / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text())):
                if isinstance(node, ast.Attribute) and node.attr in readers \
                        and isinstance(node.value, ast.Attribute) and node.value.attr == "toggles":
                    readers[node.attr].add(str(p.relative_to(REPO)))
    for t in TOGGLES:
        assert readers[t.name] == {t.owner}, (t.name, readers[t.name])
        assert Path(REPO / t.owner).is_file()


def test_toggles_dataclass_gate_sweep_and_report_derive_from_the_declaration():
    import dataclasses as dc

    from harness.run import gate
    from harness.experiments import sweep
    from results.analysis import speedups as report
    from results.record.toggles import TOGGLES
    fields = dc.fields(Toggles)
    assert [f.name for f in fields] == [t.name for t in TOGGLES]
    assert [f.default for f in fields] == [t.default for t in TOGGLES]
    on = {t.name: t.on for t in TOGGLES}
    sw = sweep.Sweep(name="s", workloads=("cosmoflow",), sizes=("tiny",), repeats=1, toggles=tuple(on),
                     on_values={}, matrix=("add_one_in",), base={})
    for t in TOGGLES:  # every toggle has a gate tolerance (no KeyError) and a sweep on-value
        cfg = _cfg(**{t.name: t.on})
        assert gate.tolerance(cfg, 0) == t.gate[0]
        assert sweep._on_value(sw, t.name) == t.on
    import pandas as pd
    row = {f"toggles.{t.name}": str(t.default) for t in TOGGLES}
    row["toggles.amp"] = "bf16"
    assert report.toggle_sets(pd.DataFrame([row])).iloc[0] == ("amp=bf16",)
