"""What a profile record's summary says beyond its layers' times, read for the planner's costs
(results/planner/layer_costs.from_profile): how busy an exchange keeps a rank held to a quota,
the quota itself, and a block's pass-to-pass spread."""
from __future__ import annotations

import statistics


def exchange_occupancy(summary: dict) -> float:
    """A profiled CPU rank's seconds busy per second of a pipeline exchange (Costs.exchange_occupancy):
    its wall per CPU second where it was held to a quota and timed by CPU seconds, else 1."""
    return (summary.get("timed") or {}).get("wall_per_cpu") or 1.0


def held_quota(summary: dict) -> tuple[float, float] | None:
    """(period s, CPUs) of the quota a profile's rank was held to (cpu_quota.Quota.describe, the
    summary's constraint), None where it ran unheld or the profile predates the period's key."""
    c = summary.get("constraint") or {}
    if not c.get("cpus") or not c.get("cfs_period_us"):
        return None
    return c["cfs_period_us"] / 1e6, float(c["cpus"])


def spread(rows: list[dict]) -> dict[str, list[tuple[int, float]]] | None:
    """Each profiled microbatch's pass-to-pass spread of a block (std / mean of its timed passes);
    None where a row kept fewer than 3 passes (profiles before the samples were kept)."""
    def cv(xs: list[float]) -> float:
        return statistics.pstdev(xs) / statistics.fmean(xs)
    rows = sorted(rows, key=lambda r: r["microbatch"])
    if not rows or any(len(r.get(f"{d}_samples_s") or []) < 3 for r in rows for d in ("fwd", "bwd")):
        return None
    return {d: [(r["microbatch"], cv(r[f"{d}_samples_s"])) for r in rows] for d in ("fwd", "bwd")}
