"""`python -m harness plan --devices FILE --workload lm --size S --global-batch B`: the
heterogeneous planner's command (results/planner/search.py does the planning, results/analysis/schedule.py the
simulation). Prints the plan, its predicted step time and utilization with the uniform split
beside it, writes the plan under results/plans/ and a sweep cell that runs it.

--size is an LM size (devices with a measured profile must have profiled it) or a what-if shape
(results/layer_costs.SHAPES, e.g. llama2-70b), which only estimated devices can plan: the
printout then says SIMULATION and names every estimate.
"""
from __future__ import annotations

import json
import math
import sys
import time
from functools import reduce
from pathlib import Path

from harness.config.errors import UsageError
from harness.run.record import unique_stamp
from results.planner import inventory as inv_mod
from results.planner import layer_costs, pooled
from results.planner import report as plan_report
from results.planner import search as planner
from results.planner.links import LinkModel

def _shape(workload: str, size: str) -> layer_costs.Shape:
    if size in layer_costs.SHAPES:
        return layer_costs.SHAPES[size]
    from harness.config import registry
    wl = registry.get(workload)
    shape_of = registry.capability(wl, "planner_shape")
    if shape_of is None:  # the planner models transformer layers; a CNN has none to split
        raise UsageError(f"{workload} has no layer model for the planner; workloads with one: "
                         f"{', '.join(registry.supporting('planner_shape')) or 'none yet'}")
    if size not in wl.sizes:
        raise UsageError(f"unknown size {size!r} for {workload}; valid: {', '.join(wl.sizes)}, or a what-if shape: "
                         f"{', '.join(layer_costs.SHAPES)}")
    s = shape_of(wl.sizes[size])
    return layer_costs.Shape(size, s["n_layer"], s["d_model"], s["n_head"], s["kv_heads"], s["ffn"], s["vocab"],
                             s["seq_len"])


def costs_for(inv: inv_mod.Inventory, workload: str, size: str) -> dict[str, layer_costs.Costs]:
    # ZeRO-1 over the data-parallel replicas, which a pipeline plan makes gcd(counts) of
    replicas = reduce(math.gcd, (d.count for d in inv.devices)) if inv.optimizer_sharded else 0
    out = {}
    for d in inv.devices:
        if d.profiles:
            each = [layer_costs.from_profile(d.kind, r) for r in d.profiles]
            for c in each:
                if c.model != f"{workload}/{size}":
                    raise UsageError(f"device {d.kind}: its profile is of {c.model}, not {workload}/{size}")
            try:
                c = pooled.pooled(each)  # a kind profiled on several of its devices: their mean
            except ValueError as e:
                raise UsageError(f"device {d.kind}: {e}") from None
        else:
            c = layer_costs.from_shape(d.kind, _shape(workload, size), d.peak_flop_s, replicas)
        out[d.kind] = c.scaled(d.calibration)
    return out


def not_runnable(p: dict) -> str | None:
    """Why the harness cannot run this plan as one sweep cell yet, or None."""
    if p["strategy"] == "kinds":
        jobs = list(p["jobs"].values())
        if any(j.get("strategy") != "pp" for j in jobs):
            return ("each kind runs its own job, and not every kind's is a pipeline: one launch runs data parallel "
                    "over unequal pipeline replicas only (parallel.batch_split with parallel.pp)")
        if len({(len(j["pp_split"]), tuple(j["pp_split"]), j["schedule"]) for j in jobs}) > 1:
            return ("each kind's pipeline has its own stages: the replicas' all-reduce needs every kind's stage s "
                    "to hold the same blocks (one parallel.pp_split)")
        if any(j.get("recompute") or j.get("groups") for j in jobs):
            return "a kind's pipeline recomputes or has tensor/context groups: not one sweep cell"
    if p.get("recompute") and set(p["recompute"]) != set(p["devices"]):
        return (f"recomputation on {', '.join(p['recompute'])} only: the sweep's parallel.recompute holds one "
                f"setting for every rank")
    if p.get("groups"):
        groups = ", ".join(f"{k} tp{g['tp']} cp{g['cp']}" for k, g in p["groups"].items())
        return (f"tensor/context groups ({groups}) "
                f"beside {'a batch split' if p['strategy'] == 'dp' else 'pipeline stages of other kinds'}: the sweep's "
                f"parallel keys hold one tp and cp for every rank")
    return None


def split_text(split: list[int]) -> str:
    """A split as parallel.batch_split / pp_split take it: "8,4"."""
    return ",".join(map(str, split))


def overrides(p: dict) -> list[str]:
    """A dp or pp plan as `--set` overrides: the parallel keys `harness plan --cell` writes. A
    kinds plan of pipelines (each kind its own pipeline replicas, the same split; not_runnable):
    one pipeline with unequal replicas, each on its own kind's contiguous ranks in the
    inventory's order (harness/parallel/strategies._contiguous_replicas), each with its kind's
    share of the batch and microbatches."""
    if p["strategy"] == "kinds":
        jobs = list(p["jobs"].values())
        shares = [j["global_batch"] // j["replicas"] for j in jobs for _ in range(j["replicas"])]
        counts = [j["microbatches"] for j in jobs for _ in range(j["replicas"])]
        return [f"parallel.pp={len(jobs[0]['pp_split'])}", f"parallel.pp_schedule={jobs[0]['schedule']}",
                f"parallel.pp_split={split_text(jobs[0]['pp_split'])}", f"parallel.batch_split={split_text(shares)}",
                f"parallel.microbatch_split={split_text(counts)}"]
    if p["strategy"] == "dp":
        return [f"parallel.batch_split={split_text(p['batch_split'])}"] + (
            ["parallel.recompute=full"] if p.get("recompute") else []) + (
            [f"parallel.microbatch_split={split_text(p['microbatch_split'])}"] if p.get("microbatch_split") else [])
    return [f"parallel.pp={len(p['pp_split'])}", f"parallel.pp_schedule={p['schedule']}",
            f"parallel.microbatches={p['microbatches']}", f"parallel.pp_split={split_text(p['pp_split'])}"]


def rank_kinds(p: dict) -> list[str]:
    """Each rank's device kind, in mesh order: a dp or kinds plan's devices; in a pipeline the mesh is
    (pp, dp, ...), so rank r runs stage r // replicas on that stage's kind."""
    if p["strategy"] in ("dp", "kinds"):  # kinds: each kind's replicas on its own contiguous ranks
        return list(p["devices"])
    return [p["stage_order"][r // p.get("replicas", 1)] for r in range(len(p["devices"]))]


def _cell(p: dict, workload: str, size: str, batch: int) -> str:
    keys = [o.removeprefix("parallel.").split("=", 1) for o in overrides(p)]
    # a split is quoted, so YAML reads "12" as the split's text, not a number
    par = "{" + ", ".join([*(["data: ddp"] if p["strategy"] == "dp" else []),
                           *(f'{k}: "{v}"' if k.endswith("_split") else f"{k}: {v}" for k, v in keys)]) + "}"
    order = rank_kinds(p)
    ranks = len(order)
    return (f"# written by `harness plan` at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: run it with\n"
            f"# `make parallel SWEEP_PARALLEL=<this file>`, each rank on its device: "
            f"{', '.join(f'rank {r}: {k}' for r, k in enumerate(order))}\n"
            f"name: plan-{workload}-{size}-{p['strategy']}\nworkloads: [{workload}]\nsizes: [{size}]\n"
            f"repeats: 1\nmatrix: [baseline]\nparallel:\n  - {par}\nranks: [{ranks}]\n"
            f"base: {{batch_size: {batch}, steps: 10, warmup_steps: 2}}\n")


SHOWN = 16  # a split of more devices is printed per kind (the plan file keeps every share)


def _split_text(devices: list[str], shares: list[int]) -> str:
    """'8,8' for a few devices; per kind 'H100 4000x 3 + 1000x 2; ...' for many (a 10,000-entry
    list on the terminal says nothing)."""
    if len(shares) <= SHOWN:
        return ",".join(map(str, shares))
    from collections import Counter
    per: dict[str, Counter] = {}
    for k, b in zip(devices, shares):
        per.setdefault(k, Counter())[b] += 1
    return "; ".join(f"{k} " + " + ".join(f"{n}x {b}" for b, n in sorted(c.items(), reverse=True))
                     for k, c in per.items())


def _typical(f: dict) -> str:
    """The step of median durations beside a pipeline plan's expected one, and the replicas' wait in it."""
    if "step_s_typical" not in f:
        return ""
    wait = (f", {1e3 * f['replica_wait_s']:.1f} ms of it the replicas waiting for the slowest"
            if f.get("replica_wait_s") else "")
    return (f"; {1e3 * f['step_s_typical']:.1f} ms with every operation at its median (the expected step "
            f"counts the stages' measured spread{wait})")


def _lines(p: dict) -> list[str]:
    pr, un = p["predicted"], p["uniform"]["predicted"]
    estimates = {f"{k}: {s.removeprefix('ESTIMATE: ')}" for k, s in p["sources"].items() if s.startswith("ESTIMATE")}
    said = sorted(estimates) + ([f"links {p['links']}"] if p["links"].startswith("ESTIMATE") else [])
    head = f"SIMULATION (estimates: {'; '.join(said)})" if p["estimate"] else "from measured profiles and links"
    out = [f"plan ({p['strategy']}, global batch {p['global_batch']}, {len(p['devices'])} devices): {head}"]
    for r in plan_report.per_kind_frame(p).to_dict("records"):
        g = "".join(f" {n}{r[c]}" for n, c in (("tp", "tensor parallel"), ("cp", "context parallel")) if r[c] > 1)
        out.append(f"  {r['device']} x{r['devices']}{g}: {r['its part']}")
    if p["strategy"] == "kinds":
        pr = p["predicted"]
        for k, j in p["jobs"].items():
            out.append(f"  {k}: {j['global_batch']} samples a step, {1e3 * j['step_s']:.1f} ms "
                       f"(uniform share {p['uniform']['jobs'][k]})")
        out.append(f"  then the kinds all-reduce their gradients: {1e3 * pr['cross_reduce_s']:.1f} ms"
                   f"{' over the host relay' if p['host_relay'] else ''}")
    elif p["strategy"] == "dp":
        out.append(f"  batch split  {_split_text(p['devices'], p['batch_split'])}   (uniform: "
                   f"{_split_text(p['devices'], p['uniform']['batch_split'])})")
        if p.get("microbatch_split"):  # gradient accumulation: each rank's microbatches, each kind's size limit
            out.append(f"  microbatches {_split_text(p['devices'], p['microbatch_split'])}, at most "
                       + ", ".join(f"{k} {b}" for k, b in p["microbatch_limit"].items()) + " samples each")
    else:
        out.append(f"  {p['replicas']} pipeline replica(s) of {len(p['stage_order'])} stages, {p['schedule']}, "
                   f"M={p['microbatches']} microbatches of {p['microbatch_size']}")
        for i, st in enumerate(p["stages"]):
            out.append(f"  stage {i}: {st['kind']:<14} {st['blocks']:>3} blocks{' +embedding' if i == 0 else ''}"
                       f"{' +head' if i == len(p['stages']) - 1 else ''}  fwd+bwd {1e3 * (st['fwd_s'] + st['bwd_s']):.2f} ms/mb"
                       + (f" + exchanges {1e3 * st['exchange_s']:.2f}" if st.get("exchange_s") else "")
                       + f"  mem {st['mem_bytes'] / 1e9:.2f} GB{'  (recompute)' if st['recompute'] else ''}")
        out.append(f"  uniform split {','.join(map(str, p['uniform']['pp_split']))} in order {p['uniform']['stage_order']}"
                   f"{'' if un['fits_memory'] else '  (does NOT fit in memory)'}")
    for name, f in (("planned", pr), ("uniform", un)):
        seed = f.get("utilization_seed")
        out.append(f"  {name:<8} predicted step {1e3 * f['step_s']:.1f} ms, {f['samples_per_s']:.2f} samples/s, "
                   f"utilization {f['utilization']:.3f} (vs each device alone), "
                   f"{'n/a' if seed is None else f'{seed:.3f}'} (vs each kind's own best homogeneous job)"
                   + _typical(f))
    for k, r in p.get("homogeneous", {}).items():
        out.append(f"  {k} alone (global batch {r['global_batch']}): " + (
            f"{r['samples_per_s']:.2f} samples/s with {r['plan']}" if r["samples_per_s"]
            else f"cannot train it ({r['why']})"))
    if len(p.get("candidates", [])) > 1:
        out.append("  top plans:")
        for c in p["candidates"]:
            mem = "" if c["peak_memory_bytes"] is None else ", peak " + ", ".join(
                f"{k} {v / 1e9:.1f} GB" for k, v in c["peak_memory_bytes"].items())
            out.append(f"    {c['plan']:<40} {1e3 * c['step_s']:9.1f} ms  {c['samples_per_s']:9.2f} samples/s{mem}")
    if p.get("why"):
        out.append(f"  why: {p['why']}")
    for line in p.get("extrapolated", []):
        out.append(f"  note: {line}; profile that size (harness profile --microbatches) to measure it")
    out.append(f"  links: {p['links']}")
    return out


def main(devices: str, workload: str, size: str, batch: int, strategy: str, schedule: str,
         cell: str | None, results: Path) -> int:
    if schedule not in ("1f1b", "gpipe"):
        raise UsageError(f"unknown schedule {schedule!r}; valid: 1f1b, gpipe")
    try:
        inv = inv_mod.load(Path(devices))
        costs = costs_for(inv, workload, size)
        t0 = time.perf_counter()
        p = planner.plan(inv, costs, LinkModel(inv.links, results), batch, strategy, schedule)
        p["plan_s"] = time.perf_counter() - t0
    except inv_mod.PlanError as e:
        raise UsageError(str(e)) from None
    p.update(inventory=str(devices), workload=workload, size=size)
    for line in _lines(p):
        print(line)
    print(f"  planned in {p['plan_s']:.2f} s")
    d = results / plan_report.SUBDIR
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"plan-{workload}-{size}-{p['strategy']}-{unique_stamp()}.json"
    path.write_text(json.dumps(p, indent=1, default=str))
    print(f"plan: {path}")
    if cell:
        why = not_runnable(p)
        if why:
            print(f"harness: cell not written: {why}; plan with --strategy dp or pp, or an inventory without "
                  f"node_size, for a runnable cell", file=sys.stderr)
            return 2
        Path(cell).write_text(_cell(p, workload, size, batch))
        print(f"cell: {cell}")
    return 0
