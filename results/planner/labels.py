"""A plan in a few words, for tables and the printout."""
from __future__ import annotations

from collections import Counter

from results.planner.within_stage import Group

SHOWN_RANKS = 8  # a data-parallel plan's label lists each rank's microbatches up to this many ranks


def label(p: dict) -> str:
    """A plan in a few words: 'dp x16', 'pp 100 x (5+4+7 stages)', 'per kind: H100 ... @2000 | ...'."""
    if p["strategy"] == "kinds":
        return "per kind: " + " | ".join(f"{k} {j['plan']} @{j['global_batch']}" for k, j in p["jobs"].items())
    if p["strategy"] == "dp":
        groups = p.get("groups") or {}
        return f"dp x{len(p.get('planned_as', p['devices']))}" + (
            " of " + ", ".join(f"{k}{Group(**g).suffix()}" for k, g in groups.items()) + " groups" if groups else "") + (
            f" (recompute on {', '.join(p['recompute'])})" if p.get("recompute") else "") + _microbatches(p)
    c = Counter(p["stage_order"])
    return f"pp {p['replicas']} x ({'+'.join(f'{n} {k}' for k, n in c.items())} stages)"


def _microbatches(p: dict) -> str:
    """A data-parallel plan's gradient accumulation: each rank's microbatches ('4.4.2.2'), or over
    SHOWN_RANKS ranks the range ('1-4 on 10000 ranks': a label, not the plan, which keeps them all)."""
    counts = p.get("microbatch_split")
    if not counts:
        return ""
    if len(counts) <= SHOWN_RANKS:
        return f" (microbatches {'.'.join(map(str, counts))})"
    return f" (microbatches {min(counts)}-{max(counts)} on {len(counts)} ranks)"
