"""`python -m harness profile lm --size S`: what the heterogeneous planner needs to know about
this device, measured (Metis and AMP profile the same: per layer kind, per microbatch size,
time and memory).

Per layer kind — the embeddings, one transformer block, the head with the loss — and per
microbatch size: forward and backward seconds (the median of timed passes after one untimed:
at least `repeats`, then until the median's 95% interval is within --precision, default +-2%,
or --budget-s seconds have gone by; the row says which ended it), the bytes autograd saves for
backward (activation memory, counted by saved_tensors_hooks, each storage once) and the
output's bytes (what a stage boundary sends).
With `--shards tp2,cp2` (the default), the block as one member of a tensor- or context-parallel
group computes it (harness/planning/shards.py), timed in alternating passes with the block so
that its share of the block, a ratio, is free of the machine's drift: the planner's TP and CP
compute, measured. Under a launcher, each group's real block (with its collectives) is timed
against the member's as well (harness/planning/in_step.py): what the collectives add in the step.
Per model: parameters per layer kind, the optimizer's step time per parameter (AdamW over
the whole model, timed the same way), and what copying every gradient into one flat buffer and
back costs per byte (what DDP and replicate do around their all-reduce: the gradients go into the
buckets and the reduced values come back; at 0.25 CPU this was 0.1 s a step on LM small, 8% of
it). Model-state bytes per parameter are fp32 weights, gradients and AdamW's two moments: 16 B.

The layer kinds are the pipeline's own stage modules (workloads/lm/pipeline_split.py: a stage
with no blocks holds only the embeddings, or only the final LayerNorm and head), so what is
timed is what a stage runs. `--cpus Q` holds the process to Q CPUs (harness/parallel/cpu_quota.py) to
profile a slower device kind for real. Under a launcher (`mpiexec -n 2 ... profile` with
HARNESS_RANK_CPU="1,0.5") the ranks profile at once, each as its share holds it, each measurement
at least --cell-s seconds long, started together and ended together (harness/planning/cohort.py:
a rank whose rule is met samples on until every rank's is), so every device is measured while
the others load the machine as they will in training; each rank writes its own record.

Written like a run record under results/profiles/<id>/ (config.json with kind "profile",
env.json, summary.json with the figures, status.json last).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from harness.measure import envinfo
from harness.parallel import cpu_quota as rank_cpu
from harness.parallel import recompute
from harness.planning import in_step
from harness.planning import shards
from harness.config import registry
from harness.config.errors import BadInput, Unsupported, UsageError
from harness.run.record import unique_stamp
from harness.measure.timing import now
from results.record import schema
from results.stats.estimators import median_interval

SUBDIR = "profiles"
KIND = schema.PROFILE_KIND  # config.json kind of a layer profile record
STATE_BYTES_PER_PARAM = 16  # fp32 weights + gradients + AdamW exp_avg and exp_avg_sq


def _saved_bytes(fn) -> tuple[object, int]:
    """fn()'s result and the bytes autograd saved for its backward (each storage once)."""
    seen: dict[int, int] = {}

    def pack(t):
        if t.device.type != "meta":
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


PRECISION = 0.02  # default stop rule: the 95% interval of a cell's median pass within +-2%
BUDGET_S = 4.0     # ... or this many seconds of timed passes per cell, whichever comes first


def _stop(totals: list[float], started: float, repeats: int, cell_s: float, precision: float,
          budget_s: float) -> str | None:
    """Why a cell's sampling ends now, or None to go on. Never before `repeats` timed passes and
    cell_s seconds (ranks profiled together stay busy together); then, with a precision target,
    when the distribution-free 95% interval of the median pass (order statistics:
    results/stats/estimators.median_interval) is within +-precision of it, or when budget_s has gone
    by. Two profiles of the same four ranks twenty minutes apart once predicted the same plan 17%
    apart with 3 passes a cell: the profile's own spread, not the model's, bounded the planner."""
    elapsed = now() - started
    if len(totals) < repeats or elapsed < cell_s:
        return None
    if precision <= 0:
        return "repeats"
    if _half_width(totals) <= precision:
        return "precision"
    return "budget" if elapsed >= max(budget_s, cell_s) else None


def _half_width(samples: list[float]) -> float:
    """The 95% interval of the median relative to it (+-); inf with too few samples for one."""
    interval = median_interval(samples)
    return float("inf") if interval is None else (interval[1] - interval[0]) / (2 * statistics.median(samples))


def _ended(totals: list[float], start: float, mine: str | None, cohort, rule: tuple) -> tuple[str | None, bool]:
    """(this rank's reason, once its rule is met; whether the cell ends now): alone, when the
    rule is met; in a cohort, when every rank's has been (harness/planning/cohort.py)."""
    mine = mine or _stop(totals, start, *rule)
    return mine, (mine is not None) if cohort is None else cohort.done(mine is not None)


def _pass(module, make_input, loss_fn) -> tuple[float, float, int, int]:
    """One forward and backward of `module` on make_input(): (fwd s, bwd s, bytes autograd saved,
    the output's bytes). With loss_fn the backward starts from the loss, else from ones."""
    x = make_input()
    module.zero_grad(set_to_none=True)
    t0 = now()
    out, saved = _saved_bytes(lambda: module(x) if loss_fn is None else loss_fn(module(x)))
    t1 = now()
    out.backward(None if loss_fn else torch.ones_like(out))
    t2 = now()
    return t1 - t0, t2 - t1, saved, (out.numel() * out.element_size() if loss_fn is None else 0)


def _time_layer(module, make_input, loss_fn, repeats: int, cell_s: float = 0.0, precision: float = 0.0,
                budget_s: float = BUDGET_S, cohort=None) -> dict:
    """Median forward and backward seconds of `module` on make_input(), its saved bytes and
    its output's bytes. Timed passes until _stop says (after one untimed: allocator and kernel
    warm-up) and, in a cohort, until every rank's rule has; the row keeps every sample, the
    interval's half-width reached, what ended this rank's rule and how many passes it then ran
    while peers sampled."""
    fwd, bwd, totals = [], [], []
    _, _, saved, out_bytes = _pass(module, make_input, loss_fn)
    start, mine, over, held = now(), None, False, 0  # the window counts timed passes only
    while not over:
        f, b, saved, out_bytes = _pass(module, make_input, loss_fn)
        fwd.append(f)
        bwd.append(b)
        totals.append(f + b)
        held += mine is not None
        mine, over = _ended(totals, start, mine, cohort, (repeats, cell_s, precision, budget_s))
    return {"fwd_s": statistics.median(fwd), "bwd_s": statistics.median(bwd), "fwd_samples_s": fwd,
            "bwd_samples_s": bwd, "saved_bytes": saved, "out_bytes": out_bytes,
            "half_width": _finite(_half_width(totals)), "ended_by": mine, "held_passes": held}


def _time_share(whole: tuple, part: tuple, repeats: int, cell_s: float = 0.0, precision: float = 0.0,
                budget_s: float = BUDGET_S, cohort=None) -> dict:
    """`part`'s row (a group member's block: shards.py) timed in alternating passes with `whole`
    (the block), A B B A ..., so that its share of the block, a ratio, is measured with the
    machine's drift cancelled (the run engine's interleaving, harness/run/interleave.py): the
    medians of the per-pair ratios, forward and backward (share_fwd, share_bwd), sampled until
    the total's ratio meets the stop rule. `whole` and `part`: (module, input maker)."""
    rows = {"whole": ([], []), "part": ([], [])}
    ratios: list[float] = []
    _pass(*whole, None)
    _, _, saved, out_bytes = _pass(*part, None)
    start, mine, over, held, i = now(), None, False, 0, 0
    while not over:
        got = {}
        for side in (("whole", "part") if i % 2 == 0 else ("part", "whole")):
            f, b, s_, o = _pass(*(whole if side == "whole" else part), None)
            got[side] = (f, b)
            rows[side][0].append(f)
            rows[side][1].append(b)
            if side == "part":
                saved, out_bytes = s_, o
        ratios.append(sum(got["part"]) / sum(got["whole"]))
        held += mine is not None
        mine, over = _ended(ratios, start, mine, cohort, (repeats, cell_s, precision, budget_s))
        i += 1
    (wf, wb), (pf, pb) = rows["whole"], rows["part"]
    return {"fwd_s": statistics.median(pf), "bwd_s": statistics.median(pb), "fwd_samples_s": pf, "bwd_samples_s": pb,
            "share_fwd": statistics.median(p / w for p, w in zip(pf, wf)),
            "share_bwd": statistics.median(p / w for p, w in zip(pb, wb)), "share_samples": ratios,
            "saved_bytes": saved, "out_bytes": out_bytes, "half_width": _finite(_half_width(ratios)),
            "ended_by": mine, "held_passes": held}


def _finite(x: float) -> float | None:
    return x if x != float("inf") else None  # JSON has no infinity


def _timed(fn, repeats: int, precision: float, budget_s: float, cohort=None) -> list[float]:
    """Seconds of fn() per call: one untimed call, then calls until _stop says (in a cohort:
    started together, and until every rank's rule has)."""
    if cohort:
        cohort.start()
    fn()
    times: list[float] = []
    start, mine, over = now(), None, False
    while not over:
        t0 = now()
        fn()
        times.append(now() - t0)
        mine, over = _ended(times, start, mine, cohort, (repeats, 0.0, precision, budget_s))
    return times


def _optimizer_s_per_param(wl, model, size, repeats: int, precision: float = 0.0, budget_s: float = BUDGET_S,
                           cohort=None) -> float:
    # gradients of a real step's scale, not zeros: AdamW's step over all-zero gradients and state
    # took 0.54 s on LM small at 0.25 CPU against 0.27-0.28 s over N(0, 1e-3) ones (2026-12-04, one
    # thread; DP runs' profiled optimizer step then took 0.15 s against 0.36 s priced from zeros)
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = (torch.randn(p.shape, generator=gen, dtype=p.dtype) * 1e-3).to(p.device)
    opt, _ = wl.build_optimizer(model, size, size.batch_size, 100)
    times = _timed(opt.step, repeats, precision, budget_s, cohort)
    return statistics.median(times) / sum(p.numel() for p in model.parameters())


def _grad_copy_s_per_byte(model, repeats: int, precision: float = 0.0, budget_s: float = BUDGET_S,
                          cohort=None) -> float:
    """Seconds per gradient byte to copy every gradient into a persistent flat buffer and back:
    DDP's copy into its buckets (in the backward's hooks) and of the reduced bucket back into the
    gradients (gradient_as_bucket_view off, torch's default). The median of the timed calls."""
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
    times = _timed(both_ways, repeats, precision, budget_s, cohort)
    return statistics.median(times) / (flat.numel() * flat.element_size())


def measure(workload: str, size_name: str, microbatches: list[int], repeats: int, cohort=None,
            cell_s: float = 0.0, precision: float = 0.0, budget_s: float = BUDGET_S,
            shard_names: tuple[str, ...] = ()) -> dict:
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
    layers: dict[str, list[dict]] = {k: [] for k in measured}
    block, block_input = lm["layers"]["block"]
    for mb in microbatches:
        y = lm["target"](mb)
        for kind, (module, make) in measured.items():
            if cohort:
                cohort.start()
            rule = (repeats, cell_s, precision, budget_s, cohort)
            if kind in parts:  # a share of the block: timed against it, interleaved
                row = _time_share((block, lambda: block_input(mb)), (module, lambda: make(mb)), *rule)  # noqa: B023
            else:
                row = _time_layer(module, lambda: make(mb),  # noqa: B023 - called within this iteration
                                  (lambda out: wl.loss(out, y)) if kind == "head" else None, *rule)
            layers[kind].append({"microbatch": mb, **row})
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
            "optimizer_s_per_param": _optimizer_s_per_param(wl, model, size, repeats, precision, budget_s, cohort),
            "grad_copy_s_per_byte": _grad_copy_s_per_byte(model, repeats, precision, budget_s, cohort),
            "threads": torch.get_num_threads(), "layers": layers, "in_step": in_step_rows}


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
        summary = measure(workload, size_name, microbatches, repeats, cohort, cell_s if cohort else 0.0,
                          precision, budget_s, shard_names)
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
