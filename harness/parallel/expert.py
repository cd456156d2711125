"""Expert parallel (parallel.ep > 1): the only module that applies parallel.ep.

Ranks form a (edp, ep) mesh, row-major: ep consecutive ranks share one copy of every expert,
each holding E/ep of them in every Mixture-of-Experts layer (the workload's layers shard
themselves and route tokens with all-to-all: workloads/lm/moe.py). The rest of the model is
data parallel over all ranks (DDP or FSDP2, told to leave the experts alone: DDP's ignored
parameters, fully_shard's ignored_params).

Gradients of one expert, on the rank holding it, are the sum over the ep ranks' tokens of
their local mean losses; summed over the edp copies (an all-reduce, when world > ep) and
divided by the world size, they equal the one-rank gradient of the global batch's mean loss,
as DDP's average does for the dense parameters.

Also the per-step Mixture-of-Experts figures: tokens per expert (load balance max/mean),
dropped tokens, time in all-to-all and in the experts (forward), expected all-to-all bytes.
"""
from __future__ import annotations

import torch

from harness.config import registry


def apply_expert_parallel(ts) -> None:
    """Builder step (before data_parallel): shard each MoE layer's experts over the ep group."""
    ep = ts.cfg.parallel.ep
    if ep == 1 or ts.world <= 1:
        return
    import torch.distributed as td
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh(ts.device.type, (ts.world // ep, ep), mesh_dim_names=("edp", "ep"))
    group, rank = mesh["ep"].get_group(), mesh["ep"].get_local_rank()
    edp = mesh["edp"].get_group() if ts.world > ep else None
    names = []
    for layer in ts.workload.moe_layers(ts.model):
        layer.shard_experts(group, rank, ep)
    for name, p in ts.model.named_parameters():
        if ".experts." in name:
            names.append(name)
            p.register_post_accumulate_grad_hook(_expert_grad(edp, ts.world, td))
    ts.ddp_ignore = names  # apply_data_parallel: DDP must not average the sharded experts


def _expert_grad(edp, world: int, td):
    def hook(p: torch.Tensor) -> None:
        if edp is not None:
            td.all_reduce(p.grad, group=edp)  # the copies of this expert on other ep groups
        p.grad.div_(world)
    return hook


def expert_all_reduce_bytes(ts) -> int:
    """Bytes the edp all-reduce of the experts moves per step (0 when world == ep)."""
    if ts.cfg.parallel.ep in (1, ts.world):
        return 0
    return sum(p.numel() * p.element_size() for n, p in ts.eval_model.named_parameters() if ".experts." in n)


def _layers(workload, model) -> list:
    """The model's MoE layers, found once per model (read every step: no module walk there)."""
    if "_harness_moe_layers" not in model.__dict__:
        find = registry.capability(workload, "moe_layers")
        model.__dict__["_harness_moe_layers"] = find(model) if find else []
    return model.__dict__["_harness_moe_layers"]


def reset(workload, model) -> None:
    for layer in _layers(workload, model):
        layer.reset_stats()


def step_figures(workload, model, dist) -> dict:
    """This step's Mixture-of-Experts figures, summed over the layers and the ranks (one small
    all-reduce, outside the timed region), then reset. {} for a dense model."""
    layers = _layers(workload, model)
    if not layers:
        return {}
    tokens = sum(layer.stats["tokens_per_expert"] for layer in layers)
    scalars = torch.tensor([sum(layer.stats[k] for layer in layers)
                            for k in ("dropped", "routed", "a2a_s", "expert_s", "a2a_bytes_expected")],
                           dtype=torch.float64)
    vec = torch.cat([tokens, scalars])
    if dist.world > 1:
        import torch.distributed as td
        td.all_reduce(vec)
    for layer in layers:
        layer.reset_stats()
    tokens, (dropped, routed, a2a_s, expert_s, a2a_bytes) = vec[:-5], vec[-5:].tolist()
    n = max(dist.world, 1)
    return {"moe_tokens_per_expert": tokens.tolist(),
            "moe_load_max_over_mean": float(tokens.max() / tokens.mean()) if tokens.sum() > 0 else float("nan"),
            "moe_dropped_frac": dropped / routed if routed else 0.0,
            "moe_a2a_s": a2a_s / n, "moe_expert_s": expert_s / n,  # per rank (mean), forward only
            "moe_a2a_bytes_expected": a2a_bytes / n}
