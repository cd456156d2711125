"""How far a plan's price moves with the sampling of the profile it is priced from: the 95%
half-width of the price, on the log scale, that planner_seed's step errors carry beside the
measured step's and the probe's (results/planner/seed_steps).

Why: each cell of a layer profile is a mean of a few visits, and the cell a price sums most is
its block at the plan's microbatch, once per block. A profile cell samples until its median is
known to +-2% or its budget has gone by, and under CPU quotas on this VM the budget ends them: in
the 2026-12-07 morning's kept profiles (AMD EPYC, 4 ranks at once) a rank's block cell had 3-7
visits at 2-17% CV, and the twins of one kind read its mean at microbatch 4 0.152 and 0.165 CPU s.
Until 2026-12-07 evening the step errors' intervals left this out ("a lower bound").

How: for each kind of the plan, its block cell at the microbatch(es) the plan runs that kind at
(a size between profiled ones: the wider of its neighbours), the relative 95% half-width of its
mean (Student's t over the kind's visits, forward + backward of one round, pooled over its
records as the price pools them); the plan priced again with that kind's compute scaled by 1 +
that (inventory `calibration`: every layer, the optimizer, the copies; the block is most of it);
the kinds' log moves added in quadrature (their profiles' samples are independent). All of a
kind's blocks move together: a plan's blocks are one cell, priced n_blocks times. The small
cells (embedding, head, optimizer) move with the block here: an overstatement of a few percent
of the spread. Where the plan's microbatches cannot be read (a "kinds" plan) there is no spread.

A price scaled by the probe (seed_profiles.priced_in_check) divides by the profile's block at the
probe's microbatch, so what moves it is the price's cell *relative to* that one (`relative_to`):
each round of the profile visits every cell once, and a drift that moves a round's cells together
cancels in the ratio. Its half-width is Student's t over the rounds' linearised log ratios (each
visit over its cell's mean, less the probe cell's visit of the same round over its mean); 0 where
the plan runs the probe's own microbatch. The factor's interval then holds the check's visits
only (seed_profiles.probe_factors' `ci95_visits`), or the profile's cell would count twice."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

from harness.bench.planner_jobs import predict
from harness.bench.seed_inputs import calibrated_inventory, kind_records


def plan_microbatches(plan: dict) -> dict[str, set[int]] | None:
    """{kind: the microbatch sizes the plan runs that kind at}: data parallel, each rank's share
    over its gradient-accumulation count (layer_costs.Accumulated.chunks: sizes q and q + 1);
    pipelines, the plan's microbatch size on every stage. None for any other plan, or one that
    lacks these fields."""
    try:
        return _microbatches(plan)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def _microbatches(plan: dict) -> dict[str, set[int]] | None:
    out: dict[str, set[int]] = {}
    if plan.get("strategy") == "dp":
        counts = plan.get("microbatch_split") or [1] * len(plan["batch_split"])
        for kind, n, m in zip(plan["devices"], plan["batch_split"], counts):
            if n:
                q, r = divmod(int(n), int(m))
                out.setdefault(kind, set()).update({q + 1} if r else set(), {q} if q else set())
        return out or None
    if plan.get("strategy") == "pp":
        return {kind: {int(plan["microbatch_size"])} for kind in plan["devices"]}
    return None


def block_visits_by_microbatch(profile: Path | list[Path]) -> list[dict[int, list[float]]]:
    """Per record of the kind, {microbatch: its block visits, forward + backward of one round}."""
    from results.record import schema
    return [{int(row["microbatch"]): [f + b for f, b in zip(row["fwd_cpu_samples_s"], row["bwd_cpu_samples_s"])]
             for row in schema.read_record(rec)["summary"]["layers"]["block"]}  # the records' validating reader
            for rec in kind_records(profile)]


def _near(sizes: list[int], microbatch: int) -> list[int]:
    """The profiled size itself, or the two around it (the nearest end beyond them)."""
    if microbatch in sizes:
        return [microbatch]
    below, above = [b for b in sizes if b < microbatch], [b for b in sizes if b > microbatch]
    return [max(below or [sizes[0]]), min(above or [sizes[-1]])]


def cell_half_width(profile: Path | list[Path], microbatch: int, relative_to: int | None = None) -> float | None:
    """The relative 95% half-width of the kind's block cell mean at `microbatch` (Student's t over
    its visits pooled over the kind's records), or of its ratio to the cell at `relative_to`
    (paired by round, as the module says); between profiled sizes the wider neighbour's, beyond
    them the nearest's. None where there are under 2 visits or the rounds cannot be paired."""
    recs = block_visits_by_microbatch(profile)
    sizes = sorted(set.intersection(*(set(r) for r in recs))) if recs else []
    if not sizes or (relative_to is not None and relative_to not in sizes):
        return None
    widths = []
    for b in _near(sizes, microbatch):
        if relative_to is None:
            widths.append(relative_half_width([x for r in recs for x in r[b]]))
            continue
        if any(len(r[b]) != len(r[relative_to]) for r in recs):
            return None
        mb, mr = (statistics.fmean([x for r in recs for x in r[c]]) for c in (b, relative_to))
        widths.append(_half_width([x / mb - y / mr for r in recs for x, y in zip(r[b], r[relative_to])]))
    return None if None in widths else max(widths)


def relative_half_width(xs: list[float]) -> float | None:
    """The 95% half-width of xs' mean over the mean (Student's t), None under 2 values."""
    got = _half_width(xs)
    return None if got is None else got / statistics.fmean(xs)


def _half_width(xs: list[float]) -> float | None:
    from scipy.stats import t
    if len(xs) < 2:
        return None
    return float(t.ppf(0.975, len(xs) - 1)) * statistics.stdev(xs) / len(xs) ** 0.5


def price_spread(plan: dict, inv: Path, links_root: Path, profiles: dict[str, Path | list[Path]],
                 price_s: float, relative_to: int | None = None) -> float | None:
    """The log half-width of the plan's price `price_s` (priced from `inv`, whose calibrations it
    keeps and multiplies) for its profile's sampling, as the module says; None where it cannot be
    told. Each kind's scaled inventory is kept beside `inv` (<inv stem>-spread-<kind>.yaml)."""
    import yaml
    mbs = plan_microbatches(plan)
    if not mbs or not price_s > 0:
        return None
    now = {d["kind"]: float(d.get("calibration", 1.0)) for d in yaml.safe_load(inv.read_text())["devices"]}
    moves = []
    for kind, sizes in mbs.items():
        widths = [cell_half_width(profiles[kind], b, relative_to) for b in sorted(sizes)]
        if None in widths:
            return None
        scale = {k: c * (1.0 + max(widths)) if k == kind else c for k, c in now.items()}
        scaled = calibrated_inventory(inv, scale, inv.with_name(f"{inv.stem}-spread-{kind}.yaml"))
        moves.append(math.log(predict(plan, scaled, links_root) / price_s))
    return math.hypot(*moves)
