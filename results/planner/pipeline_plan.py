"""Pipelines over unequal devices: stages of every kind in the inventory's proportions, the blocks
split by dynamic programming to minimise the slowest stage within memory (recomputing where it
must), every stage order and microbatch count simulated (results/analysis/schedule.py), sends
between unlike libraries over the host relay."""
from __future__ import annotations

import math
from functools import reduce
from itertools import permutations

import numpy as np

from results.analysis.schedule import StageCost, min_max_split, simulate, simulate_expected
from results.planner.inventory import Inventory, PlanError, relay_between
from results.planner.layer_costs import Costs
from results.planner.links import LinkModel
from results.planner.utilization import utilization


def _inflight(schedule: str, s: int, p: int, m: int) -> int:
    """Microbatches whose activations stage s holds at once: all of them under GPipe; P - s
    under 1F1B (its warm-up forwards plus the one in flight)."""
    return m if schedule == "gpipe" else min(p - s, m)


def _stage_terms(c: Costs, first: bool, last: bool, b: int) -> tuple:
    """What a stage's time and memory are made of at microbatch b, per block and for its ends
    (the embedding on the first stage, the head on the last): the cost calls a stage makes, once."""
    return (c.fwd("block", b), (c.fwd("embedding", b) if first else 0), (c.fwd("head", b) if last else 0),
            c.bwd("block", b), (c.bwd("embedding", b) if first else 0), (c.bwd("head", b) if last else 0),
            c.params["block"], (c.params["embedding"] if first else 0), (c.params["head"] if last else 0),
            (c.saved("embedding", b) if first else 0) + (c.saved("head", b) if last else 0),
            c.saved("block", b), c.recompute_per_sample * b, c.state_bytes_per_param, c.recompute_s(b))


def _stage(c: Costs, blocks: int, first: bool, last: bool, b: int, m: int, inflight: int, memory: float,
           terms: tuple | None = None) -> dict | None:
    """One stage's time per microbatch (of m a step) and memory, recomputing its blocks if it must;
    None if it cannot fit even then. `terms`: _stage_terms(c, first, last, b), when the caller keeps them."""
    fwd, bwd, params, mem, recompute = _stage_figures(c, blocks, m, inflight, memory,
                                                      terms or _stage_terms(c, first, last, b))
    if mem == math.inf:
        return None
    return {"blocks": blocks, "fwd_s": fwd, "bwd_s": bwd, "params": params, "mem_bytes": mem, "recompute": recompute}


def _stage_figures(c: Costs, blocks, m: int, inflight: int, memory: float, terms: tuple) -> tuple:
    """_stage's figures (fwd_s, bwd_s, params, mem_bytes, recompute) at `blocks`, an int or an array
    of them (the split's row of a stage at every block count at once); mem_bytes is inf where the
    stage cannot fit even recomputing."""
    fb, fe, fh, bb, be, bh, pb, pe, ph, ends, saved, kept, per_param, again = terms
    fwd = blocks * fb + fe + fh
    params = blocks * pb + pe + ph
    # every microbatch's backward after the first adds its gradients into the step's so far (the
    # profile's layer cells start from none): the mean over the step's m. One block's backward at
    # microbatch 1 took 14.3 ms clearing and 15.8 accumulating (LM small, one thread, 2026-12-05); in
    # the pipeline 2 x [2, 4] M=12 the 0.25-CPU stage's backward ran 1.08-1.09x the price without it.
    bwd = blocks * bb + be + bh + c.grad_accumulate_s(params) * (m - 1) / m
    state = params * per_param
    mem = state + inflight * (blocks * saved + ends)
    # full recomputation where it must: keep each block's input only, run its forward again in the
    # backward (c.recompute_s: measured by the profile where it has it; layer_costs.py)
    where = np.where if isinstance(blocks, np.ndarray) else _where  # one formula for a cell and a row
    recompute = mem > memory
    mem = where(recompute, state + inflight * (blocks * kept + ends) + saved, mem)
    bwd = where(recompute, bwd + blocks * again, bwd)
    return fwd, bwd, params, where(mem > memory, math.inf, mem), recompute


def _where(cond: bool, yes, no):
    """np.where for one cell: the value keeps its type (a stage's bytes stay an int where they are)."""
    return yes if cond else no


def split_blocks(kinds: list[str], costs: dict[str, Costs], memory: dict[str, float], b: int, m: int,
                 schedule: str, memo: dict | None = None, exchanges: list[float] | None = None) -> list[dict] | None:
    """Blocks per stage minimising the slowest stage's fwd+bwd per microbatch (dynamic
    programming over (stage, blocks so far)), every stage >= 1 block and within memory. `memo`
    keeps stage times across the stage orders a search tries (a stage's time depends on its
    kind, blocks, ends, microbatch, in-flight and microbatch count, not on where the order puts it).
    `exchanges`: each stage's seconds per microbatch busy with its exchanges (_exchanges), which
    do not depend on its blocks: the split balances what occupies each rank, compute and copies."""
    p, n = len(kinds), costs[kinds[0]].n_blocks
    memo = {} if memo is None else memo
    # what a stage's time depends on besides its blocks, per stage, built once: min_max_split asks
    # for every (stage, blocks) cell, ~2 million calls planning 10,000 devices on the 70B shape
    ends = [(kinds[s], s == 0, s == p - 1, b, _inflight(schedule, s, p, m), m) for s in range(p)]
    extra = exchanges or [0.0] * p

    def row(s: int, upto: int):
        """Stage s's seconds at 1..upto blocks, plus its exchanges: computed as one array and kept
        per what it depends on (memo), not cell by cell (~1.6 million Python calls on the 70B
        shape's 10,000 devices)."""
        key = ("row", ends[s])
        got = memo.get(key)
        if got is None or len(got) < upto:
            kind, first, last, _, inflight, _ = ends[s]
            tk = (kind, first, last, b)
            if tk not in memo:
                memo[tk] = _stage_terms(costs[kind], first, last, b)
            fwd, bwd, _, mem, _ = _stage_figures(costs[kind], np.arange(1, upto + 1), m, inflight, memory[kind],
                                                 memo[tk])
            got = memo[key] = np.where(np.isfinite(mem), fwd + bwd, math.inf)
        return got[:upto] + extra[s]
    split = min_max_split(n, p, rows=row)  # the one split search (results/analysis/schedule.py)
    return None if split is None else stages_for(kinds, costs, memory, split, b, m, schedule)


def stages_for(kinds, costs, memory, split, b, m, schedule) -> list[dict] | None:
    p = len(kinds)
    out = []
    for s, (k, c) in enumerate(zip(kinds, split)):
        st = _stage(costs[k], c, s == 0, s == p - 1, b, m, _inflight(schedule, s, p, m), memory[k])
        if st is None:
            return None
        out.append({"kind": k, **st})
    return out


def pp_predict(stages: list[dict], costs, links: LinkModel, b: int, m: int, dp: int, schedule: str,
               relay=lambda a, b: False) -> dict:
    """The step of `dp` replicas of these stages. relay(kind_a, kind_b): whether traffic between
    those kinds takes the host relay (a boundary between stages of unlike libraries; the tied
    embedding's all-reduce between the first and last stage). A stage's data-parallel all-reduce
    stays among its own kind. The expected step over the stages' measured spreads, the slowest of
    the dp replicas (schedule.simulate_expected)."""
    return simulate_expected(schedule, _stage_costs(stages, costs, links, b, dp, relay), m, replicas=dp)


def lower_bound(sc: list[StageCost], m: int) -> float:
    """A step no schedule of these stages can beat (branch and bound: a candidate whose bound is
    above the best simulated step is not simulated). Stage s's m forwards and backwards run one
    after another, its first forward cannot start before the stages ahead have done theirs
    (and sent), and after its last backward the gradient still goes back through every stage
    ahead before stage 0 reduces and steps; every stage's own m (f + b) + reduce + optimizer."""
    ahead_f = ahead_b = 0.0
    chain = 0.0
    for s, c in enumerate(sc):
        chain = max(chain, ahead_f + m * (c.fwd_s + c.bwd_s) + ahead_b)
        # what the simulator puts between this stage's operation and the neighbour's over their
        # boundary: the sender's exchange, or else the send's lag (schedule.handoff_lag)
        ahead_f += c.fwd_s + (c.fwd_exchange_s or c.send_s)
        ahead_b += c.bwd_s + ((sc[s + 1].bwd_exchange_s if s + 1 < len(sc) else 0.0) or c.send_s)
    own = max(m * (c.fwd_s + c.bwd_s + c.fwd_exchange_s + c.bwd_exchange_s) + c.reduce_s + c.optimizer_s for c in sc)
    return max(own, chain + sc[0].reduce_s + sc[0].optimizer_s)


def _balanced_bound(per: dict[str, int], costs: dict[str, Costs], b: int, m: int) -> float:
    """A bound before the split: the stages share one model's forward and backward at best in
    proportion to their speed, 1 / sum(1 / each stage kind's whole-model time); the slowest stage
    runs m of its share."""
    whole = {k: costs[k].sample_s(b) * b for k in per}
    return m / sum(n / whole[k] for k, n in per.items())


def _stage_costs(stages: list[dict], costs, links: LinkModel, b: int, dp: int, relay) -> list[StageCost]:
    """Each stage's costs. A boundary's send is priced on its two kinds' links; where a kind's rank
    does the transfer itself (Costs.exchange_occupancy > 0: a profiled CPU rank), each exchange
    occupies it for the boundary's send time x that occupancy, after every forward on its side
    towards the next stage and after every backward towards the previous one."""
    sc = []
    last = len(stages) - 1
    sends = _sends([st["kind"] for st in stages], costs, links, b, relay) + [0.0]
    for s, st in enumerate(stages):
        c = costs[st["kind"]]
        # each group priced on its kinds' links (LinkModel.among): a stage's replicas are one kind
        reduce_s = (links.among([st["kind"]]).all_reduce_s(st["params"] * c.grad_bytes_per_param, dp)
                    + c.group_reduce_s(st["params"]))
        if c.tied_params and len(stages) > 1 and s in (0, last):  # tied embedding / head copies
            ends = [stages[0]["kind"], stages[last]["kind"]]
            reduce_s += links.among(ends).all_reduce_s(c.tied_params * c.grad_bytes_per_param, 2, relay(*ends))
        # replicate's copies of the stage's gradients into its buckets and back, with the optimizer
        copy_s = c.grad_copy_s(st["params"]) if dp > 1 else 0.0
        period, cpus = c.quota or (0.0, 1.0)  # a rank held to a CPU quota gets part of each wait back
        sc.append(StageCost(st["fwd_s"], st["bwd_s"], sends[s], reduce_s,
                            c.optimizer_s_per_param * st["params"] + copy_s, *c.cv(b),
                            fwd_exchange_s=sends[s] * c.exchange_occupancy,
                            bwd_exchange_s=sends[s - 1] * c.exchange_occupancy if s > 0 else 0.0,
                            quota_period_s=period, quota_cpus=cpus))
    return sc


def _sends(kinds: list[str], costs: dict[str, Costs], links: LinkModel, b: int, relay) -> list[float]:
    """Each boundary's send of a microbatch (stage s to s + 1), on its two kinds' links: the sending
    kind's boundary bytes, over the host relay where their libraries differ."""
    return [links.among([a, c]).send_s(costs[a].boundary_bytes_per_sample * b, relay(a, c))
            for a, c in zip(kinds, kinds[1:])]


def _exchanges(kinds: list[str], costs: dict[str, Costs], links: LinkModel, b: int, relay) -> list[float]:
    """Each stage's seconds per microbatch busy with its exchanges, as _stage_costs prices them (the
    boundary's send x the kind's occupancy, towards the next stage and from the previous), before
    the blocks are split: a send's bytes are the sending kind's boundary, not its blocks'."""
    sends = _sends(kinds, costs, links, b, relay)
    return [costs[k].exchange_occupancy * ((sends[s] if s < len(sends) else 0.0) + (sends[s - 1] if s else 0.0))
            for s, k in enumerate(kinds)]


def relay_fn(inv: Inventory):
    """relay(kind_a, kind_b) for pp_predict: whether those kinds' traffic takes the host relay."""
    by = {d.kind: d for d in inv.devices}
    return lambda a, b: relay_between(by[a], by[b])


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
            depth: int = 1, cutoff: float = math.inf, with_uniform: bool = True) -> dict:
    """Pipelines of `depth` x the smallest group with every kind in the inventory's proportions
    (gcd(counts) / depth replicas, data-parallel): depth 1 is the most replicas, each the shortest
    pipeline; a deeper one holds a model too big for the short one, or trades the replicas'
    all-reduce for a longer pipeline's bubble. Branch and bound over microbatch counts (a
    bound before the split) and stage orders (lower_bound after it); with a cutoff, a plan that
    cannot beat it is a PlanError (the search keeps only its top plans)."""
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
    relay = relay_fn(inv)
    orders = _orders(per, inv, costs)
    best, memo = None, {}
    for lb0, m in sorted((_balanced_bound(per, costs, per_replica // m, m), m) for m in ms):
        if lb0 >= min(cutoff, best[0]["step_s"] if best else math.inf):
            break  # no split at this or any later microbatch count can beat the best (or the cutoff)
        b = per_replica // m
        found = []
        for order in orders:
            kinds = [k for k in order for _ in range(per[k])]
            stages = split_blocks(kinds, costs, memory, b, m, schedule, memo, _exchanges(kinds, costs, links, b, relay))
            if stages is not None:
                sc = _stage_costs(stages, costs, links, b, g, relay)
                found.append((lower_bound(sc, m), len(found), sc, stages, kinds))
        for lb, _, sc, stages, kinds in sorted(found, key=lambda f: f[:2]):  # the most promising first
            if lb >= min(cutoff, best[0]["step_s"] if best else math.inf):
                break  # no order left can beat the best simulated step
            sim = simulate(schedule, sc, m)
            if best is None or sim["step_s"] < best[0]["step_s"]:
                best = (sim, stages, m, list(kinds), sc)
    if best is None and cutoff < math.inf:
        raise PlanError(f"no split beats {cutoff:.3g} s")
    if best is None:
        small = min(inv.devices, key=lambda d: d.memory_bytes)
        raise PlanError(f"no split fits: device {small.kind} ({small.memory_bytes / 1e9:g} GB) is too small for any "
                        f"stage even with recomputation")
    typical, stages, m, kinds, sc = best
    # the search ranks by the step of typical durations; the plan's figure is its expectation over
    # the stages' measured spreads (schedule.simulate_expected: the same where nothing was measured)
    sim = simulate_expected(schedule, sc, m, replicas=g, typical=typical)
    b = per_replica // m
    out = {"strategy": "pp", "schedule": schedule, "devices": devices, "replicas": g, "depth": depth,
           "host_relay": [relay(a, b) for a, b in zip(kinds, kinds[1:])], "stage_order": kinds,
           "microbatches": m, "microbatch_size": b, "pp_split": [st["blocks"] for st in stages],
           # each stage's rank busy with its exchanges, per microbatch (both ways; 0 off a CPU rank)
           "stages": [{**st, "exchange_s": c.fwd_exchange_s + c.bwd_exchange_s} for st, c in zip(stages, sc)]}
    out["predicted"] = {**_pp_figures(sim, batch, devices, costs), "fits_memory": True}
    if "draws" in sim:  # the spread mattered: the step of typical durations beside it
        out["predicted"]["step_s_typical"] = typical["step_s"]
    if with_uniform:
        out["uniform"] = pp_uniform(inv, costs, links, batch, out)
    return out


def pp_uniform(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int, plan: dict,
               order: list[str] | None = None) -> dict:
    """The uniform split beside a pipeline plan: the same pipelines, microbatches and kinds in the
    inventory's order (or `order`: the plan's own, so that both run on the same ranks), every
    stage the same number of blocks (recomputing where it must, or marked as not fitting). Made
    for the plan a search keeps, not for every candidate."""
    g, m, b, schedule = plan["replicas"], plan["microbatches"], plan["microbatch_size"], plan["schedule"]
    per = {d.kind: d.count // g for d in inv.devices}
    n, p = costs[inv.devices[0].kind].n_blocks, sum(per.values())
    memory = {d.kind: d.memory_bytes for d in inv.devices}
    q, r = divmod(n, p)
    even = [q + (1 if i < r else 0) for i in range(p)]
    uniform_kinds = list(order) if order else [d.kind for d in inv.devices for _ in range(per[d.kind])]
    ust = stages_for(uniform_kinds, costs, memory, even, b, m, schedule)  # recomputing where it must
    fits = ust is not None
    if not fits:  # what it would take with memory to spare, marked as not fitting
        ust = stages_for(uniform_kinds, costs, {k: math.inf for k in memory}, even, b, m, schedule)
    usim = pp_predict(ust, costs, links, b, m, g, schedule, relay_fn(inv))
    return {"pp_split": even, "stage_order": uniform_kinds, "microbatches": m, "stages": ust,
            "predicted": {**_pp_figures(usim, batch, plan["devices"], costs), "fits_memory": fits}}


def _pp_figures(sim: dict, batch: int, devices, costs) -> dict:
    out = {"step_s": sim["step_s"], "samples_per_s": batch / sim["step_s"], "bubble": sim["bubble"],
           "pipeline_s": sim["pipeline_s"], "utilization": utilization(batch / sim["step_s"], devices, costs, batch)}
    if "replica_wait_s" in sim:  # the replicas' all-reduce waiting for the slowest (schedule.simulate_expected)
        out["replica_wait_s"] = sim["replica_wait_s"]
    return out
