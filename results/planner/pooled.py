"""One device kind's costs from several of its devices' profiles (an inventory `profile` that lists
records), for harness/planning/plan.costs_for."""
from __future__ import annotations

import copy
import statistics

from results.planner.layer_costs import Costs


def pooled(costs: list[Costs]) -> Costs:
    """One kind's costs from several of its devices profiled at once (an inventory `profile` that
    lists their records): every timed figure the mean of theirs, microbatch by microbatch, and so
    the optimizer's, the gradient copies' and adds', a group's time in the step, the measured
    shares and spreads; the rest (parameters, bytes, the quota) the first's, which must match.
    Why: one rank's profile of a kind prices it alone, and two ranks held to the same quota and
    profiled side by side read one cell 19% apart (LM small's block at microbatch 1, 95.2 and
    80.0 ms a sample at 0.5 CPU; 2026-12-07, AMD EPYC), where the kind's job runs on both."""
    first = costs[0]
    if len(costs) == 1:
        return first
    for c in costs[1:]:
        if (c.model, c.params, c.n_blocks, c.quota) != (first.model, first.params, first.n_blocks, first.quota):
            raise ValueError(f"profiles pooled for one kind must be of one model, held alike: {first.source} "
                             f"against {c.source}")

    def mean_pts(pts_of: list[list[tuple[int, float]]], what: str) -> list[tuple[int, float]]:
        sizes = [[b for b, _ in pts] for pts in pts_of]
        if any(s != sizes[0] for s in sizes):
            raise ValueError(f"profiles pooled for one kind must time the same microbatches ({what}): {sizes}")
        return [(b, statistics.fmean(pts[i][1] for pts in pts_of)) for i, b in enumerate(sizes[0])]

    def mean_nested(maps: list[dict | None], what: str) -> dict | None:
        if any(m is None for m in maps):
            return None
        keys = set(maps[0]).intersection(*maps[1:])
        return {k: (mean_pts([m[k] for m in maps], f"{what} {k}") if isinstance(maps[0][k], list)
                    else mean_nested([m[k] for m in maps], f"{what} {k}")) for k in sorted(keys)}

    out = copy.copy(first)
    out._times = mean_nested([c._times for c in costs], "layers")
    out._shares = mean_nested([c._shares for c in costs], "shares") or {}
    out._in_step = mean_nested([c._in_step for c in costs], "in step") or {}
    out._spread = mean_nested([c._spread for c in costs], "spread")
    for f in ("optimizer_s_per_param", "grad_copy_s_per_byte", "grad_accumulate_s_per_byte", "exchange_occupancy"):
        setattr(out, f, statistics.fmean(getattr(c, f) for c in costs))
    out.source = f"{first.source}, pooled with {len(costs) - 1} more of its kind's profiles"
    return out
