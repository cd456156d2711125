"""Heterogeneous planner check for `make perf` (not a test): two ranks made unequal for real
(cgroup CPU quotas, harness/parallel/cpu_quota.py: 1 CPU against 0.5 and 0.25), LM small, under mpiexec.

For each ratio: measure the links (`harness comm`) and profile both device kinds (`harness
profile`) on the two ranks held as the job will hold them, both at once; plan data parallel and
pipeline parallel (`harness plan`), run the planned split and the uniform one (in the same
processes, alternating blocks, harness/run/interleave.py: a pipeline's uniform split on the
planned stage order's ranks),
and each device alone on the whole global batch; then per plan the measured step time against
the simulator's prediction, and utilization = mixed throughput / (sum of the devices' alone
throughputs), measured and predicted. Both ranks are profiled again after the runs and every
plan priced with that profile too (results/planner/evaluate.py: the same split): the runs lie
between the two profiles, and the mean of the two predictions against them (`error_bracketed`)
does not count the machine's drift over those minutes as the model's error.

Each run's steps are timed by the harness itself (median steady step, the slowest rank's);
load on the machine is read before and after every run and kept beside its figures. The
dataset is LM small's with a short validation split (its end-of-run evaluation at 0.25 CPU
would otherwise take minutes; quality is not what this measures). The check's figures also go
to results/plans/check-*.json for the portal's Planner page.
"""
from __future__ import annotations

import json
import statistics
import os
import tempfile
import time
from pathlib import Path

from harness.parallel import cpu_quota as rank_cpu
from harness.planning import plan as plan_mod
from results.planner import report as plan_report
from results.record.paths import results_root
from harness.bench.launch import other_side_median, run_harness
from harness.bench.planner_jobs import SIZE, STEPS, dataset, interleaved_lm, plan, predict, profile_ranks, run_lm

FAST = 1.0


def _profiles(held: dict, out: Path, fast: float, slow: float) -> dict[float, Path]:
    """Both ranks profiled at once, each held as the job will hold it (rank 0 fast, rank 1 slow)."""
    r0, r1 = profile_ranks(held, out, 2, "lm", SIZE)
    return {fast: r0, slow: r1}


def _write_inventory(path: Path, kinds: dict[str, float], profiles: dict[float, Path]) -> Path:
    path.write_text("devices:\n" + "".join(
        f"  - {{kind: {k}, count: 1, memory_gb: 4, profile: {profiles[c]}}}\n" for k, c in kinds.items())
        + "links: {collectives: measured, backend: gloo}\n")
    return path


def _check(name: str, made: dict, measured: dict, alone: dict, batch: int, cpus: dict,
           homogeneous: dict | None = None, after: dict | None = None) -> dict:
    """Predicted against measured for a plan's split and the uniform one. Utilization both ways:
    against each device alone on the whole batch, and as HETHUB counts it, against each kind's
    homogeneous job (here one device of the kind, on its share of the batch: `homogeneous`)."""
    rate_alone = sum(batch / alone[k]["median_step_s"] for k in made["devices"])
    rate_kinds = (sum(h["batch"] / h["median_step_s"] for h in homogeneous.values()) if homogeneous else None)
    rows = {}
    for which, pred in (("planned", made["predicted"]), ("uniform", made["uniform"]["predicted"])):
        runs = measured[which]
        step = statistics.median(r["median_step_s"] for r in runs)
        rows[which] = {"predicted_step_s": round(pred["step_s"], 4), "measured_step_s": round(step, 4),
                       "measured_steps_s": [round(r["median_step_s"], 4) for r in runs],
                       "error": round(pred["step_s"] / step - 1, 4),
                       **_bracketed(pred["step_s"], (after or {}).get(which), step),
                       "utilization_predicted": round(pred["utilization"], 4),
                       "utilization_measured": round(batch / step / rate_alone, 4),
                       "utilization_seed_predicted": (None if pred.get("utilization_seed") is None
                                                      else round(pred["utilization_seed"], 4)),
                       "utilization_seed_measured": None if rate_kinds is None else round(batch / step / rate_kinds, 4),
                       "load_1m": [r["load_1m"] for r in runs]}
    split = made.get("batch_split") or made.get("pp_split")
    uniform = made["uniform"].get("batch_split") or made["uniform"].get("pp_split")
    return {"plan": name, "split": split, "uniform_split": uniform, "cpus_by_rank": cpus,
            "microbatches": made.get("microbatches"), "stage_order": made.get("stage_order"), **rows,
            "planned_over_uniform_throughput": round(rows["uniform"]["measured_step_s"] / rows["planned"]["measured_step_s"], 3)}


def _bracketed(before: float, after: float | None, measured: float) -> dict:
    """The prediction from the profiles before and after the runs, averaged, against the runs."""
    if after is None:
        return {}
    mid = (before + after) / 2
    return {"predicted_after_s": round(after, 4), "predicted_bracketed_s": round(mid, 4),
            "error_bracketed": round(mid / measured - 1, 4)}


def planner_bench(ratios: tuple[float, ...] = (2.0, 4.0), batch: int = 12, rounds: int = 2) -> dict:
    reason = rank_cpu.unavailable()
    if reason:
        return {"skipped": reason}
    out: dict = {"workload": f"lm/{SIZE}", "fast_cpus": FAST, "steps": STEPS, "checks": []}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        env = {**os.environ, "HARNESS_RESULTS": str(tmp)}
        env.pop("MLFLOW_TRACKING_URI", None)
        data_dir = dataset(tmp)
        for ratio in ratios:
            slow = FAST / ratio
            kinds = {"cpu1": FAST, f"cpu{slow:g}": slow}
            held = {**env, rank_cpu.ENV: f"{FAST},{slow}"}
            # links and profiles measured on the two ranks as the job will hold them, both at once
            run_harness(held, 2, "comm", "--collectives", "all_reduce,send_recv", "--backends", "gloo", "-e", "64M",
                        "-n", "5", "--no-ingest")
            profiles = _profiles(held, tmp / f"profile-{ratio:g}-before", FAST, slow)
            inv = _write_inventory(tmp / f"inventory-{ratio:g}.yaml", kinds, profiles)
            alone = {k: run_lm(env, tmp, data_dir, [c], batch, []) for k, c in kinds.items()}
            # each kind's homogeneous job (one device of it here) on its share of the batch, as the planner's
            # homogeneous_rates counts it: the seed utilization's denominator, measured
            homogeneous = {k: {**run_lm(env, tmp, data_dir, [c], batch // len(kinds), []), "batch": batch // len(kinds)}
                           for k, c in kinds.items()}
            dp = plan(env, inv, batch, "dp")
            pp = _uniform_on_planned_ranks(plan(env, inv, batch, "pp"), inv, batch, tmp)
            dp_cpus = [kinds[k] for k in plan_mod.rank_kinds(dp)]
            pp_cpus = [kinds[k] for k in plan_mod.rank_kinds(pp)]
            # each plan's split against its uniform one in the same processes, in alternating blocks
            # (harness/run/interleave.py), `rounds` launches
            acc = dp["uniform"].get("microbatch_split")  # with gradient accumulation, the uniform split's own
            sides = {"dp": (dp_cpus, [*plan_mod.overrides(dp), "against=parallel.batch_split="
                                      + plan_mod.split_text(dp["uniform"]["batch_split"])
                                      + (f";parallel.microbatch_split={plan_mod.split_text(acc)}" if acc else "")]),
                     "pp": (pp_cpus, [*plan_mod.overrides(pp), "against=parallel.pp_split="
                                      + plan_mod.split_text(pp["uniform"]["pp_split"])])}
            measured, got = {}, {}
            for shape, (cpus, sets) in sides.items():
                got[shape] = interleaved_lm(env, tmp, data_dir, cpus, batch, rounds, [*sets, "budget_s=40"])
                measured[shape] = {"planned": [], "uniform": []}
                for rec in got[shape]["records"]:
                    load = rec["summary"].get("load_1m_end")
                    measured[shape]["planned"].append({"median_step_s": rec["summary"]["median_step_s"], "load_1m": load})
                    measured[shape]["uniform"].append({"median_step_s": other_side_median(rec), "load_1m": load})
            # the profile again after the runs, each plan priced with it too: the runs lie between the two
            # profiles, so drift between a profile and runs minutes later is not counted as the model's error
            inv_after = _write_inventory(tmp / f"inventory-{ratio:g}-after.yaml", kinds,
                                         _profiles(held, tmp / f"profile-{ratio:g}-after", FAST, slow))
            after = {s: {w: predict(p, inv_after, tmp, w) for w in ("planned", "uniform")} for s, p in (("dp", dp), ("pp", pp))}
            checks = [_check(f"dp {ratio:g}x", dp, measured["dp"], alone, batch, dp_cpus, homogeneous, after["dp"]),
                      _check(f"pp {ratio:g}x", pp, measured["pp"], alone, batch, pp_cpus, homogeneous, after["pp"])]
            for c, (shape, made) in zip(checks, (("dp", dp), ("pp", pp))):
                lo, hi = got[shape]["ci95"]
                predicted = made["uniform"]["predicted"]["step_s"] / made["predicted"]["step_s"]
                c["interleaved"] = {  # the drift-free comparison: planned over uniform, both in one process
                    "measured_speedup": round(got[shape]["speedup"], 4), "ci95": [round(lo, 4), round(hi, 4)],
                    "predicted_speedup": round(predicted, 4), "error": round(predicted / got[shape]["speedup"] - 1, 4),
                    "per_process": got[shape]["per_process"], "process_tau": got[shape]["process_tau"]}
            for c in checks:
                c["ratio_cpus"] = ratio
                c["profiled_speed_ratio"] = round(_speed_ratio(profiles[slow], profiles[FAST]), 3)
                c["profiles"] = {k: profiles[c_].name for k, c_ in kinds.items()}
            out["checks"] += checks
            out.setdefault("alone_step_s", {})[f"{ratio:g}x"] = {k: round(v["median_step_s"], 4) for k, v in alone.items()}
            out.setdefault("plans", {})[f"{ratio:g}x"] = {"dp": _brief(dp), "pp": _brief(pp)}
    out["targets"] = {
        "planned_faster_than_uniform": all(c["planned_over_uniform_throughput"] > 1 for c in out["checks"]),
        "dp_utilization_at_least_0.95": all(c["planned"]["utilization_measured"] >= 0.95
                                            for c in out["checks"] if c["plan"].startswith("dp")),
        "seed_utilization_at_least_0.95": all((c["planned"]["utilization_seed_measured"] or 0) >= 0.95
                                              for c in out["checks"]),
        "prediction_within_5pct": all(abs(c[w]["error"]) <= 0.05 for c in out["checks"] for w in ("planned", "uniform")),
        "prediction_bracketed_within_5pct": all(abs(c[w]["error_bracketed"]) <= 0.05 for c in out["checks"]
                                                for w in ("planned", "uniform")),
        "speedup_prediction_within_5pct_interleaved": all(abs(c["interleaved"]["error"]) <= 0.05
                                                          for c in out["checks"] if "interleaved" in c)}
    d = results_root() / plan_report.SUBDIR
    d.mkdir(parents=True, exist_ok=True)
    (d / f"check-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json").write_text(json.dumps(out, indent=1))
    return out


def _uniform_on_planned_ranks(made: dict, inv_path: Path, batch: int, links_root: Path) -> dict:
    """A pipeline plan whose uniform split sits on the planned stage order's ranks: both sides of
    an interleaved pair run on the same ranks, so where the plan's uniform split took the
    inventory's order (the slow stage first, say, where the plan put it last) it is made again in
    the planned order (results/planner/pipeline_plan.pp_uniform) and says so (`order_from`)."""
    if made["uniform"]["stage_order"] == made["stage_order"]:
        return made
    from harness.planning.plan import costs_for
    from results.planner import inventory
    from results.planner.links import LinkModel
    from results.planner.pipeline_plan import pp_uniform
    inv = inventory.load(inv_path)
    uniform = pp_uniform(inv, costs_for(inv, "lm", SIZE), LinkModel(inv.links, links_root), batch, made,
                         order=made["stage_order"])
    return {**made, "uniform": {**uniform, "order_from": "planned"}}


def _speed_ratio(slow: Path, fast: Path) -> float:
    """How much slower the slow kind's whole-model forward+backward is, at microbatch 4."""
    from results.planner.layer_costs import from_profile
    return from_profile("s", slow).sample_s(4) / from_profile("f", fast).sample_s(4)


def _brief(p: dict) -> dict:
    keep = ("strategy", "devices", "batch_split", "pp_split", "stage_order", "microbatches", "links", "sources")
    return {k: p[k] for k in keep if k in p} | {"predicted": p["predicted"], "uniform": p["uniform"]}
