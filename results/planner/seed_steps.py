"""Each plan's step inside planner_seed's interleaved checks, against the planner's price for it
(issue 36: "predicted step within 5% of measured for every plan, measured with the interleaved
engine"). In those checks the mixed job and both kinds' own jobs ran in one process group,
alternating blocks, so all of them carry the same machine state: the separate launches' figures
(results/plans/seed-check-*.json "checks") carry the drift between launches as well.

Read from the fields every seed-check file has had since 2026-12-05: per process the mixed job's
median step (`mixed_step_s`), per kind its own job's median step over processes (`kind_steps_s`)
and its plan's price (`kind_steps_predicted_s`), and the predicted seed utilization (`predicted`),
from which the mixed plan's price follows (below).

Since 2026-12-07 afternoon a check also keeps every job's steady steps (`steps_steady_s`: one a
block pair, the engine's blocks hold one step at these step lengths) and its probe's factors with
their intervals (`probe.ci95`). From them each error gets a 95% interval, and a miss of the 5% is
told apart from a measurement that cannot say: on this VM a job's steps in a check vary 5-10%
(CV) from pair to pair, so the median of some 25 of them is known to about +-2-6% (a mixed job's
to 13%), as wide as the target. The interval is the measured step's distribution-free one for the median
(order statistics over the check's pooled steps, results/stats/estimators.median_interval); for
the price scaled by the probe, the factor's t-interval is added to it in quadrature on the log
scale (independent errors; the mixed job takes its kinds' widest).

The profile's own cells are not exact either: each samples to +-2% or its budget, and on this VM
the budget ends them at 3-7 visits a rank (2026-12-07). Since 2026-12-07 evening a check keeps
each price's half-width for the sampling of the profile just before it (`steps_priced_now_spread`;
with the probe, `steps_priced_in_check_spread`: the price's cells relative to the probe's cell,
paired by the profile's rounds, with the factor's interval over the check's visits alone,
`probe.ci95_visits`: harness/bench/price_spread.py), added in quadrature. The plans' own price
(the first round's profile) carries none, nor do older files: their intervals are a lower bound."""
from __future__ import annotations

import math
import statistics

from results.stats.estimators import median_interval

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
    rows = [{"check": key, "name": name.format(batch), "job": job, "plan": plan, "predicted_s": pred,
             "measured_s": meas, "error": pred / meas - 1, **_priced(now.get(job), meas, "now"),
             **_priced(probed.get(job), meas, "in_check")}
            for job, plan, pred, meas in jobs]
    for r in rows:
        _intervals(r, si, list(si["kind_steps_predicted_s"]))
    return rows


def _intervals(row: dict, si: dict, kinds: list[str]) -> None:
    """The row's measured step's 95% interval (measured_ci_s) and each of its errors' (<field>_ci),
    where the check kept the job's steps; nothing where it did not or they are not numbers."""
    try:
        got = median_interval([float(x) for x in si["steps_steady_s"][row["job"]]])
    except (KeyError, TypeError, ValueError, AttributeError):
        return
    if got is None or not all(math.isfinite(x) and x > 0 for x in got):
        return
    lo, hi = got
    meas = row["measured_s"]
    row["measured_ci_s"] = (lo, hi)
    # log half-widths of the measured step's interval about the row's measured step (its median)
    down, up = math.log(meas / lo) if lo < meas else 0.0, math.log(hi / meas) if hi > meas else 0.0
    probe = _probe_halfwidths(si, [row["job"]] if row["job"] in kinds else kinds)
    # the profile just before's own sampling in its prices: the cells themselves, and with the probe the
    # cells relative to the probe's (harness/bench/price_spread.py)
    spread = {f: _price_spread(si, f"steps_priced_{f[6:]}_spread", row["job"]) for f in ("error_now", "error_in_check")}
    for field, price in (("error", "predicted_s"), ("error_now", "priced_now_s"), ("error_in_check", "priced_in_check_s")):
        if price not in row:
            continue
        below, above = probe if field == "error_in_check" else (0.0, 0.0)
        if below is None:  # a probed price whose factor has no interval: none for its error either
            continue
        if field in spread:
            below, above = math.hypot(below, spread[field]), math.hypot(above, spread[field])
        centre = math.log(row[price] / meas)
        # the error is price / measured: a high measured step lowers it, a high factor raises it
        lo_e, hi_e = math.exp(centre - math.hypot(up, below)) - 1, math.exp(centre + math.hypot(down, above)) - 1
        # exp(log(x)) can land an ulp off x: the interval holds its own estimate exactly (found by Hypothesis)
        row[f"{field}_ci"] = (min(lo_e, row[field]), max(hi_e, row[field]))


def _price_spread(si: dict, key: str, job: str) -> float:
    """The log half-width of the job's price for the sampling of the profile just before the check
    (`key`: steps_priced_now_spread, steps_priced_in_check_spread; harness/bench/price_spread.py);
    0 where the check has none (files before 2026-12-07 evening, a "kinds" plan): their intervals
    leave it out."""
    try:
        got = float(si[key][job])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return got if math.isfinite(got) and got > 0 else 0.0


def _probe_halfwidths(si: dict, kinds: list[str]) -> tuple[float | None, float | None]:
    """The log half-widths (below, above) of the probe's factor for these kinds, the widest of
    them; (None, None) where the check has no factor interval for one of them."""
    try:
        probe = si["probe"]
        lows, highs = [], []
        for k in kinds:
            # the check's visits alone where kept: the profile's part is in the price's spread (price_spread.py)
            f, (lo, hi) = float(probe["factors"][k]), (float(x) for x in probe.get("ci95_visits", probe["ci95"])[k])
            if not (0 < lo <= f <= hi and math.isfinite(hi)):
                return None, None
            lows.append(math.log(f / lo))
            highs.append(math.log(hi / f))
        return max(lows), max(highs)
    except (KeyError, TypeError, ValueError, AttributeError):
        return None, None


def standing(row: dict, field: str = "error") -> str | None:
    """Where the row's `field` stands against the target: "within" (|error| <= WITHIN), "beyond"
    (its 95% interval wholly outside +-WITHIN: a miss the measurement resolves), "unresolved"
    (beyond by the estimate, its interval reaching within), "no interval" (beyond by the estimate,
    no interval kept); None where the row has no such error."""
    if field not in row:
        return None
    if abs(row[field]) <= WITHIN:
        return "within"
    ci = row.get(f"{field}_ci")
    if ci is None:
        return "no interval"
    return "beyond" if ci[0] > WITHIN or ci[1] < -WITHIN else "unresolved"


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
    where there are any. Where rows have intervals, how many of those beyond are beyond it at 95%
    and how many the measurement cannot resolve (standing)."""
    if not rows:
        return ""
    far = max(rows, key=lambda r: abs(r["error"]))
    text = (f"Each plan's step inside the interleaved checks, against its price: {_count(rows, 'error')}; the furthest "
            f"the {far['job']} job in {far['name']}, {100 * far['error']:+.1f}% "
            f"({far['predicted_s']:.2f} s priced, {far['measured_s']:.2f} s measured).")
    for field, how in (("error_now", "Priced from a profile just before each check"),
                       ("error_in_check", "That profile scaled by each kind's speed during the check")):
        got = [r for r in rows if field in r]
        if got:
            far = max(got, key=lambda r: abs(r[field]))
            text += (f" {how}: {_count(got, field)}; the furthest the {far['job']} job in {far['name']}, "
                     f"{100 * far[field]:+.1f}%.")
    return text


def _count(rows: list[dict], field: str) -> str:
    """"N of M within 5%", and where some are not and any row has an interval, how those stand."""
    got = [standing(r, field) for r in rows if field in r]
    text = f"{got.count('within')} of {len(got)} within {100 * WITHIN:.0f}%"
    if got.count("within") < len(got) and any(f"{field}_ci" in r for r in rows):
        text += (f" ({got.count('beyond')} beyond it at 95% confidence, {got.count('unresolved')} not resolved at "
                 f"this sample size" + (f", {got.count('no interval')} without an interval"
                                          if "no interval" in got else "") + ")")
    return text


def within(rows: list[dict], field: str = "error") -> bool | None:
    """Every row's `field` within WITHIN; None where no row has it."""
    got = [abs(r[field]) <= WITHIN for r in rows if field in r]
    return all(got) if got else None


def beyond(rows: list[dict], field: str = "error") -> int | None:
    """How many rows' `field` lies beyond WITHIN with 95% confidence (standing "beyond"); None where
    no row has an interval for it (nothing can be resolved)."""
    if not any(f"{field}_ci" in r for r in rows):
        return None
    return sum(standing(r, field) == "beyond" for r in rows)
