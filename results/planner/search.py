"""The heterogeneous training planner: split data- and pipeline-parallel work over unequal
devices by their measured (or estimated) speed, and predict the step with results/analysis/schedule.py.

Data parallel (every device a replica): the global batch B split into integer shares so that
every device finishes its forward and backward at the same time — a device k times faster takes
k times the samples (Poplar, Whale) — found exactly by a bisection on the finishing time over the
devices' own time-vs-batch curves (not a straight proportion: a device's time per sample changes
with its batch), within each device's memory.

Pipeline (a model too big for a device, or asked for): pipelines made of every kind in the
inventory's proportions (HetPipe's "virtual workers": with counts 500/400/700, 100 pipelines of
5 + 4 + 7 stages), replicated data-parallel. Per stage order (the device kinds in every order:
the first and last stages carry the embedding and the head, the first holds the most in-flight
microbatches under 1F1B) and per microbatch count, the blocks are split by dynamic programming
to minimise the slowest stage (AMP, Metis), every stage within its memory, with full
recomputation of a stage's blocks where activations would not fit; each candidate is then
simulated and the fastest kept. The uniform split (equal blocks, or equal shares) is simulated
beside it.

Two utilizations, both reported:
- `utilization`: throughput of the mixed job / the sum of the throughputs each device reaches
  training alone (B samples per step, its whole-model forward and backward and one optimizer
  step, memory ignored). It is 1 only if no device ever waits and nothing is spent on
  communication or the pipeline's bubble.
- `utilization_seed`, as HETHUB (arXiv 2405.16256) counts it: throughput of the mixed job / the
  sum over device kinds of the throughput a homogeneous job of that kind (all its devices, the
  same samples per device) reaches with its own best plan (homogeneous_rates). Communication and bubbles
  a homogeneous job pays too are in the bound, so this one asks only what mixing costs.

Strategy `auto` chooses the shape too (candidates): data parallel over every device (with
gradient accumulation where it beats one microbatch a step, and recomputation on the kinds whose
memory caps their share, too), or pipelines of every depth (the
smallest proportional group times each divisor of gcd(counts)), each with its best split; each
over tensor/context groups inside a node (within_stage.py) where the inventory gives nodes; and
data parallel over each kind's own best job, pipelines of unlike depth (kind_jobs.py). The
fastest predicted wins, the runners-up are kept with the reason.
"""
from __future__ import annotations

import math
from functools import reduce

from results.planner.data_parallel import dp_plan, memory_bound
from results.planner.inventory import Inventory, PlanError
from results.planner.layer_costs import Costs
from results.planner.links import LinkModel
from results.planner.pipeline_plan import pp_plan, pp_uniform
from results.planner.kind_jobs import kinds_plan
from results.planner.labels import label
from results.planner.utilization import utilization_seed
from results.planner.within_stage import NONE, Group, as_devices, grouped, options

STRATEGIES = ("auto", "dp", "pp", "kinds")  # auto: the best of every shape below (candidates)
SHAPES = ("dp", "pp", "kinds")  # data parallel; pipelines; DP over each kind's own job (kind_jobs.py)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _shapes(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int, schedule: str,
            strategies, cutoff=lambda: math.inf) -> tuple[list[dict], list[str]]:
    """Data parallel over all devices and pipelines of every depth (the smallest proportional
    group x each divisor of gcd(counts), up to one block per stage), replicated data-parallel;
    each the best split of its shape (dp_plan, pp_plan)."""
    found, refused = [], []
    if "dp" in strategies:
        plain = None
        try:
            plain = dp_plan(inv, costs, links, batch)
            found.append(plain)
        except PlanError as e:
            refused.append(f"dp: {e}")
        try:  # gradient accumulation as a choice, where it beats the plain split or the plain one can't fit
            acc = dp_plan(inv, costs, links, batch, accumulate=True)
            if max(acc["microbatch_split"]) > 1 and (
                    plain is None or acc["predicted"]["step_s"] < plain["predicted"]["step_s"]):
                found.append(acc)
        except PlanError as e:
            if plain is not None:
                refused.append(f"dp with accumulation: {e}")
        bound = memory_bound(inv, costs, batch)
        if bound:  # recomputation as a choice: the kinds short of memory trade time for a larger share
            try:
                found.append(dp_plan(inv, costs, links, batch, tuple(bound)))
            except PlanError as e:
                refused.append(f"dp with recomputation on {', '.join(bound)}: {e}")
    if "pp" in strategies:
        g = reduce(math.gcd, (d.count for d in inv.devices))
        shortest = sum(d.count // g for d in inv.devices)
        n = costs[inv.devices[0].kind].n_blocks
        for depth in _divisors(g):
            if shortest * depth == 1:  # a one-stage pipeline is data parallel (without DDP's overlap)
                if "dp" not in strategies:
                    refused.append("pp: one device is one stage, which is data parallel: use --strategy dp")
                continue
            if shortest * depth > n:
                if depth == 1:
                    refused.append(f"pp: {shortest} stages is more than the model's {n} blocks")
                break
            try:
                found.append(pp_plan(inv, costs, links, batch, schedule, depth, cutoff(), with_uniform=False))
            except PlanError as e:
                refused.append(f"pp depth x{depth}: {e}")
    return found, refused


def _combos(inv: Inventory, alone: dict[str, dict]) -> list[dict[str, Group]]:
    """The groups to try together: none; each kind's two best groups from its own job (the
    homogeneous search tried every group it can form), all kinds at once (up to 3 kinds: 2^3
    combinations) or one kind at a time. A pruning, not an exhaustive search: a kind's group is
    ranked by its own job, as Metis ranks a device type's (TP, batch) profiles."""
    best = {k: [g for g in a.get("groups_ranked", [])[:2]] for k, a in alone.items()}
    out: list[dict[str, Group]] = [{}]
    if not any(g != NONE for gs in best.values() for g in gs):
        return out
    kinds = [d.kind for d in inv.devices]
    if len(kinds) <= 3:
        from itertools import product
        for pick in product(*[best[k] or [NONE] for k in kinds]):
            out.append(dict(zip(kinds, pick)))
    else:
        out.append({k: best[k][0] for k in kinds if best[k]})
        out += [{k: g} for k in kinds for g in best[k] if g != NONE]
    uniq = {tuple(sorted((k, g) for k, g in c.items() if g != NONE)): c for c in out}
    return list(uniq.values())


def candidates(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int, schedule: str = "1f1b",
               strategies: tuple[str, ...] = ("dp", "pp"), alone: dict[str, dict] | None = None
               ) -> tuple[list[dict], list[str]]:
    """Every plan the planner can make here, fastest predicted step first, and why the others
    could not be made: each shape (_shapes) over each combination of tensor/context groups
    (_combos; a kind alone tries every group it can form), and with "kinds", data parallel over
    each kind's own best job (kind_jobs.py)."""
    if len(inv.devices) == 1:
        d = inv.devices[0]
        combos = [{d.kind: g} for g in options(d, costs[d.kind], d.node_size)]
    else:
        combos = _combos(inv, alone) if alone is not None else [{}]
    found, refused, made_on = [], [], {}

    def cutoff() -> float:  # a grouped plan slower than the TOP-th found is not kept (branch and bound)
        steps = sorted(p["predicted"]["step_s"] for p in found)
        return steps[TOP - 1] if len(steps) >= TOP else math.inf
    for groups in combos:  # the plain one first: its plans set the cutoff for the grouped ones
        ginv, gcosts, real = grouped(inv, costs, links, groups)
        same = len({groups.get(d.kind, NONE) for d in inv.devices}) == 1
        plain = not any(g.size > 1 for g in groups.values())
        # data parallel between groups of unlike degree would reshard every gradient: not modelled
        strat = tuple(s for s in strategies if s != "kinds" and (s != "dp" or same))
        f, r = _shapes(ginv, gcosts, links, batch, schedule, strat, (lambda: math.inf) if plain else cutoff)
        for p in f:
            made_on[id(p)] = (ginv, gcosts, groups, real)
        found += [as_devices(p, groups, real, inv, costs, batch) for p in f]
        if plain:
            refused += r  # the refusals of plain shapes; grouped ones that fail or lose are not news
    if "kinds" in strategies and alone is not None and len(inv.devices) > 1:
        try:
            found.append(kinds_plan(inv, costs, links, batch, schedule, alone))
        except PlanError as e:
            refused.append(f"per kind: {e}")
    found.sort(key=lambda p: p["predicted"]["step_s"])
    if found and "uniform" not in found[0]:  # the uniform split beside the best pipeline plan only
        ginv, gcosts, groups, real = made_on[id(found[0])]
        found[0]["uniform"] = pp_uniform(ginv, gcosts, links, batch, {**found[0], "devices": found[0].get(
            "planned_as", found[0]["devices"])})
        as_devices(found[0], groups, real, inv, costs, batch)
    return found, refused


def alone_jobs(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int,
               schedule: str) -> dict[str, dict]:
    """Per device kind: the best job of only that kind's devices (all of them, the same links,
    the mixed job's samples per device: a global batch of batch x count / all devices), over
    every shape and group it can form, or why it cannot train alone. Their samples/s summed are
    HETHUB's "theoretical upper bound" (arXiv 2405.16256): what the kinds would do as separate
    homogeneous clusters. (The whole batch on each kind alone would flatter the bound: more
    samples per device means more microbatches per pipeline, a smaller bubble, than the mixed
    job can have.) The ranked groups seed the mixed search (_combos); the best plan's shape seeds
    kind_jobs."""
    total = sum(d.count for d in inv.devices)
    out: dict[str, dict] = {}
    seen: dict[tuple, tuple] = {}  # kinds alike in all but name plan alike: 10,000 one-device kinds, ~900 searches
    for d in inv.devices:
        b = max(1, round(batch * d.count / total))
        same = (d.count, d.memory_bytes, d.peak_flop_s, d.profiles, d.node_size,
                d.node_busbw_gb_per_s, b, costs[d.kind].source)
        if same not in seen:
            one = Inventory(devices=(d,), links=inv.links, optimizer_sharded=inv.optimizer_sharded)
            found, refused = candidates(one, {d.kind: costs[d.kind]}, links, b, schedule)
            if found:
                ranked = list(dict.fromkeys(Group(**f["groups"][d.kind]) if "groups" in f else NONE for f in found))
                best = found[0]
                shape = {"strategy": best["strategy"], "depth": best.get("depth", 1), "group": ranked[0],
                         "accumulate": bool(best.get("microbatch_split"))}
                seen[same] = (d.kind, {"samples_per_s": best["predicted"]["samples_per_s"], "plan": label(best),
                                       "global_batch": b, "shape": shape, "groups_ranked": ranked})
            else:
                seen[same] = (d.kind, {"samples_per_s": None, "global_batch": b, "why": "; ".join(refused)})
        first, r = seen[same]
        out[d.kind] = r if first == d.kind else _renamed(r, first, d.kind)
    return out


def _renamed(r: dict, old: str, new: str) -> dict:
    r = dict(r)
    if "plan" in r:
        r["plan"] = r["plan"].replace(f" {old} ", f" {new} ").replace(f" {old}", f" {new}")
    return r


def homogeneous_rates(alone: dict[str, dict]) -> dict[str, dict]:
    """What a plan keeps of alone_jobs: samples/s, global batch and best plan (or why not)."""
    return {k: {f: v for f, v in r.items() if f in ("samples_per_s", "global_batch", "plan", "why")}
            for k, r in alone.items()}


def _peak_memory(p: dict) -> dict[str, float] | None:
    """Most bytes a device of each kind holds in the plan (pipeline stages), None for data
    parallel (its shares are within each device's cap by construction)."""
    if p["strategy"] != "pp":
        return None
    out: dict[str, float] = {}
    for st in p["stages"]:
        out[st["kind"]] = max(out.get(st["kind"], 0.0), st["mem_bytes"])
    return out


def plan(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int, strategy: str = "auto",
         schedule: str = "1f1b") -> dict:
    """The best plan of `strategy` (auto: of every shape candidates() makes), with the top
    candidates beside it, why the best wins, and both utilizations."""
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown strategy {strategy!r}; valid: {', '.join(STRATEGIES)}")
    if batch < 1:
        raise PlanError(f"global batch must be >= 1; got {batch}")
    alone = alone_jobs(inv, costs, links, batch, schedule)
    found, refused = candidates(inv, costs, links, batch, schedule,
                                SHAPES if strategy == "auto" else (strategy,), alone)
    if not found:
        raise PlanError(refused[0] if len(refused) == 1 else "no plan fits: " + " | ".join(refused))
    out = found[0]
    rates = homogeneous_rates(alone)
    for f in (out["predicted"], out["uniform"]["predicted"]):
        f["utilization_seed"] = utilization_seed(f["samples_per_s"], rates)
    out["homogeneous"] = rates
    out["candidates"] = [{"plan": label(c), "step_s": c["predicted"]["step_s"],
                          "samples_per_s": c["predicted"]["samples_per_s"],
                          "peak_memory_bytes": _peak_memory(c), "bubble": c["predicted"].get("bubble")}
                         for c in found[:TOP]]
    out["refused"] = refused
    out["extrapolated"] = beyond_profile(out, costs)
    out["why"] = _why(found)
    out.update(global_batch=batch, links=links.source,
               sources={k: c.source for k, c in costs.items()},
               estimate=any(not c.measured for c in costs.values()) or not links.measured)
    return out


def beyond_profile(p: dict, costs: dict[str, Costs]) -> list[str]:
    """A line per device kind the plan prices at a microbatch its profile did not time: a time
    beyond the profiled sizes is a straight line through the two nearest (layer_costs._interp),
    and on this CPU a block's time from 1 to 2 samples did not extend to 4 (2026-12-04: 0.080 and
    0.112 s a forward at 0.25 CPU, 0.257 s in the run at 4; the plan priced 27-36% fast)."""
    if p["strategy"] == "dp":  # with accumulation, each rank's largest microbatch
        counts = p.get("microbatch_split") or [1] * len(p["batch_split"])
        used = [(k, -(-b // m)) for k, b, m in zip(p.get("planned_as", p["devices"]), p["batch_split"], counts)
                if b > 0]
    elif p["strategy"] == "pp":
        used = [(k, p["microbatch_size"]) for k in p["stage_order"]]
    else:
        return []
    out = []
    real = p.get("real_kind", {})  # a group's stage ("H100 tp4") is priced from its device kind's profile
    sizes: dict[str, set[int]] = {}  # each kind's microbatches, gathered once (10,000 one-device kinds)
    for k, b in used:
        sizes.setdefault(k, set()).add(b)
    for k, kind_sizes in sizes.items():
        c = costs.get(real.get(k, k))
        timed = c.profiled_microbatches() if c is not None else None
        beyond = sorted(b for b in kind_sizes if timed and not timed[0] <= b <= timed[1])
        if beyond:
            out.append(f"{k}: microbatch {', '.join(map(str, beyond))} priced beyond the profiled "
                       f"{timed[0]}-{timed[1]} (extrapolated)")
    return out


TOP = 5  # candidates kept in a plan beside the best


def _why(found: list[dict]) -> str:
    best = found[0]
    if len(found) == 1:
        return f"{label(best)} is the only plan that fits"
    nxt = found[1]
    gain = nxt["predicted"]["step_s"] / best["predicted"]["step_s"]
    parts = []
    if best["strategy"] == "pp" and nxt["strategy"] == "pp":
        parts.append(f"bubble {best['predicted']['bubble']:.3f} vs {nxt['predicted']['bubble']:.3f}")
    if best["strategy"] == "dp":
        pr = best["predicted"]
        parts.append(f"no pipeline bubble; its all-reduce ({pr['reduce_s'] * 1e3:.1f} ms) runs under the backward in "
                     f"DDP's buckets, {pr['exposed_reduce_s'] * 1e3:.1f} ms of it exposed")
    return (f"{label(best)} predicts {best['predicted']['step_s'] * 1e3:.1f} ms a step, {gain:.2f}x faster than the "
            f"next, {label(nxt)} ({nxt['predicted']['step_s'] * 1e3:.1f} ms)" + (f": {'; '.join(parts)}" if parts else ""))
