"""A plan already made, predicted again with other costs: the same split, microbatches and stage
order, priced with a fresh profile of the same devices (or fresh links).

Why: the planner's check pairs each measured round with a profile taken just before it
(harness/bench/planner_seed.py), so the machine's drift between a morning profile and an
afternoon run does not count as the model's error. Re-planning would change the split being
checked; this keeps it and changes only the costs."""
from __future__ import annotations

import math

from results.planner.data_parallel import any_relay, dp_predict
from results.planner.inventory import Inventory, PlanError
from results.planner.layer_costs import Accumulated, Costs, Recomputed
from results.planner.links import LinkModel
from results.planner.pipeline_plan import pp_predict, relay_fn, stages_for

SIDES = ("planned", "uniform")


def step_s(plan: dict, inv: Inventory, costs: dict[str, Costs], links: LinkModel, side: str = "planned") -> float:
    """Predicted seconds per step of `plan` (a `harness plan` result, dp or pp) or of its uniform
    split beside it (side="uniform"), with these costs and links."""
    if side not in SIDES:
        raise PlanError(f"unknown side {side!r}; valid: {', '.join(SIDES)}")
    strategy = plan.get("strategy")
    if plan.get("groups"):
        raise PlanError("cannot predict a plan with tensor/context groups again; valid: dp or pp plans without groups")
    if strategy == "dp":
        split = plan["batch_split"] if side == "planned" else plan["uniform"]["batch_split"]
        cs = {k: Recomputed(c) if k in plan.get("recompute", ()) else c for k, c in costs.items()}
        cs = {k: Accumulated(c, plan["microbatch_limit"][k]) if plan.get("microbatch_limit", {}).get(k) else c
              for k, c in cs.items()}  # the plan's microbatch limit, not the fresh profile's best size
        return dp_predict(plan["devices"], split, cs, links, overlap=links.overlaps, relay=any_relay(inv))["step_s"]
    if strategy == "pp":
        where = plan if side == "planned" else plan["uniform"]
        kinds, split, m = where["stage_order"], where["pp_split"], where["microbatches"]
        b, schedule = plan["microbatch_size"], plan["schedule"]
        memory = {d.kind: d.memory_bytes for d in inv.devices}
        stages = stages_for(kinds, costs, memory, split, b, m, schedule)
        if stages is None:  # the fresh profile says it no longer fits: priced as if it did, as the uniform one is
            stages = stages_for(kinds, costs, {k: math.inf for k in memory}, split, b, m, schedule)
        return pp_predict(stages, costs, links, b, m, plan["replicas"], schedule, relay_fn(inv))["step_s"]
    raise PlanError(f"cannot predict a {strategy!r} plan again; valid strategies: dp, pp")
