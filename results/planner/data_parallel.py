"""Data parallel over unequal devices: the batch split (water-filling to the earliest finish, within
memory) and its predicted step, DDP's bucketed all-reduce overlapped with the backward
(results/analysis/schedule.Overlap), over the host relay where the kinds' libraries differ; with
gradient accumulation (each rank's share in microbatches of the size its kind runs fastest per
sample, within memory: layer_costs.Accumulated) or without."""
from __future__ import annotations

from results.analysis.schedule import Overlap, data_parallel_step, ddp_buckets
from results.planner.inventory import Inventory, PlanError
from results.planner.layer_costs import Accumulated, Costs, Recomputed
from results.planner.links import LinkModel
from results.planner.utilization import utilization


def _dp_cap(c: Costs, memory: float, batch: int) -> int:
    """Most samples a device of this kind can take: model state, then activations per sample."""
    state = c.total_params * c.state_bytes_per_param
    per_sample = c.replica_bytes_per_sample()
    return min(batch, int((memory - state) // per_sample)) if memory > state else 0


def accumulation_microbatch(c: Costs, memory: float) -> int:
    """Samples in one microbatch of a data-parallel rank of this kind that accumulates its gradients:
    the profiled size it computes fastest per sample, within its memory; for an estimate (no profile),
    as many as memory holds; 0 where not even one does. Why the profiled sizes: beyond them a time is
    a straight line through the two nearest (layer_costs._interp), and a block of LM small ran 8%
    slower a sample at 32 than at 4-16 (23.98 ms against 22.0-22.2, one thread, Xeon, 2026-12-06):
    a share priced at 33 in one microbatch from a 1-12 profile was priced fast."""
    cap = _dp_cap(c, memory, 1 << 30)
    sizes = [b for b in (c.profiled_sizes() or []) if b <= cap]
    return min(sizes, key=lambda b: (c.sample_s(b), -b)) if sizes else cap


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


def dp_predict(devices, shares, costs, links: LinkModel, overlap: bool = True, relay: bool = False) -> dict:
    """The step of data parallel over `devices` with these shares. With overlap (what DDP does
    where the collectives do not share the compute's processors: links.overlaps) the gradient
    all-reduce runs in DDP's buckets during the backward (schedule.Overlap); the buckets are
    packed from the layers' gradients in backward order (head, blocks last to first, embedding):
    whole layers, where DDP packs tensors, so a bucket may be up to one block larger. Without,
    it follows the slowest rank's backward. Either way each rank copies its gradients into the
    buckets and back (Costs.grad_copy_s), counted with its optimizer step."""
    c0 = costs[devices[0]]
    compute = [costs[k].sample_s(b) * b for k, b in zip(devices, shares)]
    n = len(devices)
    links = links.among(devices)  # a kind's own collectives where every rank is of that kind
    reduce_s = links.all_reduce_s(c0.total_params * c0.grad_bytes_per_param, n, relay)
    # the optimizer step, after the reduction inside a device's group (context parallel's) where it has one
    opt = [costs[k].optimizer_s_per_param * costs[k].total_params + costs[k].group_reduce_s(costs[k].total_params)
           + (costs[k].grad_copy_s(costs[k].total_params) if n > 1 else 0.0) for k in devices]
    if not overlap or n == 1:
        return data_parallel_step(compute, reduce_s, opt)

    def phase(c: Costs, b: int, f) -> float:
        return c.n_blocks * f(c, "block", b) + f(c, "embedding", b) + f(c, "head", b)
    g = c0.grad_bytes_per_param
    layers = [c0.params["head"] * g] + [c0.params["block"] * g] * c0.n_blocks + [c0.params["embedding"] * g]
    ov = Overlap([phase(costs[k], b, lambda c, kind, n: c.fwd(kind, n)) for k, b in zip(devices, shares)],
                 [phase(costs[k], b, lambda c, kind, n: c.bwd(kind, n)) for k, b in zip(devices, shares)],
                 ddp_buckets(layers), lambda nbytes: links.all_reduce_s(nbytes, n, relay))
    out = data_parallel_step(compute, reduce_s, opt, ov)
    out["reduce_s"] = reduce_s  # the whole all-reduce, as if not overlapped; exposed_reduce_s is what shows
    return out


def memory_bound(inv: Inventory, costs: dict[str, Costs], batch: int) -> list[str]:
    """Kinds whose memory, not their speed, would limit their data-parallel share: what the
    balanced split gives them with memory to spare is more than they hold (recomputation is
    then worth trying for them, search.py)."""
    devices = [d.kind for d in inv.devices for _ in range(d.count)]
    if batch < len(devices):
        return []
    caps = {d.kind: _dp_cap(costs[d.kind], d.memory_bytes, batch) for d in inv.devices}
    free = balanced_shares(devices, costs, {k: batch for k in caps}, batch)
    want: dict[str, int] = {}
    for k, b in zip(devices, free):
        want[k] = max(want.get(k, 0), b)
    holds = {d.kind: d.memory_bytes > costs[d.kind].total_params * costs[d.kind].state_bytes_per_param
             for d in inv.devices}  # recomputation saves activations, not model state
    return [d.kind for d in inv.devices if want[d.kind] > caps[d.kind] and holds[d.kind]]


def dp_plan(inv: Inventory, costs: dict[str, Costs], links: LinkModel, batch: int,
            recompute: tuple[str, ...] = (), accumulate: bool = False) -> dict:
    """Data parallel over every device, the batch split by balanced_shares; `recompute`: kinds
    that recompute every block's activations (layer_costs.Recomputed) to hold a larger share;
    `accumulate`: every rank runs its share in microbatches of its kind's accumulation_microbatch
    (any share then fits: one microbatch is live at a time)."""
    if recompute:
        costs = {k: Recomputed(c) if k in recompute else c for k, c in costs.items()}
    limit: dict[str, int] = {}
    if accumulate:
        limit = {d.kind: accumulation_microbatch(costs[d.kind], d.memory_bytes) for d in inv.devices}
        costs = {k: Accumulated(c, limit[k]) if limit.get(k) else c for k, c in costs.items()}
    devices = [d.kind for d in inv.devices for _ in range(d.count)]
    if batch < len(devices):
        raise PlanError(f"global batch {batch} is smaller than the {len(devices)} data-parallel ranks; "
                        f"give --global-batch >= {len(devices)}")
    caps = {d.kind: _dp_cap(costs[d.kind], d.memory_bytes, batch) if not limit.get(d.kind) else batch
            for d in inv.devices}
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
    if recompute:
        out["recompute"] = list(recompute)
    if accumulate:  # each rank's microbatches (parallel.microbatch_split) and each kind's microbatch limit
        out["microbatch_limit"] = limit
        out["microbatch_split"] = [len(costs[k].chunks(b)) for k, b in zip(devices, shares)]
        out["uniform"]["microbatch_split"] = [len(costs[k].chunks(b)) for k, b in zip(devices, even)]
    relay = any_relay(inv)
    out["host_relay"] = relay
    out["ddp_overlap"] = links.overlaps
    for key, sh, where in (("predicted", shares, out), ("predicted", even, out["uniform"])):
        sim = dp_predict(devices, sh, costs, links, overlap=links.overlaps, relay=relay)
        fits = all(b <= caps[k] for k, b in zip(devices, sh))
        where[key] = {"step_s": sim["step_s"], "samples_per_s": batch / sim["step_s"],
                      "utilization": utilization(batch / sim["step_s"], devices, costs, batch),
                      "compute_s": sim["compute_s"], "wait_s": sim["wait_s"], "reduce_s": sim["reduce_s"],
                      "exposed_reduce_s": sim["exposed_reduce_s"], "fits_memory": fits}
    return out


def any_relay(inv: Inventory) -> bool:
    """Whether some pair of kinds takes the relay (relay_between): two named libraries differ.
    By the set of libraries, not over pairs (10,000 kinds would be 10^8 pairs)."""
    return len({d.library for d in inv.devices if d.library is not None}) > 1
