"""The one event engine for pipeline schedules (run_events), and on it the discrete-event model
of one training step: a pipeline schedule (GPipe or 1F1B) over stages of
unequal speed, the sends between them, then each stage's data-parallel gradient reduction and
optimizer step. results/analysis/bubble.py replays measured events on the same engine.
Pure Python, no torch: the planner (results/planner/search.py) calls it for every
candidate plan, so it must be cheap — one pipeline replica is simulated (data-parallel replicas
run the same schedule), O(stages x microbatches) events, a few ms for 80 stages x 128
microbatches.

Model (what the harness runs: harness/parallel/pipeline.py over torch.distributed.pipelining):
- stage s runs its operations in the schedule's order; an operation starts when the stage is
  free and its input has arrived: forward i on s after forward i on s-1 plus the send, backward
  i on s after backward i on s+1 plus the send; the last stage's loss is part of its forward;
- sends are asynchronous (the sender does not wait), each costs latency + bytes / bandwidth;
  where a stage's rank does the transfer itself (a CPU rank: gloo copies through the core that
  computes), each exchange with a neighbour (one microbatch's send and the matching receive)
  occupies the rank after its forward (with the next stage) and after its backward (with the
  previous one), and the handoff rides inside that time (StageCost.fwd_exchange_s, bwd_exchange_s);
- 1F1B (PipeDream-flush, torch's Schedule1F1B): stage s runs min(P-s-1, M) warm-up forwards,
  then alternates one forward and one backward, then the remaining backwards;
- after its last backward, each stage all-reduces its gradients over its data-parallel group
  (no overlap with the backward: torch's replicate and FSDP2 under a pipeline reduce once, when
  the schedule ends) and steps its optimizer. The step ends when the slowest stage does;
- a stage whose rank is held to a CPU quota (the harness's unequal ranks) gets part of each wait
  back in the operation after it (quota_credit): the wait spent time it would have sat throttled.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

SCHEDULES = ("gpipe", "1f1b")


class Deadlock(RuntimeError):
    """No worker can run its next operation: an order the dependencies cannot satisfy."""


class Op(NamedTuple):  # a tuple: run_events also takes plain 4-tuples (simulate builds ~10^6 per search)
    key: Hashable                 # this operation's name, e.g. ("F", stage, microbatch)
    seconds: float                # its duration
    after: Hashable | None = None  # the operation whose end it waits for (None: ready at 0)
    lag_s: float = 0.0            # added to that end before this one may start (a send)


def run_events(workers: Mapping[Hashable, Sequence[Op]],
               quota: Mapping[Hashable, tuple[float, float]] | None = None) -> tuple[dict, dict]:
    """Each worker runs its operations in the given order; one starts when its worker is free
    and the operation it waits for has ended (plus the lag). Returns (end time per operation
    key, each worker's finish time). Raises Deadlock if the orders cannot all be followed.

    quota: {worker: (period_s, throttled share)} for a worker held to a CPU quota (throttled share
    1 - its CPUs): an operation that starts after the worker waited g seconds ends
    quota_credit(g, ...) sooner (the quota it did not spend while waiting)."""
    quota = quota or {}
    done: dict = {}
    free = {w: 0.0 for w in workers}
    nxt = {w: 0 for w in workers}
    remaining = sum(len(o) for o in workers.values())
    while remaining:
        moved = False
        for w, ops in workers.items():
            i, t, n = nxt[w], free[w], len(ops)
            held = quota.get(w)
            while i < n:
                key, seconds, after, lag = ops[i]  # an Op or a plain 4-tuple (simulate's, for speed)
                if after is not None:
                    if after not in done:
                        break
                    ready = done[after] + lag
                    if ready > t:
                        if held is not None:
                            seconds -= quota_credit(ready - t, seconds, *held)
                        t = ready
                t += seconds
                done[key] = t
                i += 1
            if i != nxt[w]:
                remaining -= i - nxt[w]
                nxt[w], free[w], moved = i, t, True
        if not moved:
            raise Deadlock("schedule deadlocked (an order no stage can follow)")
    return done, free


def quota_credit(gap_s: float, seconds: float, period_s: float, throttled: float) -> float:
    """How much sooner an operation of `seconds` (its wall time held to a CPU quota, throttled the
    `throttled` share of each period) ends when its rank waited gap_s before it: CFS bandwidth
    control gives a group its quota anew every period and counts only what it runs, so a wait
    spends time the rank would have sat throttled anyway, and the operation after it runs unheld
    until the period's quota is used. At most one period (the quota does not carry over: no
    cpu.cfs_burst_us), and at most what the operation would gain running wholly unheld.
    Measured (`make perf` quota_gap, harness/bench/quota_gap.py; 2026-12-07, AMD EPYC, 10 ms
    period): at 0.5 and 0.25 CPU waits of 1-7.5 ms came back whole to 0.5 ms, waits of 10-50 ms
    9.0-9.5 ms; this within 1.03 ms of every point. Not modelled: waits of 12.5-15 ms at 0.25 CPU
    took up to 14.4 ms off (a throwaway run; a period restarting after an idle one)."""
    return min(gap_s, period_s, seconds * throttled)


@dataclass(frozen=True)
class StageCost:
    fwd_s: float             # one microbatch's forward on this stage (the last stage: with its loss)
    bwd_s: float             # one microbatch's backward
    send_s: float = 0.0      # one microbatch's activation to the next stage (its gradient comes back in as long)
    reduce_s: float = 0.0    # the stage's gradient reduction over its data-parallel group, once per step
    optimizer_s: float = 0.0  # the stage's optimizer step, once per step
    cv_fwd: float = 0.0      # a forward's spread from microbatch to microbatch (std / mean, measured; 0: fixed)
    cv_bwd: float = 0.0      # a backward's (simulate_expected)
    # seconds this stage's rank is itself busy with one exchange (a microbatch's send and receive)
    # after each forward, with the next stage, and after each backward, with the previous one; 0
    # where the transfer runs beside compute (a GPU's copy engines), so only the send's lag counts
    fwd_exchange_s: float = 0.0
    bwd_exchange_s: float = 0.0
    # the CPU quota this stage's rank is held to: its period (0: not held) and the CPUs it may use
    # each period (run_events' quota: a wait before an operation is partly paid back)
    quota_period_s: float = 0.0
    quota_cpus: float = 1.0


def order(schedule: str, stage: int, stages: int, m: int) -> list[tuple[str, int]]:
    """The (kind F|B, microbatch) sequence stage `stage` runs."""
    return list(_order(schedule, stage, stages, m))


@lru_cache(maxsize=4096)
def _order(schedule: str, stage: int, stages: int, m: int) -> tuple[tuple[str, int], ...]:
    """order's sequence, kept: a search simulates the same (stage, stages, m) for many candidates."""
    if schedule == "gpipe":
        return tuple([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
    if schedule != "1f1b":
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}; got {schedule!r}")
    warm = min(stages - stage - 1, m)
    ops = [("F", i) for i in range(warm)]
    f, b = warm, 0
    while b < m:
        if f < m:
            ops.append(("F", f))
            f += 1
        ops.append(("B", b))
        b += 1
    return tuple(ops)


def handoff_lag(sender: StageCost, kind: str, send_s: float | None = None) -> float:
    """The lag between the end of the sender's forward (kind F) or backward (B) and its receiver's
    start: the send's, or 0 where the sender's exchange, in that operation's time, carries it.
    send_s: the boundary's send time where it is not the sender's own (a gradient goes back over
    the boundary the receiver's StageCost prices)."""
    exchange = sender.fwd_exchange_s if kind == "F" else sender.bwd_exchange_s
    return 0.0 if exchange else (sender.send_s if send_s is None else send_s)


def simulate(schedule: str, costs: list[StageCost], m: int, draw: Callable[[float, float], float] | None = None) -> dict:
    """Step seconds and where they go: {"step_s", "pipeline_s" (the last backward's end),
    "stage_end_s", "busy_s" per stage, "bubble" (idle share of the pipeline phase)}.
    draw(seconds, cv): one operation's duration drawn around its figure (simulate_expected);
    None: every operation takes its figure."""
    p = len(costs)
    # an operation's key is an int, not ("F", s, i): run_events hashes each key twice, and a tuple's
    # hash is computed anew each time (the 70B plan of 10,000 devices simulates ~450 candidates)
    fkey = [2 * s * m for s in range(p)]        # forward i on stage s: fkey[s] + i
    bkey = [(2 * s + 1) * m for s in range(p)]  # backward i: bkey[s] + i
    workers = {}
    for s in range(p):
        seq = []
        c = costs[s]
        # the handoff's lag: the send's, unless the sender's exchange (in its operation's time) holds it
        lag_in = handoff_lag(costs[s - 1], "F") if s > 0 else 0.0
        lag_back = handoff_lag(costs[s + 1], "B", c.send_s) if s < p - 1 else 0.0
        f_after = fkey[s - 1] if s > 0 else None
        # the next stage's backward (the gradient sent back); the last stage's waits for its own forward
        b_after = bkey[s + 1] if s < p - 1 else fkey[s]
        for kind, i in _order(schedule, s, p, m):
            if kind == "F":  # forward i waits for the previous stage's, plus its send
                seq.append((fkey[s] + i, (c.fwd_s if draw is None else draw(c.fwd_s, c.cv_fwd)) + c.fwd_exchange_s,
                            None if f_after is None else f_after + i, lag_in))
            else:
                seq.append((bkey[s] + i, (c.bwd_s if draw is None else draw(c.bwd_s, c.cv_bwd)) + c.bwd_exchange_s,
                            b_after + i, lag_back))
        workers[s] = seq
    held = {s: (c.quota_period_s, 1.0 - c.quota_cpus) for s, c in enumerate(costs)
            if c.quota_period_s > 0 and c.quota_cpus < 1}
    _, finish = run_events(workers, held)
    free = [finish[s] for s in range(p)]
    pipeline_s = max(free)
    busy = [m * (c.fwd_s + c.bwd_s) for c in costs]
    ends = [free[s] + costs[s].reduce_s + costs[s].optimizer_s for s in range(p)]
    return {"step_s": max(ends), "pipeline_s": pipeline_s, "stage_end_s": ends, "busy_s": busy,
            "bubble": 1 - sum(busy) / (p * pipeline_s) if pipeline_s > 0 else 0.0}


EXPECTED_EVENTS = 400_000  # simulate_expected's work: draws x operations, at most (~1 s of Python)


@lru_cache(maxsize=None)
def expected_max_normal(r: int) -> float:
    """E[max of r independent standard normals] (0 at r = 1; 1/sqrt(pi) at 2): the integral of
    x r phi(x) Phi(x)^(r - 1) over the line (scipy's quad; imported here, not at the top: only a
    plan with replicas and a measured spread needs it, and the portal imports this module)."""
    if r <= 1:
        return 0.0
    from scipy.integrate import quad
    from scipy.stats import norm
    value, _ = quad(lambda x: x * r * norm.pdf(x) * norm.cdf(x) ** (r - 1), -math.inf, math.inf,
                    epsabs=1e-12, epsrel=1e-12)
    return value


def simulate_expected(schedule: str, costs: list[StageCost], m: int, draws: int = 256, seed: int = 0,
                      replicas: int = 1, typical: dict | None = None) -> dict:
    """simulate's figures as their mean over `draws` steps in which every forward and backward
    takes a duration drawn around its figure: lognormal with the figure as its median (a profile's
    figure is the median of its passes) and the stage's measured spread (cv). Where no stage has
    a spread, simulate's own. The draws are seeded: the same costs give the same figure.

    Why: a pipeline hands every microbatch from stage to stage, so each handoff waits for the
    slower of two noisy operations; the expected step is above the step of the typical
    durations. Measured (2026-12-05, LM small, 2 stages [2, 4] at 0.25 and 0.5 CPU, M=12,
    per-microbatch cv 9-12%): the run's own spans replayed 4.44 s a step, simulate on their
    medians 4.32 s, this on their measured spreads 4.47 s.

    `replicas` > 1: data-parallel copies of this pipeline, each drawing its own durations; their
    gradient all-reduce waits for the slowest, so the step adds the expected maximum of that many
    replicas' steps over one's: the draws' sd x expected_max_normal(replicas) (`replica_wait_s`;
    the other figures stay one replica's). Why: a mixed plan's replicas wait for each other where
    each kind's own one-replica job does not; on LM small's mixed pipelines (2 x [2, 4] M=12,
    2026-12-06 Xeon profile) one replica's step had an sd of 1.2% and the slower of two was 0.7%
    above it (2,000 steps drawn, in pairs), so leaving it out predicted the seed's utilization 0.7% high.

    `typical`: simulate(schedule, costs, m), where the caller has it (a search simulates its best
    candidate; where no stage has a spread it is this figure, not simulated again)."""
    if not any(c.cv_fwd or c.cv_bwd for c in costs):  # typical: simulate's figures, where the caller has them
        return simulate(schedule, costs, m) if typical is None else typical
    rng = random.Random(seed)
    sigma: dict[float, float] = {}

    def drawer(zs: list[float], mirror: bool) -> Callable[[float, float], float]:
        """A draw that records its deviates in zs, or (mirror) replays them negated."""
        it = iter(zs) if mirror else None

        def draw(seconds: float, cv: float) -> float:
            if not cv:
                return seconds
            s = sigma.get(cv)
            if s is None:
                s = sigma[cv] = math.sqrt(math.log(1 + cv * cv))  # lognormal: cv^2 = exp(s^2) - 1
            if it is None:
                zs.append(rng.gauss(0.0, 1.0))
                return seconds * math.exp(s * zs[-1])
            return seconds * math.exp(-s * next(it))
        return draw
    # Antithetic pairs: each step drawn with z is followed by one drawn with -z (simulate calls
    # draw in a fixed order, so the two line up operation by operation). The step is a max over
    # paths of sums of durations, each convex in z, so step(z) + step(-z) >= 2 step(0): the
    # mean can never fall below the typical step by sampling error (a 256-draw mean once did, by
    # 7e-6 relative, on a profile whose spread was tiny), and its variance drops.
    n = max(16, min(draws, EXPECTED_EVENTS // max(1, 2 * m * len(costs))))
    n += n % 2
    runs = []
    for _ in range(n // 2):
        zs: list[float] = []
        runs.append(simulate(schedule, costs, m, drawer(zs, False)))
        runs.append(simulate(schedule, costs, m, drawer(zs, True)))
    out = {k: sum(r[k] for r in runs) / n for k in ("step_s", "pipeline_s", "bubble")}
    if replicas > 1:
        mean = out["step_s"]
        sd = math.sqrt(sum((r["step_s"] - mean) ** 2 for r in runs) / n)
        out["replica_wait_s"] = sd * expected_max_normal(replicas)
        out["step_s"] += out["replica_wait_s"]
    out["stage_end_s"] = [sum(r["stage_end_s"][s] for r in runs) / n for s in range(len(costs))]
    out["busy_s"] = [sum(r["busy_s"][s] for r in runs) / n for s in range(len(costs))]
    out["draws"] = n
    return out


def data_parallel_step(compute_s: list[float], reduce_s: float, optimizer_s: list[float],
                       overlap: "Overlap | None" = None) -> dict:
    """A data-parallel step without a pipeline: every rank computes its share, then the gradient
    all-reduce (a synchronisation: it starts when the slowest rank arrives), then the optimizer.
    With `overlap` (DDP's bucketed reduction) the all-reduce runs in buckets during the backward
    instead (overlapped_reduce_end); `reduce_s` is then unused."""
    slowest = max(compute_s)
    done = slowest + reduce_s if overlap is None else overlapped_reduce_end(overlap)
    ends = [done + o for o in optimizer_s]
    return {"step_s": max(ends), "compute_s": compute_s, "wait_s": [slowest - c for c in compute_s],
            "reduce_s": reduce_s if overlap is None else done - slowest, "exposed_reduce_s": done - slowest}


@dataclass(frozen=True)
class Overlap:
    """What DDP's overlap of the gradient all-reduce with the backward depends on, per rank r:
    fwd_s[r] and bwd_s[r] (the backward produces the gradients at a steady rate, last layer
    first), the buckets' sizes in the order they fill (bytes: DDP's bucket_cap_mb, 25 MiB by
    default, over the parameters in reverse order), and what one bucket's all-reduce costs
    (seconds, a function of its bytes)."""
    fwd_s: Sequence[float]
    bwd_s: Sequence[float]
    bucket_bytes: Sequence[float]
    reduce_s: Callable[[float], float]


def overlapped_reduce_end(o: Overlap) -> float:
    """When the last bucket's all-reduce ends. Bucket i is ready on rank r once the backward has
    produced its bytes, fwd_s[r] + bwd_s[r] x (bytes through bucket i) / (all bytes); its all-reduce
    is collective, so it starts once every rank has it and the previous bucket's is done (DDP
    launches them in order on one communication stream). Closed forms (tests/test_planner.py):
    k equal buckets, one rank, each costing c: the end is F + B + c when c <= B/k (only the last
    bucket is exposed), F + B/k + k c when c >= B/k (the communication is the bottleneck)."""
    total = float(sum(o.bucket_bytes))
    end, through = 0.0, 0.0
    for b in o.bucket_bytes:
        through += b
        ready = max(f + bw * through / total for f, bw in zip(o.fwd_s, o.bwd_s))
        end = max(end, ready) + o.reduce_s(b)
    return end


def ddp_buckets(param_bytes_reverse: Sequence[float], cap_bytes: float = 25 * 2**20,
                first_cap_bytes: float = 1 * 2**20) -> list[float]:
    """DDP's buckets: parameters' gradients (bytes, in the order the backward produces them) packed
    in order; a bucket closes once it reaches its limit, the parameter that crosses it included
    (torch's compute_bucket_assignment_by_size). The first bucket's limit is first_cap_bytes
    (dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB), so the first all-reduce starts early; the rest
    cap_bytes (bucket_cap_mb, 25 MiB)."""
    out, cur, cap = [], 0.0, first_cap_bytes
    for b in param_bytes_reverse:
        cur += b
        if cur >= cap:
            out.append(cur)
            cur, cap = 0.0, cap_bytes
    if cur:
        out.append(cur)
    return out


def min_max_split(n: int, k: int, cost: Callable[[int, int], float] | None = None, *,
                  rows: Callable[[int, int], Sequence[float]] | None = None) -> list[int] | None:
    """The one split search: n items (blocks) into k consecutive non-empty parts (stages) that
    minimises the slowest part, cost(part, items) seconds (math.inf where that part cannot take
    that many, e.g. out of memory); among those, the most even (least sum of squared costs).
    Dynamic programming in two passes (the minimal maximum M, then the least sum of squares
    with every part <= M) over (part, items so far), each part's step vectorised over (items so
    far, items next) with numpy: k (n - k + 1) cost calls, O(k n^2) array work (a 14-stage,
    80-block split in ~2 ms; the pure-Python loops took ~17). Ties go to the fewest items so far
    before a part, as the loops did. None when no split is feasible. Used by the pipeline's
    balanced split (results/analysis/bubble.py) and the planner (results/planner).
    rows(part, upto): that part's costs at 1..upto items at once, in place of cost (the planner
    keeps a stage's row across the splits it tries)."""
    import numpy as np
    if not 1 <= k <= n:
        return None
    table = np.full((k, n + 1), math.inf)
    upto = n - k + 1  # every part >= 1 item leaves at most n - k + 1 to one
    for s in range(k):
        if rows is not None:
            table[s, 1:upto + 1] = rows(s, upto)
            continue
        for items in range(1, upto + 1):
            table[s, items] = cost(s, items)
    # part s starts after s to s + upto - 1 items and ends after s + 1 to s + upto: only that band
    # of (items so far, items after) can lie on a split, and within it a part's items are
    # 1 + (after's offset) - (so far's offset) whatever s is (a 14-stage split of 80 blocks: 67 x 67
    # cells a part, not 81 x 81; an 80-stage one: 1 x 1)
    offset = np.arange(upto)
    items = 1 + offset[None, :] - offset[:, None]
    legal = items >= 1
    take = np.clip(items, 0, n)

    def solve(value, combine, allowed):
        best = np.full((k + 1, n + 1), math.inf)
        back = np.zeros((k + 1, n + 1), dtype=int)
        best[0, 0] = 0.0
        for s in range(k):
            x = table[s][take]
            before = best[s, s:s + upto]
            ok = legal & np.isfinite(x) & allowed(x) & np.isfinite(before)[:, None]
            with np.errstate(invalid="ignore", over="ignore"):
                v = np.where(ok, combine(before[:, None], value(x)), math.inf)
            j = v.argmin(axis=0)  # the first (fewest items so far) of the least
            best[s + 1, s + 1:s + 1 + upto], back[s + 1, s + 1:s + 1 + upto] = v[j, offset], 1 + offset - j
        return best, back

    best, _ = solve(lambda x: x, np.maximum, lambda x: np.ones_like(x, dtype=bool))
    top = float(best[k, n])
    if top == math.inf:
        return None
    slack = 1e-12 * max(1.0, abs(top))  # float sums of the same parts in another order
    _, back = solve(lambda x: x * x, np.add, lambda x: x <= top + slack)
    split, at = [], n
    for s in range(k, 0, -1):
        split.append(int(back[s, at]))
        at -= split[-1]
    return split[::-1]
