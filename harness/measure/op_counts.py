"""FLOPs and bytes of every aten op in one training step, for the per-operator roofline.

FLOPs come from torch.utils.flop_counter (its formula per op), with two additions: a grouped
convolution's weight gradient divided by `groups` (torch counts it as if dense: a depthwise conv
with 8 groups shows 10x its forward FLOPs instead of 3x), and the CPU flash-attention kernels,
which torch's registry does not list, given the flash formulas. Ops the counter has no formula
for (normalisation, pointwise, copies) count 0 FLOPs, as torch counts them.

Bytes are what each op reads and writes: the distinct elements of its tensor inputs plus its
tensor outputs (an expanded, stride-0 input counted once per distinct element). That is a lower
bound on the op's memory traffic (caches can only add re-reads, never remove a first touch),
except that an op whose operands already sit in cache moves less; views move nothing and are
counted 0. The counts are of the unfused (eager) graph: under torch.compile the same step runs
fused kernels that skip the intermediates, which is exactly what fusion buys.

The counting step runs after the profiled steps, never before: a compiled module run once under
a TorchDispatchMode falls back to eager for good (seen with torch 2.13), which would make the
profile of a compile run an eager one.
"""
from __future__ import annotations

from collections import defaultdict
from math import prod
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop, sdpa_backward_flop, sdpa_flop

aten = torch.ops.aten


def grouped_conv_backward_flop(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation,
                               transposed, output_padding, groups, output_mask, out_shape):
    """torch's convolution_backward formula with the weight-gradient term divided by `groups`."""
    args = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed, output_padding, groups)
    # torch's formula is registered through its shape wrapper, which takes the output as out_val
    grad_in = conv_backward_flop(*args, [output_mask[0], False], out_val=out_shape) if output_mask[0] else 0
    grad_w = conv_backward_flop(*args, [False, output_mask[1]], out_val=out_shape) if output_mask[1] else 0
    return grad_in + grad_w // groups


def _cpu_flash(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop(query_shape, key_shape, value_shape)


def _cpu_flash_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_backward_flop(grad_out_shape, query_shape, key_shape, value_shape)


MAPPING = {aten.convolution_backward: grouped_conv_backward_flop,
           aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash,
           aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward}


def op_name(packet) -> str:
    """The profiler's spelling of an aten op packet: aten.mm -> aten::mm."""
    return str(packet).replace(".", "::", 1)


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor addresses (a stride-0 dimension adds none)."""
    return prod(n for n, s in zip(t.shape, t.stride()) if s != 0) * t.element_size()


class _Bytes(TorchDispatchMode):
    """Calls and bytes (inputs + outputs) per aten op, below autograd: what actually runs."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[str, int] = defaultdict(int)
        self.bytes: dict[str, int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = op_name(func.overloadpacket)
        self.calls[name] += 1
        if not func.is_view:  # a view moves no data
            # an in-place op's output is its input: read and written, so it counts twice
            ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            for t in ins + outs:
                self.bytes[name] += tensor_bytes(t)
        return out


def count(step: Callable[[], object]) -> dict[str, dict[str, float]]:
    """{op: {calls, flops, bytes}} for one call of `step` (a full training step)."""
    counter, moved = FlopCounterMode(display=False, custom_mapping=MAPPING), _Bytes()
    with counter, moved:
        step()
    flops = {op_name(k): v for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return {op: {"calls": moved.calls[op], "flops": float(flops.get(op, 0)), "bytes": float(moved.bytes[op])}
            for op in moved.calls}
