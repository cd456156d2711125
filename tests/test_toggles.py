"""Each toggle on tiny CosmoFlow: what it changes, that it runs (or says why it can't)."""
from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch

from harness import registry, runner
from harness.config import RunConfig, Toggles
from harness.optimize import TrainStep, unsupported_reason
from results import schema

WL = registry.get("cosmoflow")


def _cfg(**toggles) -> RunConfig:
    return RunConfig(workload="cosmoflow", steps=2, warmup_steps=1, toggles=Toggles(**toggles))


def _step(cfg: RunConfig) -> TrainStep:
    size = WL.sizes["tiny"]
    model = WL.build_model(size)
    opt, sched = WL.build_optimizer(model, size, 8, 10)
    return TrainStep(cfg, WL, model, opt, sched)


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


@pytest.mark.parametrize("toggles", [{"dali": True}, {"amp": "bf16"}, {"compile": True}])
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


def test_graph_safe_sgd_keeps_numerics_and_schedule():
    """cuda_graphs switches CosmoFlow's SGD to a device-tensor LR and the fused kernel (the
    foreach path would read the LR on the host inside the capture). Same updates, same schedule."""
    from harness.optimize import graph_safe_optimizer

    torch.manual_seed(0)
    size = WL.sizes["tiny"]
    models = [WL.build_model(size) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [WL.build_optimizer(m, size, global_batch=8, steps_per_epoch=3) for m in models]
    graph_safe_optimizer(opts[1][0], torch.device("cpu"))
    assert isinstance(opts[1][0].param_groups[0]["lr"], torch.Tensor) and opts[1][0].param_groups[0]["fused"]
    x, y = _batch()
    x = WL.preprocess(WL.to_model_input(x))
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
    from harness.optimize import TrainingState, graph_safe_optimizer

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
    x = wl.preprocess(wl.to_model_input(x))

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
