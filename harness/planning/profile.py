"""`python -m harness profile lm --size S`: what the heterogeneous planner needs to know about
this device, measured (Metis and AMP profile the same: per layer kind, per microbatch size,
time and memory).

Per layer kind — the embeddings, one transformer block, the head with the loss — and per
microbatch size: forward and backward seconds (the median of timed visits, each 30 ms of passes
at least, after one untimed pass: at least `repeats`, then until the median's 95% interval is
within --precision, default +-2%, or --budget-s seconds a cell have gone by; the row says which
ended it), the bytes autograd saves for
backward (activation memory, counted by saved_tensors_hooks, each storage once) and the
output's bytes (what a stage boundary sends).
With `--shards tp2,cp2` (the default), the block as one member of a tensor- or context-parallel
group computes it (harness/planning/shards.py), timed in alternating passes with the block so
that its share of the block, a ratio, is free of the machine's drift: the planner's TP and CP
compute, measured. Under a launcher, each group's real block (with its collectives) is timed
against the member's as well (harness/planning/in_step.py): what the collectives add in the step.
Per model: parameters per layer kind, the optimizer's step time per parameter (AdamW over
the whole model, timed in the same rounds), and what copying every gradient into one flat buffer and
back costs per byte (what DDP and replicate do around their all-reduce: the gradients go into the
buckets and the reduced values come back; at 0.25 CPU this was 0.1 s a step on LM small, 8% of
it), and what adding a gradient into the one already there costs per byte (a pipeline stage
accumulates its gradients over the step's microbatches). Model-state bytes per parameter are
fp32 weights, gradients and AdamW's two moments: 16 B.

The layer kinds are the pipeline's own stage modules (workloads/lm/pipeline_split.py: a stage
with no blocks holds only the embeddings, or only the final LayerNorm and head), so what is
timed is what a stage runs. `--cpus Q` holds the process to Q CPUs (harness/parallel/cpu_quota.py) to
profile a slower device kind for real. Under a launcher (`mpiexec -n 2 ... profile` with
HARNESS_RANK_CPU="1,0.5") the ranks profile at once, each as its share holds it, each measurement
at least --cell-s seconds long, started together and ended together (harness/planning/cohort.py:
a rank whose rule is met samples on until every rank's is), so every device is measured while
the others load the machine as they will in training; each rank writes its own record.

Every cell (a layer kind at a microbatch, the optimizer, the gradients' copy) is timed in rounds,
one visit (30 ms of passes at least) a round, the order reversed each round
(harness/measure/cells.py), so that the machine's drift moves all their costs together: the
planner prices a plan from their relative costs.

Written like a run record under results/profiles/<id>/ (config.json with kind "profile",
env.json, summary.json with the figures, status.json last).
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

import torch

from harness.measure import envinfo
from harness.parallel import cpu_quota as rank_cpu
from harness.parallel import recompute
from harness.measure import cells
from harness.planning import in_step
from harness.planning import shards
from harness.config import registry
from harness.config.errors import BadInput, Unsupported, UsageError
from harness.run.record import unique_stamp
from results.record import schema

SUBDIR = "profiles"
KIND = schema.PROFILE_KIND  # config.json kind of a layer profile record
STATE_BYTES_PER_PARAM = 16  # fp32 weights + gradients + AdamW exp_avg and exp_avg_sq


PRECISION = 0.02  # default stop rule: the 95% interval of a cell's median pass within +-2%
BUDGET_S = 4.0     # ... or this many seconds of timed passes per cell (all cells together), whichever first


def _optimizer_step(wl, model, size):
    """AdamW's step over the whole model, as a callable to time. Gradients of a real step's scale,
    not zeros: AdamW's step over all-zero gradients and state took 0.54 s on LM small at 0.25 CPU
    against 0.27-0.28 s over N(0, 1e-3) ones (2026-12-04, one thread; DP runs' profiled optimizer
    step then took 0.15 s against 0.36 s priced from zeros)."""
    model = copy.deepcopy(model)  # its own parameters: the layers' passes set and clear the model's gradients
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = (torch.randn(p.shape, generator=gen, dtype=p.dtype) * 1e-3).to(p.device)
    opt, _ = wl.build_optimizer(model, size, size.batch_size, 100)
    return lambda: opt.step()  # holds the optimizer (its scheduler's hook on opt.step keeps only a weak reference)


def _grad_copy(model):
    """(a callable, the bytes it copies each way): every gradient copied into a persistent flat
    buffer and back, as DDP copies them into its buckets (in the backward's hooks) and the reduced
    bucket back into the gradients (gradient_as_bucket_view off, torch's default)."""
    grads = [torch.randn_like(p) for p in model.parameters()]
    flat = torch.empty(sum(g.numel() for g in grads))
    views, at = [], 0
    for g in grads:
        views.append(flat[at:at + g.numel()].view_as(g))
        at += g.numel()

    def both_ways():
        for v, g in zip(views, grads):
            v.copy_(g)
        for v, g in zip(views, grads):
            g.copy_(v)
    return both_ways, flat.numel() * flat.element_size()


def _grad_accumulate(model):
    """(a callable, the bytes of gradient it adds): a new gradient added into every parameter's
    existing one, in place, as autograd's AccumulateGrad does for each microbatch after the first
    when a pipeline stage runs several microbatches a step. The layer cells clear their gradients
    every pass, so their backward leaves this out (LM small, one block at microbatch 1, one thread,
    Xeon, 2026-12-05: 14.3 ms a backward clearing, 15.8 ms accumulating: 11%)."""
    grads = [torch.randn_like(p) for p in model.parameters()]
    new = [torch.randn_like(p) for p in model.parameters()]

    def add():
        for g, n in zip(grads, new):
            g.add_(n)
    return add, sum(g.numel() * g.element_size() for g in grads)


def measure(workload: str, size_name: str, microbatches: list[int], repeats: int, cohort=None,
            cell_s: float = 0.0, precision: float = 0.0, budget_s: float = BUDGET_S,
            shard_names: tuple[str, ...] = (), by_cpu: bool = False) -> dict:
    """The profile's figures (see the module docstring). Under a launcher every rank profiles at
    once, in a `cohort` (harness/planning/cohort.py: each measurement started together, ended
    together and cell_s long at least), so each device is measured while the others load the
    machine as the training job will (alone, a rank held to 0.5 CPU measured 25% faster per
    block than it ran inside a 2-rank pipeline)."""
    wl = registry.get(workload)
    layer_model = registry.capability(wl, "profile_layers")
    if layer_model is None:
        raise UsageError(f"{workload} has no per-layer model for the planner; workloads with one: "
                         f"{', '.join(registry.supporting('profile_layers')) or 'none yet'}")
    size = wl.sizes[size_name]
    torch.manual_seed(0)
    model = wl.build_model(size)
    lm = layer_model(model, size)
    kinds = {k: module for k, (module, _) in lm["layers"].items()}
    params = {k: sum(p.numel() for p in m.parameters()) for k, m in kinds.items()}
    params["head"] -= lm["tied_params"]  # tied to the embedding: counted once, there
    # the block again under full recomputation (harness/parallel/recompute.py), on its own copy
    # of the model: what recomputation adds to backward, measured (results/planner/layer_costs.py)
    torch.manual_seed(0)
    again = layer_model(wl.build_model(size), size)["layers"]["block"]
    for unit in wl.recompute_units(again[0]):
        recompute.wrap(unit, "full")
    # one tensor- or context-parallel member's share of the block (harness/planning/shards.py)
    parts, skipped = shards.layers(wl, size, wl.recompute_units(model)[0], list(shard_names),
                                   shards.stream(lm["d_model"]))
    measured = {**lm["layers"], "block_recompute": again, **parts}
    block, block_input = lm["layers"]["block"]
    # every cell of the profile timed in rounds (harness/measure/cells.py), so that the machine's
    # drift moves their costs together and the planner's relative costs are free of it
    timed: dict[str, object] = {}
    for mb in microbatches:
        y = lm["target"](mb)
        for kind, (module, make) in measured.items():
            timed[f"{kind}@{mb}"] = (
                cells.Share((block, lambda mb=mb: block_input(mb)), (module, lambda make=make, mb=mb: make(mb)))
                if kind in parts else  # a share of the block: timed against it, in alternating passes
                cells.Layer(module, lambda make=make, mb=mb: make(mb),
                            (lambda out, y=y: wl.loss(out, y)) if kind == "head" else None))
    n_params = sum(p.numel() for p in model.parameters())
    copy_grads, copy_bytes = _grad_copy(model)
    timed["optimizer"] = cells.Call(_optimizer_step(wl, model, size))
    timed["grad_copy"] = cells.Call(copy_grads)
    accumulate, accumulate_bytes = _grad_accumulate(model)
    timed["grad_accumulate"] = cells.Call(accumulate)
    rows = cells.time_in_rounds(timed, repeats, cell_s, precision, budget_s, cohort, cells.VISIT_S, by_cpu)
    layers = {kind: [{"microbatch": mb, **rows[f"{kind}@{mb}"]} for mb in microbatches] for kind in measured}
    # a real tpT or cpC group's block against its member's: what the group's collectives add in the step
    # (harness/planning/in_step.py); on one rank, why not
    in_step_rows: dict[str, list[dict] | str] = {}
    for name in (k[len("block_"):] for k in parts):
        reason = in_step.why_not(cohort.world if cohort else 1, int(name[2:]))
        in_step_rows[name] = reason or in_step.measure(wl, wl.recompute_units(model)[0], parts[f"block_{name}"][0],
                                                       name, microbatches, lm["seq_len"], lm["d_model"],
                                                       precision, budget_s)
    return {"workload": workload, "size": size_name, "n_blocks": lm["n_blocks"], "seq_len": lm["seq_len"],
            "d_model": lm["d_model"], "microbatches": microbatches, "repeats": repeats,
            "precision": precision, "budget_s": budget_s,
            "shards": {n: why for n, why in skipped.items()} | {k[len("block_"):]: "measured" for k in parts},
            "params": params, "tied_params": lm["tied_params"], "tp_splits": lm["tp_splits"],
            "state_bytes_per_param": STATE_BYTES_PER_PARAM,
            "boundary_bytes_per_sample": lm["boundary_bytes_per_sample"],
            "optimizer_s_per_param": rows["optimizer"]["cost_s"] / n_params,
            "grad_copy_s_per_byte": rows["grad_copy"]["cost_s"] / copy_bytes,
            "grad_accumulate_s_per_byte": rows["grad_accumulate"]["cost_s"] / accumulate_bytes,
            "timed": {"how": "rounds", "cells": len(timed), "rounds": rows["optimizer"]["rounds"],
                      "by": "cpu seconds x the rank's wall per cpu second" if by_cpu else "wall seconds",
                      "wall_per_cpu": rows["optimizer"]["wall_per_cpu"],
                      "optimizer": _call_row(rows["optimizer"]), "grad_copy": _call_row(rows["grad_copy"]),
                      "grad_accumulate": _call_row(rows["grad_accumulate"])},
            "threads": torch.get_num_threads(), "layers": layers, "in_step": in_step_rows}


def _call_row(row: dict) -> dict:
    return {k: row[k] for k in ("cost_s", "median_s", "half_width", "ended_by", "held_passes")}


def run(workload: str, size_name: str, microbatches: list[int], repeats: int, cpus: float | None,
        threads: int, root: Path, cell_s: float = 1.0, precision: float = PRECISION,
        budget_s: float = BUDGET_S, shard_names: tuple[str, ...] = ()) -> Path:
    """Measure and record one profile; returns its folder. Under a launcher (mpiexec -n N)
    every rank profiles at once and writes its own record, held to its HARNESS_RANK_CPU share."""
    from harness.parallel import dist as dist_mod
    if registry.capability(registry.get(workload), "profile_layers") is None:
        raise UsageError(f"profile: workload {workload!r} has no per-layer model to profile; workloads with one: "
                         f"{', '.join(registry.supporting('profile_layers')) or 'none yet'}")
    sizes = registry.get(workload).sizes
    if size_name not in sizes:
        raise UsageError(f"profile: unknown size {size_name!r} for {workload}; valid: {', '.join(sizes)}")
    if not microbatches or min(microbatches) < 1:
        raise UsageError(f"profile: --microbatches must be sizes >= 1, e.g. 1,2,4; got {microbatches}")
    info = dist_mod.from_env()
    cohort = None
    quota = None
    if info.world > 1:
        from harness.planning.cohort import of_process_group
        dist_mod.init(info, "cpu")
        cohort = of_process_group()
    if cpus is not None:
        reason = rank_cpu.unavailable()
        if reason:
            raise UsageError(f"profile --cpus {cpus}: {reason}")
        quota = rank_cpu.Quota(cpus)
    else:  # HARNESS_RANK_CPU: this rank's share, as a training run applies it
        try:
            quota = rank_cpu.apply(info.rank, info.world)
        except (BadInput, Unsupported) as e:
            raise UsageError(str(e)) from None
        cpus = quota.cpus if quota else None
    torch.set_num_threads(threads)
    rank = f"-r{info.rank}" if info.world > 1 else ""
    run_id = f"profile-{workload}-{size_name}-cpus{cpus or 'all'}{rank}-{unique_stamp()}"
    d = root / SUBDIR / run_id
    d.mkdir(parents=True)
    started = time.time()
    schema.write_json(d / schema.CONFIG, {"kind": KIND, "run_id": run_id, "workload": workload, "size": size_name,
                                          "microbatches": microbatches, "repeats": repeats, "threads": threads,
                                          "cpus": cpus, "precision": precision, "budget_s": budget_s,
                                          "shards": list(shard_names),
                                          "record_version": schema.RECORD_VERSION})
    schema.write_json(d / schema.ENV, envinfo.capture())
    schema.open_record(d, started)
    status, reason, summary = schema.FAILED, "", {}
    try:
        # held to a quota, a pass's wall time is quantized in the quota's periods: cells.py times CPU
        summary = measure(workload, size_name, microbatches, repeats, cohort, cell_s if cohort else 0.0,
                          precision, budget_s, shard_names, by_cpu=quota is not None)
        summary["constraint"] = quota.describe() if quota else {"cpus": None, "how": "unconstrained"}
        summary["profiled_with"] = {"ranks": info.world, "rank": info.rank, "cell_s": cell_s if cohort else 0.0,
                                    "ended": "together" if cohort else "alone"}
        status = schema.FINISHED
    except Exception as e:  # noqa: BLE001 - the record says what failed
        reason = f"{type(e).__name__}: {e}".splitlines()[0]
        raise
    finally:
        if quota:
            quota.release()
        schema.close_record(d, summary, status, reason, started)
        if cohort:
            dist_mod.shutdown(finished=status == schema.FINISHED)
    return d
