"""Activation recomputation (parallel.recompute), applied to each block the workload names
(`recompute_units`), as torchtitan applies it per TransformerBlock:

  full       torch.utils.checkpoint around the block: autograd keeps only the block's input
             and re-runs the block's forward during backward (Chen et al. 2016; Korthikanti et
             al. 2022 "full recomputation": 2sbh bytes per layer at 16 bits)
  selective  torchtitan's op-level policy through create_selective_checkpoint_contexts: the
             outputs of the expensive ops are kept (attention, and every other matmul, as
             torchtitan keeps half of them; for the convolution workloads, each convolution),
             everything between them (LayerNorm, GELU, LeakyReLU, pooling, views) recomputed;
             in-place modules of the block (`inplace` flags: ReLU, DeepCAM's block sum) run out
             of place, as an in-place op could change an output the policy keeps

A unit is a module, or a tuple of consecutive modules of one nn.Sequential (CosmoFlow's
conv -> LeakyReLU -> MaxPool triples), recomputed together. The block's own forward is
replaced on the instance, so parameter names, the tensor-parallel plan's paths and FSDP's units
are unchanged. The only module that reads parallel.recompute; what a mode costs is measured by
harness/parallel/activations.py (bytes kept per block) and the run's step time and peak memory.
"""
from __future__ import annotations

import functools
from collections import defaultdict

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

_aten = torch.ops.aten
# kept under selective: attention (every SDPA backend, CPU's included) and the reduce-scatter
# of sequence parallel (torchtitan's list), convolutions (ours: CosmoFlow and DeepCAM have no
# matmul-heavy blocks), max (torchtitan keeps it: cheap to keep, awkward to recompute)
_SAVE = {_aten._scaled_dot_product_flash_attention.default,
         _aten._scaled_dot_product_efficient_attention.default,
         _aten._scaled_dot_product_flash_attention_for_cpu.default,
         _aten._scaled_dot_product_attention_math.default,
         _aten.convolution.default, _aten.max.default,
         torch.ops._c10d_functional.reduce_scatter_tensor.default,
         # context parallel's gathered K and V (attention keeps them anyway): no second all-gather
         torch.ops._c10d_functional.all_gather_into_tensor.default,
         torch.ops._c10d_functional.all_reduce.default,  # tensor parallel's block outputs
         torch.ops._c10d_functional.wait_tensor.default}
# matmuls: torchtitan keeps every other one (the 1st, 3rd, ... of a block) and recomputes the rest
_MATMUL = {_aten.mm.default, _aten.addmm.default, _aten.bmm.default}


def _policy():
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx, op, *args, **kwargs):
        if op in _MATMUL:
            key = "recompute" if ctx.is_recompute else "forward"
            counts[key] += 1  # the same count in forward and in its recomputation: the same choice
            return CheckpointPolicy.MUST_SAVE if counts[key] % 2 == 1 else CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def _context():
    return create_selective_checkpoint_contexts(_policy())


def _checkpointed(forward, mode: str, norms: list):
    """`forward` run under torch.utils.checkpoint (non-reentrant: works with FSDP2, DTensor and
    keyword arguments). The RNG state is kept so dropout recomputes the same mask. `norms`
    (BatchNorm modules) run the recomputation in backward with momentum 0: their running
    statistics would otherwise take every batch twice. (Not by copying the buffers back: under
    selective recomputation the recomputed ops must be the forward's, one for one.
    num_batches_tracked still counts the recomputation; it is unused with a set momentum.)"""
    extra = {"context_fn": _context} if mode == "selective" else {}
    in_forward = [False]

    def body(*args, **kwargs):
        if in_forward[0] or not norms:
            return forward(*args, **kwargs)
        momenta = [m.momentum for m in norms]
        for m in norms:
            m.momentum = 0.0  # running = (1 - 0) * running + 0 * batch: unchanged
        try:
            return forward(*args, **kwargs)
        finally:
            for m, mo in zip(norms, momenta):
                m.momentum = mo

    @functools.wraps(forward)
    def run(*args, **kwargs):
        if not torch.is_grad_enabled():  # evaluation: nothing to keep, nothing to recompute
            return forward(*args, **kwargs)
        in_forward[0] = True
        try:
            return checkpoint(body, *args, use_reentrant=False, **extra, **kwargs)
        finally:
            in_forward[0] = False
    return run


def _chain(modules) -> callable:
    forwards = [m.forward for m in modules]

    def run(x):
        for f in forwards:
            x = f(x)
        return x
    return run


def _identity(x):
    return x


def wrap(unit, mode: str) -> None:
    """Recompute `unit` (a module, or a tuple of consecutive modules of one Sequential) in backward."""
    modules = unit if isinstance(unit, tuple) else (unit,)
    if mode == "selective":  # an in-place op could change an output the policy keeps: run them out of place
        for m in (n for mod in modules for n in mod.modules()):
            if isinstance(getattr(m, "inplace", None), bool):
                m.inplace = False
    norms = [n for m in modules for n in m.modules()
             if isinstance(n, torch.nn.modules.batchnorm._BatchNorm) and n.track_running_stats and n.momentum]
    if isinstance(unit, tuple):
        first, *rest = unit
        first.forward = _checkpointed(_chain(unit), mode, norms)
        for m in rest:  # the Sequential still calls them: they pass the chain's output through
            m.forward = _identity
        return
    unit.forward = _checkpointed(unit.forward, mode, norms)


# -- builder step (harness/run/build.py) -----------------------------------------------------------
def apply_recompute(ts) -> None:
    """After tensor and expert parallel (the blocks hold their final modules), before the data
    parallel wrapper and compile (torchtitan's order: TP, AC, compile, FSDP)."""
    mode = ts.cfg.parallel.recompute
    if mode == "none":
        return
    parts = ts.model if ts.pipeline is not None else [ts.model]  # a pipeline: this rank's stages
    for part in parts:
        for unit in ts.workload.recompute_units(part):
            wrap(unit, mode)
