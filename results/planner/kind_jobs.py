"""Data parallel over unequal pipelines: each device kind runs its own best job (the shape and
tensor/context group its homogeneous search chose: a pipeline of its own depth, or data
parallel), the global batch is split between the kinds so that they finish together, and the
kinds then all-reduce their gradients with each other. HETHUB's bound (search.py) is the sum of
these jobs at their own speed, so this plan reaches it but for the batch's rounding and the
cross-kind all-reduce; a mixed pipeline can beat it when a kind is short of memory alone.

The split: proportional to each kind's own samples/s, in whole replicas (a pipeline job's batch
is a multiple of its replica count, with at least as many microbatches as stages under 1F1B),
then split again by the rate each kind reaches at its share (a pipeline's rate grows with its
microbatches) while the slowest kind gets faster. Each kind's step is its
job re-planned at its share (pp_plan / dp_plan with the shape fixed).

The cross-kind all-reduce (not overlapped: it follows each kind's own reduction; a model): the
kinds' layouts differ (other stage splits, other groups), so every device exchanges its own
gradient shard with the other kinds: one all-reduce among the kinds of the largest shard any
device holds, over the host relay where their libraries differ. Each kind's own reduction over
its replicas is inside its step; where it had none, the all-reduce makes its devices replicas,
and their gradient copies into DDP's buckets are added (_copies).
"""
from __future__ import annotations

import math

from results.planner.data_parallel import any_relay, dp_plan
from results.planner.inventory import Inventory, PlanError
from results.planner.labels import label
from results.planner.layer_costs import Costs
from results.planner.links import LinkModel
from results.planner.pipeline_plan import pp_plan
from results.planner.utilization import utilization
from results.planner.within_stage import as_devices, grouped

IMPROVE_ROUNDS = 8  # re-splits by the rates the kinds reach at their shares (half the step each time)


def _quantum(shape: dict, count: int, group_size: int, schedule: str) -> tuple[int, int]:
    """(step, least) of a kind's batch: data parallel one sample at a time from one per group;
    a pipeline whole replicas, at least one microbatch per stage under 1F1B."""
    units = count // group_size
    if shape["strategy"] == "dp":
        return 1, units
    stages = shape["depth"]  # a kind alone (pp_plan): pipelines of `depth` stages, units / depth of them
    replicas = units // stages
    return replicas, replicas * (stages if schedule == "1f1b" else 1)


def kinds_plan(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int, schedule: str,
               alone: dict[str, dict]) -> dict:
    for d in inv.devices:
        if alone[d.kind]["samples_per_s"] is None:
            raise PlanError(f"{d.kind} cannot train alone ({alone[d.kind]['why']})")
    if all(alone[d.kind]["shape"]["strategy"] == "dp" and alone[d.kind]["shape"]["group"].size == 1
           for d in inv.devices):
        raise PlanError("every kind's own best job is plain data parallel: that is the dp plan")
    memo: dict[tuple[str, int], dict] = {}

    def job(d, b: int) -> dict:
        if (d.kind, b) not in memo:
            sh = alone[d.kind]["shape"]
            one = Inventory(devices=(d,), links=inv.links, optimizer_sharded=inv.optimizer_sharded)
            ginv, gcosts, real = grouped(one, {d.kind: costs[d.kind]}, links, {d.kind: sh["group"]})
            try:
                acc = sh.get("accumulate", False)  # the kind's own best data parallel accumulates its gradients
                j = (dp_plan(ginv, gcosts, links, b, accumulate=acc) if sh["strategy"] == "dp"
                     else pp_plan(ginv, gcosts, links, b, schedule, sh["depth"]))
                memo[(d.kind, b)] = as_devices(j, {d.kind: sh["group"]}, real, one, costs, b)
            except PlanError:
                memo[(d.kind, b)] = None
        return memo[(d.kind, b)]

    def step(d, b: int) -> float:
        j = job(d, b)
        return math.inf if j is None else j["predicted"]["step_s"]

    q = {d.kind: _quantum(alone[d.kind]["shape"], d.count, alone[d.kind]["shape"]["group"].size, schedule)
         for d in inv.devices}
    rate = {d.kind: alone[d.kind]["samples_per_s"] for d in inv.devices}
    shares = _split(inv, q, {k: r / sum(rate.values()) for k, r in rate.items()}, batch)
    best = (max(step(d, shares[d.kind]) for d in inv.devices), shares)
    weight = {k: r / sum(rate.values()) for k, r in rate.items()}
    for _ in range(IMPROVE_ROUNDS):  # re-split by the rates the kinds reach at their shares, damped
        now = {d.kind: shares[d.kind] / step(d, shares[d.kind]) for d in inv.devices}
        if any(not r > 0 for r in now.values()):
            break
        weight = {k: (weight[k] + r / sum(now.values())) / 2 for k, r in now.items()}
        try:
            shares = _split(inv, q, weight, batch)
        except PlanError:
            break
        worst = max(step(d, shares[d.kind]) for d in inv.devices)
        if worst < best[0]:
            best = (worst, shares)
    shares = best[1]
    uniform = _split(inv, q, {d.kind: d.count / sum(x.count for x in inv.devices) for d in inv.devices}, batch)
    devices = [d.kind for d in inv.devices for _ in range(d.count)]
    relay = any_relay(inv)
    out = {"strategy": "kinds", "devices": devices, "host_relay": relay, "jobs": {}}
    for name, sh in (("predicted", shares), ("uniform", uniform)):
        jobs = {d.kind: job(d, sh[d.kind]) for d in inv.devices}
        if any(j is None for j in jobs.values()):
            if name == "predicted":
                raise PlanError(f"a kind's job does not fit at its share of batch {batch}")
            out["uniform"] = {"jobs": sh, "predicted": {"step_s": math.inf, "samples_per_s": 0.0, "utilization": 0.0,
                                                          "fits_memory": False}}
            continue
        shard = max(_largest_shard(j, costs[d.kind], alone[d.kind]["shape"]["group"].tp)
                    for d, j in zip(inv.devices, jobs.values()))
        cross = links.all_reduce_s(shard, len(inv.devices), relay)
        step_s = max(j["predicted"]["step_s"] + _copies(j, costs[d.kind], alone[d.kind]["shape"]["group"].tp)
                     for d, j in zip(inv.devices, jobs.values())) + cross
        f = {"step_s": step_s, "samples_per_s": batch / step_s, "cross_reduce_s": cross, "fits_memory": True,
             "utilization": utilization(batch / step_s, devices, costs, batch),
             "kind_step_s": {k: j["predicted"]["step_s"] for k, j in jobs.items()}}
        if name == "predicted":
            out["predicted"] = f
            out["jobs"] = {k: {"plan": label(j), "global_batch": sh[k], "step_s": j["predicted"]["step_s"],
                               "samples_per_s": sh[k] / j["predicted"]["step_s"], **_layout(j)}
                           for k, j in jobs.items()}
        else:
            out["uniform"] = {"jobs": dict(sh), "predicted": f}
    return out


JOB_KEYS = ("strategy", "schedule", "replicas", "microbatches", "microbatch_size", "pp_split", "batch_split",
            "recompute", "groups", "microbatch_split")


def _layout(job: dict) -> dict:
    """What runs a kind's job (harness/planning/plan.py turns every kind's into one launch): its
    shape, and for a pipeline its replicas, microbatches and split."""
    return {k: job[k] for k in JOB_KEYS if job.get(k)}


def _copies(job: dict, c: Costs, tp: int) -> float:
    """Seconds a job priced alone without replicas (one pipeline, one device) adds when the kinds'
    all-reduce makes every device a replica: DDP's (replicate's) copies of its gradients into the
    buckets and back, on the device with the largest shard (a job with replicas of its own has them
    in its price already). 0.03 s a step for a 0.25-CPU rank's half of LM small (2026-12-06)."""
    own = job.get("replicas", 1) > 1 if job["strategy"] == "pp" else len(job["devices"]) > 1
    return 0.0 if own else c.grad_copy_s(_largest_shard(job, c, tp) / c.grad_bytes_per_param)


def _largest_shard(job: dict, c: Costs, tp: int) -> float:
    """Bytes of the largest gradient shard one device of this job holds."""
    g = c.grad_bytes_per_param
    if job["strategy"] == "dp":
        return c.total_params / tp * g
    return max(st["params"] for st in job["stages"]) * g


def _split(inv: Inventory, q: dict, weight: dict[str, float], batch: int) -> dict[str, int]:
    """Whole quanta per kind, each at least its least, summing to `batch`, as near `weight`'s
    proportions as they can be: the least max over kinds of share / (batch x weight), the kind
    that would finish last. The kind with the largest quantum takes what the others leave; each
    other kind tries every count of its quanta near its proportion that gives a different
    remainder modulo that quantum (q_last / gcd values), so a split is found whenever one exists
    near the proportion (three kinds of 25, 16 and 70: 14 x 35 combinations)."""
    from itertools import product
    kinds = [d.kind for d in inv.devices]
    last = max(kinds, key=lambda k: q[k][0])
    ql = q[last][0]
    ranges = []
    for k in kinds:
        if k == last:
            continue
        qk, least = q[k]
        width = ql // math.gcd(qk, ql)
        centre = round(batch * weight[k] / qk)
        lo = max(-(-least // qk), centre - width // 2)
        ranges.append([(k, n * qk) for n in range(lo, lo + width)])
    if math.prod(len(r) for r in ranges) > SPLIT_COMBINATIONS:
        raise PlanError(f"{len(kinds)} kinds with quanta {', '.join(str(q[k][0]) for k in kinds)}: too many "
                        f"batch splits to search ({SPLIT_COMBINATIONS} at most)")
    best = None
    for pick in product(*ranges):
        rest = batch - sum(b for _, b in pick)
        if rest < q[last][1] or rest % ql:
            continue
        shares = dict(pick) | {last: rest}
        worst = max(b / (batch * weight[k]) for k, b in shares.items())
        if best is None or worst < best[0]:
            best = (worst, shares)
    if best is None:
        raise PlanError(f"global batch {batch} does not split into the kinds' whole replicas "
                        f"({', '.join(f'{k}: {v[0]} samples each, at least {v[1]}' for k, v in q.items())})")
    return best[1]


SPLIT_COMBINATIONS = 200_000  # batch splits _split compares (pure arithmetic, ~0.2 s)
