"""LM's AdamW runs in torch's fused kernel (workloads/lm/optim.py), takes the same step as the
per-parameter loop, and falls back to that loop where DTensor and plain parameters share one
optimizer (harness/parallel/strategies.py), which the fused kernel refuses."""
from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import torch

from workloads.lm.model import GPT
from workloads.lm.optim import build_optimizer
from workloads.lm.spec import SIZES_RAW


def _stepped(model: torch.nn.Module, fused: bool) -> torch.nn.Module:
    size = SIZES_RAW["tiny"]
    opt, _ = build_optimizer(model, size)
    for g in opt.param_groups:
        g["fused"], g["foreach"] = (True, False) if fused else (False, False)
    gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen) * 1e-2
        opt.step()
    return model


def test_lm_adamw_is_fused_and_takes_the_per_parameter_loops_step():
    torch.manual_seed(0)
    model = GPT(SIZES_RAW["tiny"])
    opt, _ = build_optimizer(model, SIZES_RAW["tiny"])
    assert [g["fused"] for g in opt.param_groups] == [True, True]
    fused, loop = _stepped(copy.deepcopy(model), True), _stepped(copy.deepcopy(model), False)
    moved = max((a - b).abs().max().item() for a, b in zip(model.parameters(), fused.parameters()))
    assert moved > 1e-4  # the steps did something ...
    for (name, a), b in zip(fused.named_parameters(), loop.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)  # ... and the same thing


_MIXED = textwrap.dedent("""
    import torch, torch.distributed as td
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor
    from harness.parallel.strategies import _per_parameter_where_mixed
    td.init_process_group("gloo", store=td.HashStore(), rank=0, world_size=1)
    mesh = init_device_mesh("cpu", (1,))
    shard = torch.nn.Parameter(distribute_tensor(torch.randn(4, 4), mesh, [Replicate()]))
    plain = torch.nn.Parameter(torch.randn(4))
    out = []
    for params in ([shard, plain], [plain]):
        opt = torch.optim.AdamW([{"params": params}], fused=True)
        _per_parameter_where_mixed(opt)
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()  # the fused kernel would raise on the mix
        out.append(opt.param_groups[0]["fused"])
    print(out)
    td.destroy_process_group()
""")


def test_dtensor_beside_plain_parameters_takes_the_per_parameter_path():
    # its own process: a process group is global state
    p = subprocess.run([sys.executable, "-c", _MIXED], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "[False, True]"  # the mix unfused; all plain stays fused
