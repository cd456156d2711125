"""Which jobs run on each side of planner_seed's interleaved checks, and the plans' names in its
figures: the mixed plan is the configuration, each kind's own plan the other side, all at once in
one process group (harness/parallel/jobs.py)."""
from __future__ import annotations

from harness.planning import plan as plan_mod
from results.planner.labels import label as plan_label


def jobs_side(mixed: dict, own: list[dict], order: list[str]) -> tuple[str, str | None]:
    """The `against` text that runs each kind's own plan at once as parallel.jobs=2, job j on
    ranks 2j, 2j + 1 (the mixed plan's rank kinds `order`), or why it can't: ("", reason)."""
    plans = (mixed, *own)
    if order[0::2] != order[1::2] or len(set(order)) != len(order) // 2:
        return "", f"the mixed plan's ranks are {order}: not kind by kind in pairs, as the jobs hold them"
    if any(p.get("recompute") or p.get("groups") for p in plans):
        return "", "a plan recomputes or has groups: " + ", ".join(label(p) for p in plans)
    if all(p["strategy"] == "dp" for p in plans):
        by_kind = {p["devices"][0]: p for p in own}
        split = plan_mod.split_text([n for k in order[::2] for n in by_kind[k]["batch_split"]])
        # each job's own gradient accumulation, or none (the mixed side's microbatch_split cleared)
        counts = [m for k in order[::2]
                  for m in by_kind[k].get("microbatch_split") or [1] * len(by_kind[k]["batch_split"])]
        acc = plan_mod.split_text(counts) if max(counts) > 1 else ""
        return f"parallel.jobs=2;parallel.batch_split={split};parallel.microbatch_split={acc}", None
    sets = {tuple(plan_mod.overrides(p)) for p in own}
    # the mixed side: pipelines of mixed stages, or (kinds) each kind its own pipeline replica in one
    # launch (plan.overrides: batch_split and microbatch_split with pp, which the jobs side clears)
    piped = mixed["strategy"] == "pp" or (mixed["strategy"] == "kinds" and not plan_mod.not_runnable(mixed))
    if piped and all(p["strategy"] == "pp" for p in own) and len(sets) == 1 and all(
            len(p["pp_split"]) == 2 and p.get("replicas", 1) == 1 for p in own):
        clear = ["parallel.batch_split=", "parallel.microbatch_split="] if mixed["strategy"] == "kinds" else []
        return ";".join(["parallel.jobs=2", *clear, *sets.pop()]), None
    return "", "the plans are not all data parallel, nor each kind's one and the same 2-stage pipeline: " + \
        ", ".join(label(p) for p in plans)


def label(p: dict) -> str:
    """A plan's name in the checks' figures: its label, and a pipeline's split and microbatches or a
    data-parallel plan's batch split."""
    if p["strategy"] == "kinds":  # its label names each kind's job and share
        return plan_label(p)
    return plan_label(p) + (f" {p['pp_split']} M={p['microbatches']}" if p["strategy"] == "pp"
                            else f" {p['batch_split']}")
