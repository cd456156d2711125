"""Each plan's step inside planner_seed's interleaved checks, against the planner's price for it
(issue 36: "predicted step within 5% of measured for every plan, measured with the interleaved
engine"). In those checks the mixed job and both kinds' own jobs ran in one process group,
alternating blocks, so all of them carry the same machine state: the separate launches' figures
(results/plans/seed-check-*.json "checks") carry the drift between launches as well.

Read from the fields every seed-check file has had since 2026-12-05: per process the mixed job's
median step (`mixed_step_s`), per kind its own job's median step over processes (`kind_steps_s`)
and its plan's price (`kind_steps_predicted_s`), and the predicted seed utilization (`predicted`),
from which the mixed plan's price follows (below). Pure Python."""
from __future__ import annotations

import math
import statistics

WITHIN = 0.05  # the target: |predicted / measured - 1| <= 5%
SHAPES = {"dp": "data parallel", "pp": "pipelines"}

# the interleaved checks planner_seed writes (harness/bench/planner_seed.py), in the order it runs
# them: key, shape, how the Planner page names the check beyond its shape ({} is its global batch)
CHECKS = (("seed_interleaved", "dp", ""), ("seed_interleaved_amortized", "dp", ", at batch {}"),
          ("seed_interleaved_calibrated", "dp", ", at batch {}, each kind calibrated from the check before"),
          ("seed_interleaved_pp", "pp", ""), ("seed_interleaved_pp_amortized", "pp", ", at batch {}"),
          ("seed_interleaved_pp_kinds", "pp", ", each kind its own pipeline in one launch"))


def mixed_price_s(si: dict, batch: int) -> float:
    """The mixed plan's predicted step, from the check's predicted seed utilization U: planner_seed
    prices U = (B / mixed) / sum_k (B // 2 / own_k), each kind's own job at half the global batch
    B, so mixed = B / (U * sum_k (B // 2) / own_k). U is kept to 4 digits: the price to ~5e-5."""
    own = si["kind_steps_predicted_s"].values()
    return batch / (float(si["predicted"]) * sum((batch // 2) / float(s) for s in own))


def steps(check: dict) -> list[dict]:
    """One row per job of every interleaved check that ran: the check's key and name, the job ("mixed" or
    its kind), its plan, predicted and measured step (s; the mixed job's the median over processes)
    and error = predicted / measured - 1 (negative: priced fast). A check without these fields (a
    skipped one, a file too old, a malformed one) has no rows."""
    rows = []
    for key, shape, at in CHECKS:
        try:
            name = SHAPES[shape] + (at or ", at batch {}")
            rows += _check_steps(key, name, check[key], check.get("global_batch"))
        except (KeyError, TypeError, ValueError, AttributeError, ArithmeticError,
                statistics.StatisticsError):
            continue  # one malformed check has no rows; the others keep theirs
    return rows


def _check_steps(key: str, name: str, si: dict, bench_batch: int | None) -> list[dict]:
    batch = int(si.get("global_batch") or bench_batch)
    if not isinstance(si["jobs"], list) or len(si["jobs"]) != len(si["kind_steps_predicted_s"]):
        raise ValueError(f"{key}: its jobs are not one plan per kind")
    jobs = [("mixed", str(si["mixed"]), mixed_price_s(si, batch), float(statistics.median(si["mixed_step_s"])))]
    jobs += [(str(k), str(plan), float(pred), float(si["kind_steps_s"][k]))
             for (k, pred), plan in zip(si["kind_steps_predicted_s"].items(), si["jobs"])]
    if not all(math.isfinite(x) and x > 0 for _, _, pred, meas in jobs for x in (pred, meas)):
        raise ValueError(f"{key}: a step that is not a finite number > 0")
    now, probed = si.get("steps_priced_now_s") or {}, si.get("steps_priced_in_check_s") or {}
    return [{"check": key, "name": name.format(batch), "job": job, "plan": plan, "predicted_s": pred,
             "measured_s": meas, "error": pred / meas - 1, **_priced(now.get(job), meas, "now"),
             **_priced(probed.get(job), meas, "in_check")}
            for job, plan, pred, meas in jobs]


def _priced(priced: object, measured: float, which: str) -> dict:
    """The job's plan priced again, where the check has that price for it: priced_<which>_s and
    error_<which>. "now": from a profile taken just before the check (harness/bench/
    seed_profiles.priced_now); "in_check": that profile scaled by each kind's speed during the check,
    the profile's block timed between its pairs (seed_profiles.priced_in_check)."""
    if isinstance(priced, bool) or not isinstance(priced, (int, float)) or not (math.isfinite(priced) and priced > 0):
        return {}
    return {f"priced_{which}_s": float(priced), f"error_{which}": float(priced) / measured - 1}


def verdict(rows: list[dict]) -> str:
    """How many jobs' steps lie within WITHIN of their price, and the furthest one; the same against
    the prices from a profile just before each check, and against those scaled by the check's probe,
    where there are any."""
    if not rows:
        return ""
    within = sum(abs(r["error"]) <= WITHIN for r in rows)
    far = max(rows, key=lambda r: abs(r["error"]))
    text = (f"Each plan's step inside the interleaved checks, against its price: {within} of {len(rows)} within "
            f"{100 * WITHIN:.0f}%; the furthest the {far['job']} job in {far['name']}, {100 * far['error']:+.1f}% "
            f"({far['predicted_s']:.2f} s priced, {far['measured_s']:.2f} s measured).")
    for field, how in (("error_now", "Priced from a profile just before each check"),
                       ("error_in_check", "That profile scaled by each kind's speed during the check")):
        got = [r for r in rows if field in r]
        if got:
            far = max(got, key=lambda r: abs(r[field]))
            text += (f" {how}: {sum(abs(r[field]) <= WITHIN for r in got)} of {len(got)} within "
                     f"{100 * WITHIN:.0f}%; the furthest the {far['job']} job in {far['name']}, {100 * far[field]:+.1f}%.")
    return text


def within(rows: list[dict], field: str = "error") -> bool | None:
    """Every row's `field` within WITHIN; None where no row has it."""
    got = [abs(r[field]) <= WITHIN for r in rows if field in r]
    return all(got) if got else None
