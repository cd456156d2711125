"""A tensor- or context-parallel group's block with its collectives, timed on the ranks of a cohort
profile (`mpiexec -n N harness profile ... --shards tpT,cpC`): what the real group adds to one
member's compute, for the planner (results/planner/within_stage.py prices a group's block with it).

Why: the planner priced a tp member as its compute plus the collectives as `harness comm` times
them alone, and predicted a real tp2 pair 8-20% fast. `make perf` cell tp_step split the real
step (LM small, batch 8, 2 ranks, 2026-12-03): over the member's compute 1.47 s, the activation
all-reduces cost 0.10 s (as much as alone, 0.11 s), the ranks waiting for each other at the 24
sync points 0.09 s, and DTensor's own path around each collective 0.10 s. Only the first was
in the model. Timed here, all three are.

Every T consecutive ranks form a group (a device mesh ("g", "tp") or ("g", "cp")); each rank runs,
in rounds with the order reversed every other round, (member) its member block alone (the
profile's tpT or cpC shard) and (group) the block as the run engine runs it: for tpT DTensor's
column/row split over the group (`parallel.tp=T`); for cpC the block on the rank's tokens with
context parallel's real all-gather of K and V (harness/parallel/context.py, `parallel.cp=C`),
where the member stood it in for by a local copy. Forward and backward with the collectives.
Each pass is timed from a barrier of all ranks to the slowest rank's end, the same fixed number of
rounds on every rank (no rank may stop on a rule of its own: the others would wait at the next
collective). The figure per microbatch: the median over rounds of group - member, seconds per
block (forward + backward together).
"""
from __future__ import annotations

import copy
import statistics
import time

import torch

ROUNDS = 8   # pairs of passes per microbatch: the median of 8 differences, each a paired comparison
WARMUP = 1


def why_not(world: int, t: int) -> str | None:
    """Why a cohort of `world` ranks can't time groups of t (tpT or cpC), or None."""
    if world < 2:
        return "needs a group of ranks: profile under mpiexec -n T or more"
    if world % t:
        return f"{world} ranks do not form groups of {t}"
    return None


def _group_block(wl, block, kind: str, t: int, seq_len: int):
    """The block as the run engine runs it in a `kind` ("tp" or "cp") group of t: for tp the
    workload's plan over a ("g", "tp") mesh, for cp context parallel over the ("g", "cp") mesh's group."""
    from torch.distributed.device_mesh import init_device_mesh
    import torch.distributed as td
    mesh = init_device_mesh("cpu", (td.get_world_size() // t, t), mesh_dim_names=("g", kind))[kind]
    if kind == "cp":
        from harness.parallel.context import ContextParallel
        part = copy.deepcopy(block)
        _, attention = wl.context_parallel_modules(part)
        ctx = ContextParallel(part, attention, mesh.get_group(), mesh.get_local_rank(), t, seq_len, "cpu")
        for m in attention:
            m.attend = ctx.attend  # the real all-gather of K and V, reduce-scatter backward
        return part
    from torch.distributed.tensor.parallel import parallelize_module
    holder = torch.nn.Module()
    holder.h = torch.nn.ModuleList([copy.deepcopy(block)])  # the plan's paths are "h.<i>...."
    parallelize_module(holder, mesh, wl.tensor_parallel_plan(holder, t, False))
    return holder.h[0]


def _pass(module, x) -> float:
    """One forward + backward from a barrier of all ranks to the slowest rank's end, seconds."""
    import torch.distributed as td
    td.barrier()
    t0 = time.perf_counter()
    module(x).float().sum().backward()
    took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    td.all_reduce(took, op=td.ReduceOp.MAX)  # the group's step waits for its slowest member
    module.zero_grad(set_to_none=True)
    x.grad = None
    return float(took)


def measure(wl, block, member, name: str, microbatches: list[int], seq_len: int, d_model: int,
            rounds: int = ROUNDS) -> list[dict]:
    """[{microbatch, in_step_s, member_s, group_s, extra_samples_s}] for a `name` ("tp2", "cp2"...)
    group of `block` (`member`: one member's shard, shards.layer). Every rank of the process group
    calls this, with the same arguments."""
    kind, t = name[:2], int(name[2:])
    group = _group_block(wl, block, kind, t, seq_len)
    tokens = seq_len // t if kind == "cp" else seq_len  # a cp rank's share of the sequence
    rows = []
    for mb in microbatches:
        x = torch.randn(mb, tokens, d_model, requires_grad=True)
        for _ in range(WARMUP):
            _pass(member, x), _pass(group, x)
        got: dict[str, list[float]] = {"member": [], "group": []}
        for r in range(rounds):
            for side, m in ((("member", member), ("group", group)) if r % 2 == 0 else
                            (("group", group), ("member", member))):
                got[side].append(_pass(m, x))
        extra = [g - m for g, m in zip(got["group"], got["member"])]
        rows.append({"microbatch": mb, "in_step_s": max(0.0, statistics.median(extra)),
                     "member_s": statistics.median(got["member"]), "group_s": statistics.median(got["group"]),
                     "extra_samples_s": extra, "rounds": rounds})
    return rows
