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
from itertools import permutations

from results.planner.inventory import Inventory, PlanError, relay_between
from results.planner.layer_costs import Costs
from results.planner.links import LinkModel
from results.analysis.schedule import (Overlap, StageCost, data_parallel_step, ddp_buckets, min_max_split,
                                       simulate)

STRATEGIES = ("auto", "dp", "pp")  # auto: the best of every dp and pp shape (candidates)


def _alone_rate(c: Costs, batch: int) -> float:
    """Samples/s one device of this kind reaches training alone on `batch` samples per step."""
    return batch / (c.sample_s(batch) * batch + c.optimizer_s_per_param * c.total_params)


def utilization(samples_per_s: float, devices: list[str], costs: dict[str, Costs], batch: int) -> float:
    return samples_per_s / sum(_alone_rate(costs[k], batch) for k in devices)


# -- data parallel --------------------------------------------------------------------------------
def _dp_cap(c: Costs, memory: float, batch: int) -> int:
    """Most samples a device of this kind can take: model state, then activations per sample."""
    state = c.total_params * c.state_bytes_per_param
    per_sample = c.saved("embedding", 1) + c.n_blocks * c.saved("block", 1) + c.saved("head", 1)
    return min(batch, int((memory - state) // per_sample)) if memory > state else 0


def balanced_shares(devices: list[str], costs: dict[str, Costs], caps: dict[str, int], batch: int) -> list[int]:
    """Integer shares summing to `batch` that minimise the slowest device's compute time, each
    device within its cap. Water-filling: every device starts with one sample, and the next
    sample always goes to a device that would finish it soonest; with each device's time
    non-decreasing in its share this greedy is optimal for the slowest device (an exchange
    argument: any allocation with a lower maximum would have taken the same samples first).
    Devices of one kind are interchangeable, so a kind's devices are filled a level at a time
    (all of them one sample more, in one heap step): O(levels x log kinds), not O(devices^2)
    (the trimming loop this replaced took 57 s for 10,000 devices)."""
    import heapq
    from collections import Counter

    count = Counter(devices)
    if sum(count.values()) > batch:
        raise PlanError(f"global batch {batch} is smaller than the {len(devices)} data-parallel ranks")
    memo: dict[tuple[str, int], float] = {}

    def finish(k: str, b: int) -> float:  # seconds a device of kind k computes b samples in
        if (k, b) not in memo:
            memo[(k, b)] = costs[k].sample_s(b) * b
        return memo[(k, b)]

    level = {k: 1 for k in count}   # every device of kind k has level[k] samples, `extra[k]` of them one more
    extra = {k: 0 for k in count}
    left = batch - sum(count.values())
    heap = [(finish(k, 2), k) for k in sorted(count) if caps[k] >= 2]
    heapq.heapify(heap)
    while left and heap:
        _, k = heapq.heappop(heap)
        give = min(count[k] - extra[k], left)  # the kind's devices still at its level each take one more
        extra[k] += give
        left -= give
        if extra[k] == count[k]:
            level[k], extra[k] = level[k] + 1, 0
            if level[k] + 1 <= caps[k]:
                heapq.heappush(heap, (finish(k, level[k] + 1), k))
        else:
            heapq.heappush(heap, (finish(k, level[k] + 1), k))
    if left:
        raise PlanError(f"global batch {batch} does not fit in the devices' memory")
    seen: Counter = Counter()
    shares = []
    for k in devices:  # the first `extra` devices of a kind carry its one sample more
        shares.append(level[k] + (1 if seen[k] < extra[k] else 0))
        seen[k] += 1
    return shares


def _dp_predict(devices, shares, costs, links: LinkModel, overlap: bool = True, relay: bool = False) -> dict:
    """The step of data parallel over `devices` with these shares. With overlap (what DDP does)
    the gradient all-reduce runs in DDP's buckets during the backward (schedule.Overlap); the
    buckets are packed from the layers' gradients in backward order (head, blocks last to first,
    embedding): whole layers, where DDP packs tensors, so a bucket may be up to one block larger."""
    c0 = costs[devices[0]]
    compute = [costs[k].sample_s(b) * b for k, b in zip(devices, shares)]
    n = len(devices)
    reduce_s = links.all_reduce_s(c0.total_params * c0.grad_bytes_per_param, n, relay)
    opt = [costs[k].optimizer_s_per_param * costs[k].total_params for k in devices]
    if not overlap or n == 1:
        return data_parallel_step(compute, reduce_s, opt)

    def phase(c: Costs, b: int, f) -> float:
        return c.n_blocks * f(c, "block", b) + f(c, "embedding", b) + f(c, "head", b)
    g = c0.grad_bytes_per_param
    layers = [c0.params["head"] * g] + [c0.params["block"] * g] * c0.n_blocks + [c0.params["embedding"] * g]
    ov = Overlap([phase(costs[k], b, Costs.fwd) for k, b in zip(devices, shares)],
                 [phase(costs[k], b, Costs.bwd) for k, b in zip(devices, shares)],
                 ddp_buckets(layers), lambda nbytes: links.all_reduce_s(nbytes, n, relay))
    out = data_parallel_step(compute, reduce_s, opt, ov)
    out["reduce_s"] = reduce_s  # the whole all-reduce, as if not overlapped; exposed_reduce_s is what shows
    return out


def dp_plan(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int) -> dict:
    devices = [d.kind for d in inv.devices for _ in range(d.count)]
    if batch < len(devices):
        raise PlanError(f"global batch {batch} is smaller than the {len(devices)} data-parallel ranks; "
                        f"give --global-batch >= {len(devices)}")
    caps = {d.kind: _dp_cap(costs[d.kind], d.memory_bytes, batch) for d in inv.devices}
    for d in inv.devices:
        if caps[d.kind] < 1:
            need = costs[d.kind].total_params * costs[d.kind].state_bytes_per_param / 1e9
            raise PlanError(f"device {d.kind} ({d.memory_bytes / 1e9:g} GB) is too small for a data-parallel replica "
                            f"(model state alone {need:.1f} GB); use --strategy pp")
    if sum(caps[k] for k in devices) < batch:
        raise PlanError(f"global batch {batch} does not fit in the devices' memory (at most {sum(caps[k] for k in devices)})")
    shares = balanced_shares(devices, costs, caps, batch)
    q, r = divmod(batch, len(devices))
    even = [q + (1 if i < r else 0) for i in range(len(devices))]
    out = {"strategy": "dp", "devices": devices, "batch_split": shares, "uniform": {"batch_split": even}}
    relay = _any_relay(inv)
    out["host_relay"] = relay
    for key, sh, where in (("predicted", shares, out), ("predicted", even, out["uniform"])):
        sim = _dp_predict(devices, sh, costs, links, relay=relay)
        fits = all(b <= caps[k] for k, b in zip(devices, sh))
        where[key] = {"step_s": sim["step_s"], "samples_per_s": batch / sim["step_s"],
                      "utilization": utilization(batch / sim["step_s"], devices, costs, batch),
                      "compute_s": sim["compute_s"], "wait_s": sim["wait_s"], "reduce_s": sim["reduce_s"],
                      "exposed_reduce_s": sim["exposed_reduce_s"], "fits_memory": fits}
    return out


# -- pipeline -------------------------------------------------------------------------------------
def _inflight(schedule: str, s: int, p: int, m: int) -> int:
    """Microbatches whose activations stage s holds at once: all of them under GPipe; P - s
    under 1F1B (its warm-up forwards plus the one in flight)."""
    return m if schedule == "gpipe" else min(p - s, m)


def _stage(c: Costs, blocks: int, first: bool, last: bool, b: int, inflight: int, memory: float) -> dict | None:
    """One stage's time per microbatch and memory, recomputing its blocks if it must; None if it
    cannot fit even then."""
    fwd = blocks * c.fwd("block", b) + (c.fwd("embedding", b) if first else 0) + (c.fwd("head", b) if last else 0)
    bwd = blocks * c.bwd("block", b) + (c.bwd("embedding", b) if first else 0) + (c.bwd("head", b) if last else 0)
    params = blocks * c.params["block"] + (c.params["embedding"] if first else 0) + (c.params["head"] if last else 0)
    ends = (c.saved("embedding", b) if first else 0) + (c.saved("head", b) if last else 0)
    state = params * c.state_bytes_per_param
    mem = state + inflight * (blocks * c.saved("block", b) + ends)
    recompute = False
    if mem > memory:  # full recomputation: keep each block's input only, run its forward again in backward
        mem = state + inflight * (blocks * c.recompute_per_sample * b + ends) + c.saved("block", b)
        bwd += blocks * c.recompute_s(b)  # measured by the profile where it has it (layer_costs.py)
        recompute = True
    if mem > memory:
        return None
    return {"blocks": blocks, "fwd_s": fwd, "bwd_s": bwd, "params": params, "mem_bytes": mem, "recompute": recompute}


def split_blocks(kinds: list[str], costs: dict[str, Costs], memory: dict[str, float], b: int, m: int,
                 schedule: str) -> list[dict] | None:
    """Blocks per stage minimising the slowest stage's fwd+bwd per microbatch (dynamic
    programming over (stage, blocks so far)), every stage >= 1 block and within memory."""
    p, n = len(kinds), costs[kinds[0]].n_blocks

    def seconds(s: int, blocks: int) -> float:
        st = _stage(costs[kinds[s]], blocks, s == 0, s == p - 1, b, _inflight(schedule, s, p, m), memory[kinds[s]])
        return math.inf if st is None else st["fwd_s"] + st["bwd_s"]
    split = min_max_split(n, p, seconds)  # the one split search (results/analysis/schedule.py)
    return None if split is None else stages_for(kinds, costs, memory, split, b, m, schedule)


def stages_for(kinds, costs, memory, split, b, m, schedule) -> list[dict] | None:
    p = len(kinds)
    out = []
    for s, (k, c) in enumerate(zip(kinds, split)):
        st = _stage(costs[k], c, s == 0, s == p - 1, b, _inflight(schedule, s, p, m), memory[k])
        if st is None:
            return None
        out.append({"kind": k, **st})
    return out


def _pp_predict(stages: list[dict], costs, links: LinkModel, b: int, m: int, dp: int, schedule: str,
                relay=lambda a, b: False) -> dict:
    """One replica's step. relay(kind_a, kind_b): whether traffic between those kinds takes the
    host relay (a boundary between stages of unlike libraries; the tied embedding's all-reduce
    between the first and last stage). A stage's data-parallel all-reduce stays among its own kind."""
    sc = []
    last = len(stages) - 1
    for s, st in enumerate(stages):
        c = costs[st["kind"]]
        reduce_s = links.all_reduce_s(st["params"] * c.grad_bytes_per_param, dp)
        if c.tied_params and len(stages) > 1 and s in (0, last):  # tied embedding / head copies
            reduce_s += links.all_reduce_s(c.tied_params * c.grad_bytes_per_param, 2,
                                           relay(stages[0]["kind"], stages[last]["kind"]))
        nxt = relay(st["kind"], stages[s + 1]["kind"]) if s < last else False
        sc.append(StageCost(st["fwd_s"], st["bwd_s"], links.send_s(c.boundary_bytes_per_sample * b, nxt), reduce_s,
                            c.optimizer_s_per_param * st["params"]))
    return simulate(schedule, sc, m)


def _relay_fn(inv: Inventory):
    by = {d.kind: d for d in inv.devices}
    return lambda a, b: relay_between(by[a], by[b])


def _any_relay(inv: Inventory) -> bool:
    """Whether some pair of kinds takes the relay (relay_between): two named libraries differ.
    By the set of libraries, not over pairs (10,000 kinds would be 10^8 pairs)."""
    return len({d.library for d in inv.devices if d.library is not None}) > 1


def _m_candidates(per_replica: int, p: int, schedule: str) -> list[int]:
    ms = [m for m in range(1, per_replica + 1) if per_replica % m == 0 and (schedule == "gpipe" or m >= p)]
    return ms[-8:] if len(ms) > 8 else ms  # the most microbatches (smallest bubble) are the candidates


ALL_ORDERS_UP_TO = 5  # kinds: every stage order (5! = 120); beyond, a few orders that put speed or memory first


def _orders(per: dict[str, int], inv: Inventory, costs: dict[str, Costs]) -> list[tuple[str, ...]]:
    """Stage orders of the device kinds to try: every permutation for a few kinds, else the
    inventory's order, fastest first, slowest first, most memory first (8 kinds would be 40,320
    orders, each a split search per microbatch count)."""
    kinds = tuple(per)
    if len(kinds) <= ALL_ORDERS_UP_TO:
        return list(permutations(kinds))
    speed = {k: costs[k].sample_s(1) for k in kinds}
    memory = {d.kind: d.memory_bytes for d in inv.devices}
    found = [kinds, tuple(sorted(kinds, key=speed.get)), tuple(sorted(kinds, key=speed.get, reverse=True)),
             tuple(sorted(kinds, key=memory.get, reverse=True))]
    return list(dict.fromkeys(found))


def pp_plan(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int, schedule: str,
            depth: int = 1) -> dict:
    """Pipelines of `depth` x the smallest group with every kind in the inventory's proportions
    (gcd(counts) / depth replicas, data-parallel): depth 1 is the most replicas, each the shortest
    pipeline; a deeper one holds a model too big for the short one, or trades the replicas'
    all-reduce for a longer pipeline's bubble."""
    g0 = reduce(math.gcd, (d.count for d in inv.devices))
    if depth < 1 or g0 % depth:
        raise PlanError(f"pipeline depth factor {depth} must divide gcd(counts) = {g0}")
    g = g0 // depth
    per = {d.kind: d.count // g0 * depth for d in inv.devices}
    p = sum(per.values())
    n = costs[inv.devices[0].kind].n_blocks
    if p > n:
        raise PlanError(f"a pipeline of {p} stages ({'+'.join(f'{v} {k}' for k, v in per.items())}) has more stages "
                        f"than the model's {n} blocks")
    if batch < g or batch % g:
        raise PlanError(f"global batch {batch} must be a multiple of the {g} pipeline replicas (data-parallel ranks)")
    per_replica = batch // g
    ms = _m_candidates(per_replica, p, schedule)
    if not ms:
        raise PlanError(f"per-replica batch {per_replica} has no microbatch count >= {p} stages ({schedule} needs "
                        f"M >= P); raise --global-batch or use --schedule gpipe")
    memory = {d.kind: d.memory_bytes for d in inv.devices}
    devices = [d.kind for d in inv.devices for _ in range(d.count)]
    relay = _relay_fn(inv)
    best = None
    for order in _orders(per, inv, costs):
        kinds = [k for k in order for _ in range(per[k])]
        for m in ms:
            b = per_replica // m
            stages = split_blocks(kinds, costs, memory, b, m, schedule)
            if stages is None:
                continue
            sim = _pp_predict(stages, costs, links, b, m, g, schedule, relay)
            if best is None or sim["step_s"] < best[0]["step_s"]:
                best = (sim, stages, m, list(kinds))
    if best is None:
        small = min(inv.devices, key=lambda d: d.memory_bytes)
        raise PlanError(f"no split fits: device {small.kind} ({small.memory_bytes / 1e9:g} GB) is too small for any "
                        f"stage even with recomputation")
    sim, stages, m, kinds = best
    b = per_replica // m
    out = {"strategy": "pp", "schedule": schedule, "devices": devices, "replicas": g, "depth": depth,
           "host_relay": [relay(a, b) for a, b in zip(kinds, kinds[1:])], "stage_order": kinds,
           "microbatches": m, "microbatch_size": b, "pp_split": [st["blocks"] for st in stages], "stages": stages}
    out["predicted"] = _pp_figures(sim, batch, devices, costs)
    q, r = divmod(n, p)
    even = [q + (1 if i < r else 0) for i in range(p)]
    uniform_kinds = [d.kind for d in inv.devices for _ in range(per[d.kind])]
    ust = stages_for(uniform_kinds, costs, memory, even, b, m, schedule)  # recomputing where it must
    fits = ust is not None
    if not fits:  # what it would take with memory to spare, marked as not fitting
        ust = stages_for(uniform_kinds, costs, {k: math.inf for k in memory}, even, b, m, schedule)
    usim = _pp_predict(ust, costs, links, b, m, g, schedule, relay)
    out["uniform"] = {"pp_split": even, "stage_order": uniform_kinds, "microbatches": m, "stages": ust,
                      "predicted": {**_pp_figures(usim, batch, devices, costs), "fits_memory": fits}}
    out["predicted"]["fits_memory"] = True
    return out


def _pp_figures(sim: dict, batch: int, devices, costs) -> dict:
    return {"step_s": sim["step_s"], "samples_per_s": batch / sim["step_s"], "bubble": sim["bubble"],
            "pipeline_s": sim["pipeline_s"], "utilization": utilization(batch / sim["step_s"], devices, costs, batch)}


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


def utilization_seed(samples_per_s: float, rates: dict[str, dict]) -> float | None:
    """Throughput of the mixed job / the sum of the homogeneous jobs' (homogeneous_rates); None
    when a kind cannot train alone (the bound is then not defined)."""
    if any(r["samples_per_s"] is None for r in rates.values()):
        return None
    return samples_per_s / sum(r["samples_per_s"] for r in rates.values())


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
