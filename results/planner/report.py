"""The planner's files as frames for the portal's Planner page: plans written by `harness plan`
(results/plans/plan-*.json) and the measured checks of `make perf` (results/plans/check-*.json:
planned and uniform splits run on ranks made unequal by CPU quotas). Pure Python + pandas."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from results.planner import seed_steps

SUBDIR = "plans"


def read_plan(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def plan_files(results: Path) -> list[Path]:
    """Plans, newest first."""
    return sorted((results / SUBDIR).glob("plan-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)


def newest_check(results: Path) -> dict | None:
    files = sorted((results / SUBDIR).glob("check-*.json"))
    for f in reversed(files):
        c = read_plan(f)
        if c and c.get("checks"):
            return {**c, "file": str(f)}
    return None


def checks_frame(check: dict) -> pd.DataFrame:
    """One row per checked plan and split (planned, uniform): predicted and measured step time,
    the simulator's error, utilization predicted and measured."""
    rows = []
    for c in check.get("checks", []):
        for which in ("planned", "uniform"):
            r = c[which]
            rows.append({"plan": c["plan"], "split": which,
                         "blocks or samples per rank": ",".join(map(str, c["split" if which == "planned" else "uniform_split"])),
                         "cpus per rank": ",".join(f"{x:g}" for x in c["cpus_by_rank"][which]) if isinstance(
                             c["cpus_by_rank"], dict) else ",".join(f"{x:g}" for x in c["cpus_by_rank"]),
                         "predicted step ms": round(1000 * r["predicted_step_s"], 1),
                         "measured step ms": round(1000 * r["measured_step_s"], 1),
                         "error %": round(100 * r["error"], 1),
                         # checks since 2026-12-03 profile again after the runs: the two predictions' mean
                         "error % (profiles before and after)": (round(100 * r["error_bracketed"], 1)
                                                                 if "error_bracketed" in r else None),
                         "utilization predicted": r["utilization_predicted"],
                         "utilization measured": r["utilization_measured"]})
    return pd.DataFrame(rows)


def check_verdicts(check: dict) -> list[str]:
    """A sentence per checked plan: what the planned split bought, and how right the simulator was."""
    out = []
    for c in check.get("checks", []):
        p, u = c["planned"], c["uniform"]
        out.append(f"{c['plan']}: planned {c['split']} vs uniform {c['uniform_split']}: "
                   f"{c['planned_over_uniform_throughput']:.2f}x the throughput; simulator error "
                   f"{100 * p['error']:+.1f}% (planned), {100 * u['error']:+.1f}% (uniform)"
                   + (f", {100 * p['error_bracketed']:+.1f}% and {100 * u['error_bracketed']:+.1f}% with the profiles "
                      f"before and after the runs" if "error_bracketed" in p and "error_bracketed" in u else "")
                   + "; utilization "
                   f"{p['utilization_measured']:.3f} measured, {p['utilization_predicted']:.3f} predicted"
                   + _interleaved(c.get("interleaved")))
    return out


def _interleaved(i: dict | None) -> str:
    """The drift-free figure: planned over uniform in one process group (harness/bench/planner.py)."""
    if not i:
        return ""
    lo, hi = i["ci95"]
    return (f"; interleaved in one process group, planned/uniform {i['measured_speedup']:.3f}x [{lo:.3f}, {hi:.3f}] "
            f"measured, {i['predicted_speedup']:.3f}x predicted ({100 * i['error']:+.1f}%)")


def per_kind_frame(plan: dict) -> pd.DataFrame:
    """The chosen strategy per device kind: its tensor/context group inside a node, and its part
    (pipeline stages and blocks, data-parallel samples, or its own job under "kinds")."""
    from collections import Counter
    count = Counter(plan["devices"])
    groups = plan.get("groups") or {}
    real = plan.get("real_kind") or {}
    rows = []
    for k, n in count.items():
        planned = next((v for v, r in real.items() if r == k), k)
        g = groups.get(planned) or groups.get(k) or {}
        row = {"device": k, "devices": n, "tensor parallel": g.get("tp", 1), "context parallel": g.get("cp", 1)}
        if plan["strategy"] == "kinds":
            j = plan["jobs"][k]
            row.update({"its part": f"its own job: {j['plan']}", "samples per step": j["global_batch"],
                        "its step ms": round(1000 * j["step_s"], 1)})
        elif plan["strategy"] == "pp":
            mine = [st for st in plan["stages"] if st["kind"] == planned]
            blocks = [st["blocks"] for st in mine]
            row.update({"its part": f"{len(blocks)} of {len(plan['stages'])} stages in each of {plan['replicas']} "
                                    f"pipelines, {min(blocks)}-{max(blocks)} blocks a stage",
                        "recompute": f"{sum(st['recompute'] for st in mine)} of its {len(mine)} stages"})
        else:
            shares = [b for d, b in zip(plan.get("planned_as", plan["devices"]), plan["batch_split"]) if d == planned]
            row.update({"its part": f"data parallel, {min(shares)}-{max(shares)} samples per "
                                    f"{'group' if g else 'device'}",
                        "recompute": "every block" if planned in plan.get("recompute", []) else "no"})
        rows.append(row)
    return pd.DataFrame(rows)


def plan_table(plan: dict) -> pd.DataFrame:
    """A plan's work per device: pipeline stages (blocks, time per microbatch, memory) or data-
    parallel shares, the uniform split beside it; under "kinds", each kind's job."""
    if plan.get("strategy") == "kinds":
        un = plan["uniform"]
        return pd.DataFrame([{"device": k, "its job": j["plan"], "samples": j["global_batch"],
                              "predicted step ms": round(1000 * j["step_s"], 1), "samples/s": round(j["samples_per_s"], 2),
                              "uniform: samples": un["jobs"][k]}
                             for k, j in plan["jobs"].items()])
    if plan.get("strategy") == "pp":
        un = plan["uniform"]["stages"]
        return pd.DataFrame([{"stage": i, "device": st["kind"], "blocks": st["blocks"],
                              "fwd+bwd ms per microbatch": round(1000 * (st["fwd_s"] + st["bwd_s"]), 2),
                              "memory GB": round(st["mem_bytes"] / 1e9, 2), "recompute": st["recompute"],
                              "uniform: device": un[i]["kind"], "uniform: blocks": un[i]["blocks"],
                              "uniform: fwd+bwd ms": round(1000 * (un[i]["fwd_s"] + un[i]["bwd_s"]), 2)}
                             for i, st in enumerate(plan["stages"])])
    pr, un = plan["predicted"], plan["uniform"]["predicted"]
    return pd.DataFrame([{"rank": i, "device": k, "samples": b, "compute ms": round(1000 * pr["compute_s"][i], 1),
                          "waits ms": round(1000 * pr["wait_s"][i], 1), "uniform: samples": plan["uniform"]["batch_split"][i],
                          "uniform: waits ms": round(1000 * un["wait_s"][i], 1)}
                         for i, (k, b) in enumerate(zip(plan.get("planned_as", plan["devices"]), plan["batch_split"]))])


def plan_summary(plan: dict) -> pd.DataFrame:
    rows = []
    for name, f in (("planned", plan["predicted"]), ("uniform", plan["uniform"]["predicted"])):
        seed = f.get("utilization_seed")
        rows.append({"split": name, "predicted step ms": round(1000 * f["step_s"], 1),
                     "samples/s": round(f["samples_per_s"], 2), "utilization": round(f["utilization"], 3),
                     "utilization (seed)": None if seed is None else round(seed, 3),
                     "fits memory": f.get("fits_memory", True)})
    return pd.DataFrame(rows)


def candidates_frame(plan: dict) -> pd.DataFrame:
    """The top plans the search compared (strategy auto), fastest first; empty for older plans."""
    return pd.DataFrame([{"plan": c["plan"], "predicted step ms": round(1000 * c["step_s"], 1),
                          "samples/s": round(c["samples_per_s"], 2),
                          "bubble": None if c.get("bubble") is None else round(c["bubble"], 3),
                          "peak memory GB": "" if not c.get("peak_memory_bytes") else ", ".join(
                              f"{k} {v / 1e9:.1f}" for k, v in c["peak_memory_bytes"].items())}
                         for c in plan.get("candidates", [])])


def homogeneous_frame(plan: dict) -> pd.DataFrame:
    """Each kind's own best homogeneous job: the seed utilization's denominator."""
    return pd.DataFrame([{"device": k, "global batch": r["global_batch"],
                          "samples/s alone": None if r["samples_per_s"] is None else round(r["samples_per_s"], 2),
                          "its best plan": r.get("plan") or f"cannot train alone: {r.get('why', '')}"}
                         for k, r in plan.get("homogeneous", {}).items()])


def inventory_frame(plan: dict) -> pd.DataFrame:
    kinds = {}
    for k in plan["devices"]:
        kinds[k] = kinds.get(k, 0) + 1
    return pd.DataFrame([{"device": k, "count": n, "costs from": plan["sources"].get(k, "")} for k, n in kinds.items()])


# -- utilization as the seed counts it, measured (`make perf` planner_seed: results/plans/seed-check-*.json)
SHAPES = seed_steps.SHAPES


def newest_seed_check(results: Path) -> dict | None:
    """The newest seed-check file the page can show: a malformed or truncated one is passed over
    for the one before it, so one bad file never blanks the page."""
    files = sorted((results / SUBDIR).glob("seed-check-*.json"))
    for f in reversed(files):
        c = read_plan(f)
        if not (isinstance(c, dict) and isinstance(c.get("checks"), dict)):
            continue
        try:
            seed_frame(c), seed_verdict(c), step_frame(c), step_verdict(c)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError):
            continue
        return {**c, "file": str(f)}
    return None


def seed_frame(check: dict) -> pd.DataFrame:
    """One row per shape measured in separate launches (the mixed job, then each kind's own job,
    alternating; the median over rounds), and one for the data-parallel plans interleaved in one
    process group (the mixed job against both kinds' own jobs at once: drift-free), at the bench's
    batch and at a larger one (and there again, each kind calibrated from that check), the same two
    for the pipelines, and data parallel over each kind's own pipeline (the planner's "kinds" plan
    in the pipelines' memory)."""
    rows = []
    for shape, c in check["checks"].items():
        rows.append({"shape": SHAPES.get(shape, shape), "how measured": "separate launches",
                     "mixed plan": c["mixed_plan"],
                     "each kind's own plan": "; ".join(f"{k}: {h['plan']}" for k, h in c["homogeneous"].items()),
                     "seed utilization measured": c["utilization_seed_measured"],
                     "95% interval": None, "seed utilization predicted": c["utilization_seed_predicted"]})
    for key, shape, at in seed_steps.CHECKS:
        si = check.get(key) or {}
        if "measured" in si:
            rows.append({"shape": SHAPES[shape],
                         "how measured": "interleaved, both kinds' jobs at once" + at.format(si.get("global_batch")),
                         "mixed plan": si["mixed"], "each kind's own plan": "; ".join(si["jobs"]),
                         "seed utilization measured": si["measured"],
                         "95% interval": _pair(si["ci95"], 1, 3),
                         "seed utilization predicted": si["predicted"]})
    return pd.DataFrame(rows)


def step_frame(check: dict) -> pd.DataFrame:
    """Each plan's step inside the interleaved checks against its price (results/planner/seed_steps)."""
    return pd.DataFrame([{"check": r["name"], "job": r["job"], "plan": r["plan"],
                          "predicted step s": round(r["predicted_s"], 3), "measured step s": round(r["measured_s"], 3),
                          # the measured step's 95% interval (order statistics over the check's steps)
                          "measured 95% s": _pair(r.get("measured_ci_s"), 1, 3),
                          "error %": round(100 * r["error"], 1),
                          "error % (profile just before)": round(100 * r["error_now"], 1) if "error_now" in r else None,
                          # that profile scaled by each kind's speed during the check (seed_profiles.priced_in_check)
                          "error % (speed in the check)":
                              round(100 * r["error_in_check"], 1) if "error_in_check" in r else None,
                          "its 95% %": _pair(r.get("error_in_check_ci"), 100, 1),
                          "stands (speed in the check)": seed_steps.standing(r, "error_in_check")}
                         for r in seed_steps.steps(check)])


def _pair(ci, scale: float, digits: int) -> str | None:
    return None if ci is None else f"[{scale * ci[0]:.{digits}f}, {scale * ci[1]:.{digits}f}]"


def step_verdict(check: dict) -> str:
    return seed_steps.verdict(seed_steps.steps(check))


def seed_verdict(check: dict) -> str:
    """Whether the seed's 0.95 is reached, by the drift-free figure where there is one."""
    si = check.get("seed_interleaved") or {}
    if "measured" not in si:
        return f"Interleaved figure not measured: {si.get('skipped', 'not in this check')}."
    text = f"Data parallel, drift-free: {_seed_figure(si)}."
    big = check.get("seed_interleaved_amortized") or {}
    if "measured" in big:  # the same plans' kind at a larger batch, where each step's fixed costs weigh less
        text += f" At batch {big['global_batch']}: {_seed_figure(big)}."
    cal = check.get("seed_interleaved_calibrated") or {}
    if "measured" in cal:  # re-planned with each kind's own job as run in the check before (its calibration)
        text += (f" Re-planned with each kind calibrated from that check "
                 f"({', '.join(f'{k} x{v:.3f}' for k, v in cal['calibration'].items())}): {_seed_figure(cal)}.")
    pp = check.get("seed_interleaved_pp") or {}
    if "measured" in pp:
        text += f" Pipelines, drift-free: {_seed_figure(pp)}."
    elif "skipped" in pp:
        text += f" Pipelines interleaved: not measured: {pp['skipped']}."
    big = check.get("seed_interleaved_pp_amortized") or {}
    if "measured" in big:
        text += f" Pipelines at batch {big['global_batch']}: {_seed_figure(big)}."
    kinds = check.get("seed_interleaved_pp_kinds") or {}
    if "measured" in kinds:  # the planner's data parallel over each kind's own pipeline, same memory
        text += f" Each kind its own pipeline, data parallel between them: {_seed_figure(kinds)}."
    return text


def _seed_figure(si: dict) -> str:
    lo, hi = si["ci95"]
    where = "above" if lo >= 0.95 else "below" if hi < 0.95 else "not distinguishable from"
    return (f"seed utilization {si['measured']:.3f} [{lo:.3f}, {hi:.3f}], {where} the seed's 0.95; "
            f"predicted {si['predicted']:.3f} ({100 * si['error']:+.1f}%)")
