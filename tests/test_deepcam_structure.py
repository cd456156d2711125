"""DeepCAM computes the MLPerf HPC reference's function (mlcommons/hpc,
deepcam/src/deepCam/architecture/deeplab_xception.py): where its ReLUs sit is pinned here, since
parameter counts and FLOPs cannot see them. Reference: inside a block (separable conv, BN, ReLU)
repeated with the last ReLU dropped and none at the start; blocks 2-19 end with a ReLU after
the skip sum, blocks 1 and 20 do not; block 1's output is rectified in place, so the decoder's
low-level branch takes the rectified tensor; no ReLU between block 20 and conv3."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from harness.config import registry

WL = registry.get("deepcam")


class _Relus(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += func.overloadpacket in (torch.ops.aten.relu, torch.ops.aten.relu_)
        return func(*args, **(kwargs or {}))


def _model(size: str = "tiny"):
    torch.manual_seed(0)
    return WL.build_model(WL.sizes[size])


def test_block_relus_are_where_the_reference_puts_them():
    enc = _model().encoder
    blocks = [enc.block1, enc.block2, enc.block3, *enc.middle, enc.block20]
    assert [b.end_with_relu for b in blocks] == [False] + [True] * (len(blocks) - 2) + [False]
    for b in blocks:
        kinds = [type(m).__name__ for m in b.rep]
        assert kinds[0] == "SeparableConv2dSame"  # no ReLU at the start: the input is rectified already
        bns = kinds.count("BatchNorm2d")
        assert kinds.count("ReLU") == bns - 1  # one after every (conv, BN) but the last
        assert all(kinds[i - 1] == "BatchNorm2d" for i, k in enumerate(kinds) if k == "ReLU")


@pytest.mark.parametrize("size", ["tiny", "full"])
def test_relu_count_of_a_forward_pass(size):
    """Encoder: stem 2, block 1's stack 1 and its in-place ReLU 1, blocks 2-3 2 each, middle
    blocks 3 each, block 20's stack 1, conv3-5 3; decoder: ASPP 4, image pooling 1, bottleneck
    1, low-level 1, upsampling 2, last convs 2, last upsampling 1. Full size: 72."""
    s = WL.sizes[size]
    with torch.device("meta"):
        model = WL.build_model(s).eval()
        x = torch.empty(1, s.in_channels, s.height, s.width)
    with _Relus() as relus:
        model(x)
    assert relus.n == 12 + 3 * s.middle_blocks + 12
    if size == "full":
        assert relus.n == 72


def test_the_low_level_branch_and_the_skips_take_rectified_tensors_and_block20_does_not_end_with_one():
    model = _model().eval()
    seen: dict[str, torch.Tensor] = {}

    def grab(name):
        return lambda m, inp: seen.__setitem__(name, inp[0].detach().clone())

    enc = model.encoder
    model.low_level.register_forward_pre_hook(grab("low_level"))
    enc.block2.skip.register_forward_pre_hook(grab("block2_skip"))
    enc.block20.skip.register_forward_pre_hook(grab("block20_skip"))
    enc.conv3.register_forward_pre_hook(grab("conv3"))
    torch.manual_seed(1)
    with torch.no_grad():
        model(torch.randn(2, WL.sizes["tiny"].in_channels, 96, 144))
    for name in ("low_level", "block2_skip", "block20_skip"):
        assert seen[name].min() >= 0, name
    assert seen["conv3"].min() < 0  # block 20's sum goes to conv3 unrectified


def test_relus_inside_blocks_run_in_place():
    relus = [m for m in _model().encoder.modules() if isinstance(m, nn.ReLU)]
    assert relus and all(m.inplace for m in relus)


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_training_step_runs_only_the_ops_the_reference_runs(channels_last):
    """Per training step (forward, loss, backward, as the harness builds it), counted below
    autograd: none of the overhead the issue profiled (a pad per separable conv, with its copy_
    and fill_, the slices of pad backward, out-of-place ReLUs and sums). What remains is what
    the reference's step runs too (measured side by side in make perf deepcam_vs_reference):
    - slice: 7, the backward of the two concatenations (ASPP's 5 branches, the decoder's 2);
      channels_last on CPU adds 2 per strided skip conv (x[..., ::2, ::2], see
      StridedPointwise) and their slice_backward;
    - relu out of place: the decoder's 12 (the reference's nn.ReLU() there is not in place);
    - add out of place: autograd summing the gradients of a tensor used twice (each block's
      input, by its stack and its skip; the encoder's output, by 4 ASPP branches and the
      pooling; block 1's, by block 2 and the decoder) and the pooling's affine shift."""
    from harness.measure import op_counts
    from harness.config.run_config import RunConfig, Toggles
    from harness.run.build import build
    size = WL.sizes["tiny"]
    cfg = RunConfig(workload="deepcam", steps=2, warmup_steps=1, toggles=Toggles(channels_last=channels_last))
    torch.manual_seed(0)
    ts = build(cfg, WL, WL.build_model(size), lambda m: WL.build_optimizer(m, size, 2, 10))
    x, y = ts.prepare(*WL.example_batch(size, 2))
    ts(x, y)  # the first step makes what later steps reuse (class weights, optimizer state)
    ts.optimizer.zero_grad(set_to_none=True)
    counts = op_counts.count(lambda: ts.loss_fn(ts.model(x), y).backward())
    calls = {op: counts.get(f"aten::{op}", {}).get("calls", 0) for op in (
        "constant_pad_nd", "pad", "copy_", "fill_", "new_empty_strided", "narrow", "slice", "slice_backward",
        "relu", "add")}
    enc = ts.eval_model.encoder
    blocks = 4 + len(enc.middle)
    strided_skips = sum(isinstance(b.skip, nn.Conv2d) and b.skip.stride[0] > 1
                        for b in [enc.block1, enc.block2, enc.block3, *enc.middle, enc.block20])
    assert strided_skips == 3
    extra = 2 * strided_skips if channels_last else 0
    assert calls == {"constant_pad_nd": 0, "pad": 0, "copy_": 0, "fill_": 0, "new_empty_strided": 0, "narrow": 0,
                     "slice": 7 + extra, "slice_backward": extra, "relu": 12, "add": blocks + 4 + 1 + 1}
    assert counts["aten::convolution"]["calls"] > 60


def test_strided_pointwise_on_channels_last_matches_the_strided_conv_and_survives_backward(tmp_path):
    """The shape that crashes torch 2.13's fused CPU kernel (see StridedPointwise), run in a child
    process so a crash fails this test instead of killing the session; the result must equal the
    strided conv computed in the contiguous layout, forward and both gradients."""
    import subprocess
    import sys
    from tests.conftest import REPO
    code = """
import torch
from workloads.deepcam.model import StridedPointwise
torch.manual_seed(0)
for _ in range(20):
    m = StridedPointwise(4, 8, 1, stride=2, bias=False)
    ref = torch.nn.Conv2d(4, 8, 1, stride=2, bias=False)
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 4, 96, 144)
    xc = x.to(memory_format=torch.channels_last).requires_grad_()
    xr = x.clone().requires_grad_()
    m = m.to(memory_format=torch.channels_last)
    y, yr = m(xc), ref(xr)
    torch.testing.assert_close(y, yr)
    y.square().sum().backward()
    yr.square().sum().backward()
    torch.testing.assert_close(xc.grad, xr.grad)
    torch.testing.assert_close(m.weight.grad, ref.weight.grad)
print("ok")
"""
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr[-500:])
