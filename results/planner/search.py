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

Strategy `auto` chooses the shape too (candidates): data parallel over every device, or
pipelines of every depth (the smallest proportional group times each divisor of gcd(counts)),
each with its best split; the fastest predicted wins, the runners-up are kept with the reason.
"""
from __future__ import annotations

import math
from functools import reduce

from results.planner.data_parallel import dp_plan
from results.planner.inventory import Inventory, PlanError
from results.planner.layer_costs import Costs
from results.planner.links import LinkModel
from results.planner.pipeline_plan import pp_plan
from results.planner.utilization import utilization_seed

STRATEGIES = ("auto", "dp", "pp")  # auto: the best of every dp and pp shape (candidates)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def label(p: dict) -> str:
    """A plan in a few words: 'dp x16' or 'pp 100 x (5+4+7 stages)'."""
    if p["strategy"] == "dp":
        return f"dp x{len(p['devices'])}"
    from collections import Counter
    c = Counter(p["stage_order"])
    return f"pp {p['replicas']} x ({'+'.join(f'{n} {k}' for k, n in c.items())} stages)"


def candidates(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int, schedule: str = "1f1b",
               strategies: tuple[str, ...] = ("dp", "pp")) -> tuple[list[dict], list[str]]:
    """Every plan the planner can make here, fastest predicted step first, and why the others
    could not be made: data parallel over all devices, and pipelines of every depth (the
    smallest proportional group x each divisor of gcd(counts), up to one block per stage),
    replicated data-parallel. Each is the best split of its shape (dp_plan, pp_plan)."""
    found, refused = [], []
    if "dp" in strategies:
        try:
            found.append(dp_plan(inv, costs, links, batch))
        except PlanError as e:
            refused.append(f"dp: {e}")
    if "pp" in strategies:
        g = reduce(math.gcd, (d.count for d in inv.devices))
        shortest = sum(d.count // g for d in inv.devices)
        n = costs[inv.devices[0].kind].n_blocks
        for depth in _divisors(g):
            if shortest * depth > n:
                if depth == 1:
                    refused.append(f"pp: {shortest} stages is more than the model's {n} blocks")
                break
            try:
                found.append(pp_plan(inv, costs, links, batch, schedule, depth))
            except PlanError as e:
                refused.append(f"pp depth x{depth}: {e}")
    found.sort(key=lambda p: p["predicted"]["step_s"])
    return found, refused


def homogeneous_rates(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int,
                      schedule: str) -> dict[str, dict]:
    """Per device kind: the samples/s a job of only that kind's devices (all of them, the same
    links, the mixed job's samples per device: a global batch of batch x count / all devices)
    reaches with its own best plan, or why it cannot train alone. Their sum is HETHUB's
    "theoretical upper bound" (arXiv 2405.16256): what the kinds would do as separate homogeneous
    clusters. (The whole batch on each kind alone would flatter the bound: more samples per device
    means more microbatches per pipeline, a smaller bubble, than the mixed job can have.)"""
    total = sum(d.count for d in inv.devices)
    out: dict[str, dict] = {}
    seen: dict[tuple, dict] = {}  # kinds alike in all but name plan alike: 10,000 one-device kinds, ~900 searches
    for d in inv.devices:
        b = max(1, round(batch * d.count / total))
        same = (d.count, d.memory_bytes, d.peak_flop_s, d.profile, b, costs[d.kind].source)
        if same not in seen:
            alone = Inventory(devices=(d,), links=inv.links, optimizer_sharded=inv.optimizer_sharded)
            found, refused = candidates(alone, {d.kind: costs[d.kind]}, links, b, schedule)
            seen[same] = (d.kind, {"samples_per_s": found[0]["predicted"]["samples_per_s"], "plan": label(found[0]),
                                   "global_batch": b} if found
                          else {"samples_per_s": None, "global_batch": b, "why": "; ".join(refused)})
        first, r = seen[same]
        out[d.kind] = {**r, "plan": r["plan"].replace(f" {first} ", f" {d.kind} ")} if "plan" in r else dict(r)
    return out


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
    found, refused = candidates(inv, costs, links, batch, schedule,
                                ("dp", "pp") if strategy == "auto" else (strategy,))
    if not found:
        raise PlanError(refused[0] if len(refused) == 1 else "no plan fits: " + " | ".join(refused))
    out = found[0]
    rates = homogeneous_rates(inv, costs, links, batch, schedule)
    for f in (out["predicted"], out["uniform"]["predicted"]):
        f["utilization_seed"] = utilization_seed(f["samples_per_s"], rates)
    out["homogeneous"] = rates
    out["candidates"] = [{"plan": label(c), "step_s": c["predicted"]["step_s"],
                          "samples_per_s": c["predicted"]["samples_per_s"],
                          "peak_memory_bytes": _peak_memory(c), "bubble": c["predicted"].get("bubble")}
                         for c in found[:TOP]]
    out["refused"] = refused
    out["why"] = _why(found)
    out.update(global_batch=batch, links=links.source,
               sources={k: c.source for k, c in costs.items()},
               estimate=any(not c.measured for c in costs.values()) or not links.measured)
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
