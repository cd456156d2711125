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
Each pass is timed from a barrier of all ranks to the slowest rank's end, so every rank holds the
same samples and stops at the same round (no rank may stop on a rule of its own: the others would
wait at the next collective). The figure per microbatch: the median over rounds of group - member,
seconds per block (forward + backward together).

How many rounds: at least MIN_ROUNDS, then until the distribution-free 95% interval of that
median is within +-precision of the group's pass (the profile's own rule, harness/planning/
profile.py; relative to the group's pass because the planner adds this figure to a member's
compute, so its error is that share of the group's block time), or until BUDGET_FACTOR x the
profile's budget_s of timed passes. With 8 rounds fixed, two profiles of the same pair timed
cp2's figure 0.013 and 0.025 s a block (2026-12-03): on LM small's 6 blocks, 7% of the step, as
much as the planner's error. The budget is counted in the MAX-reduced pass times, which every
rank holds the same.
"""
from __future__ import annotations

import copy
import math
import statistics
import time

import torch

from results.stats.estimators import median_interval

MIN_ROUNDS = 8   # pairs of passes per microbatch before the precision rule may end sampling
MAX_ROUNDS = 400  # bounds a cell whose passes are far shorter than the budget expects
# its budget against the profile's per-figure budget: this figure is a small difference of two
# passes (LM small mb8, 2026-12-04: +40 ms over a 225 ms member, +-6.2% of the group's pass after
# 4 s = 9 rounds), and the planner adds it to every block, so at 4 s it alone moved a tp2 step +-6%
BUDGET_FACTOR = 3
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


def half_width(extra: list[float], group: list[float]) -> float:
    """The 95% interval of median(extra) (order statistics), +- as a share of the median group
    pass; inf with too few rounds for one."""
    interval = median_interval(extra)
    return math.inf if interval is None else (interval[1] - interval[0]) / (2 * statistics.median(group))


def stop(extra: list[float], group: list[float], spent_s: float, precision: float, budget_s: float,
         min_rounds: int = MIN_ROUNDS) -> str | None:
    """Why sampling ends after these rounds ("precision", "budget", "rounds", "rounds cap"), or None."""
    if len(extra) < min_rounds:
        return None
    if precision <= 0:  # the profile's --precision 0: its --repeats alone, here min_rounds
        return "rounds"
    if half_width(extra, group) <= precision:
        return "precision"
    if spent_s >= budget_s:
        return "budget"
    return "rounds cap" if len(extra) >= MAX_ROUNDS else None


def measure(wl, block, member, name: str, microbatches: list[int], seq_len: int, d_model: int,
            precision: float, budget_s: float, min_rounds: int = MIN_ROUNDS) -> list[dict]:
    """[{microbatch, in_step_s, member_s, group_s, extra_samples_s, rounds, ended_by, sampled_s,
    half_width}] for a `name` ("tp2", "cp2"...) group of `block` (`member`: one member's shard,
    shards.layer). Every rank of the process group calls this, with the same arguments."""
    kind, t = name[:2], int(name[2:])
    group = _group_block(wl, block, kind, t, seq_len)
    tokens = seq_len // t if kind == "cp" else seq_len  # a cp rank's share of the sequence
    rows = []
    for mb in microbatches:
        x = torch.randn(mb, tokens, d_model, requires_grad=True)
        for _ in range(WARMUP):
            _pass(member, x), _pass(group, x)
        got: dict[str, list[float]] = {"member": [], "group": []}
        extra: list[float] = []
        ended, r, spent = None, 0, 0.0
        while ended is None:
            for side, m in ((("member", member), ("group", group)) if r % 2 == 0 else
                            (("group", group), ("member", member))):
                got[side].append(_pass(m, x))
                spent += got[side][-1]
            extra.append(got["group"][-1] - got["member"][-1])
            r += 1
            # the same samples on every rank (MAX-reduced), so every rank ends at the same round
            ended = stop(extra, got["group"], spent, precision, BUDGET_FACTOR * budget_s, min_rounds)
        hw = half_width(extra, got["group"])
        rows.append({"microbatch": mb, "in_step_s": max(0.0, statistics.median(extra)),
                     "member_s": statistics.median(got["member"]), "group_s": statistics.median(got["group"]),
                     "extra_samples_s": extra, "rounds": r, "ended_by": ended,
                     "sampled_s": spent,
                     "half_width": hw if math.isfinite(hw) else None})
    return rows
