"""harness/bench/planner_seed.py's four ranks profiled and written into inventories, and the
plans of an interleaved check priced again from a profile taken just before it.

Why the last: the interleaved checks run the plans made from the first round's profiles, up to an
hour later. Inside them every job ran 2-13% slower than priced (2026-12-06 15:36 run, the later
checks the most: results/planner/seed_steps.py), all jobs of one check alike, as the machine's
drift between a profile and a run would make them. The separate launches pair each round with a
profile just before it for that reason (results/planner/evaluate.py); this does the same for each
interleaved check: the same plans (split, microbatches, stage order), fresh costs.

And priced a third time for the machine's speed while the check ran: every rank times the
profile's block between the check's pairs (harness/run/probe.py), and each kind's costs in
that profile are scaled by its probe's mean over the profile's mean for the same cell
(priced_in_check). Why: a profile just before a check still priced its jobs -9.6% to +12.4% off
(2026-12-07 01:03 bench), and two profiles fifteen minutes apart priced the 0.25-CPU pair's own job
14.07 and 16.16 s while it ran 15.57 and 15.75 s in the checks after them: the machine's speed
moved between the profile and the check (harness/run/probe.py has the figures)."""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from harness.bench.planner_jobs import SIZE, predict, profile_ranks
from harness.bench.price_spread import (block_visits_by_microbatch, plan_microbatches, price_spread,
                                        relative_half_width)
from harness.bench.seed_inputs import calibrated_inventory, kind_records, profiled
from harness.parallel import cpu_quota as rank_cpu


def held(env: dict, kinds: dict[str, float]) -> dict:
    """env with two ranks of each kind held to its quota, kind by kind in `kinds`' order."""
    return {**env, rank_cpu.ENV: ",".join(f"{c:g}" for c in kinds.values() for _ in range(2))}


def inventory(path: Path, kinds: dict[str, float], profiles: dict[str, Path | list[Path]], memory_gb: float,
              only: str | None = None) -> Path:
    """Two devices of each kind (or of `only`), each kind priced from its profile record or records
    (a list: its ranks', pooled: results/planner/pooled.py); collectives among one kind's pair priced
    from the records measured on that pair (tmp/comm-<kind>: planner_seed._measure_kind_links), the
    rest from the four ranks'."""
    here = [k for k in kinds if only in (None, k)]
    own = ", ".join(f"{k}: {path.parent / f'comm-{k}'}" for k in here)

    def named(k: str) -> str:
        got = kind_records(profiles[k])
        return str(got[0]) if len(got) == 1 else json.dumps([str(r) for r in got])  # a JSON list is YAML
    path.write_text("devices:\n" + "".join(
        f"  - {{kind: {k}, count: 2, memory_gb: {memory_gb:.6g}, profile: {named(k)}}}\n" for k in here)
        + f"links: {{collectives: measured, backend: gloo, kinds: {{{own}}}}}\n")
    return path


def profile(held_env: dict, tmp: Path, kinds: dict[str, float], tag: int | str) -> dict[str, list[Path]]:
    """All four ranks profiled at once into tmp/round<tag>, each held to its quota; each kind's
    records, both of its ranks' (ranks 2i and 2i + 1 are the i-th kind, as `held` holds them),
    priced pooled. Why both: until 2026-12-07 a kind was priced from its first rank's record, and
    the two ranks of one kind, profiled side by side, read LM small's block at microbatch 1 95.2
    and 80.0 ms a sample (0.5 CPU, AMD EPYC): one rank's profile carries its own noise."""
    ranks = profile_ranks(held_env, tmp / f"round{tag}", 4, "lm", SIZE)
    return {k: [ranks[2 * i], ranks[2 * i + 1]] for i, k in enumerate(kinds)}


def priced_now(env: dict, tmp: Path, kinds: dict[str, float], jobs: dict, memory_gb: float, tag: str) -> dict:
    """The four ranks profiled now (tmp/round<tag>; inventories tmp/inv<tag>-<job>.yaml), and each
    job's plan ({name: (plan, batch)}: "mixed" and each kind's own) priced with that profile,
    uncalibrated: {"steps_priced_now_s":
    {name: seconds, or None where evaluate cannot price the plan again (a "kinds" plan)},
    "steps_priced_now_spread": {name: the price's log 95% half-width for the profile's own
    sampling (harness/bench/price_spread.py), or None}, "profiled_now": the profile in brief}."""
    from results.planner.inventory import PlanError
    profiles = profile(held(env, kinds), tmp, kinds, tag)
    steps: dict[str, float | None] = {}
    spread: dict[str, float | None] = {}
    for name, (p, _) in jobs.items():
        inv = inventory(tmp / f"inv{tag}-{name}.yaml", kinds, profiles, memory_gb,
                        only=None if name == "mixed" else name)
        try:
            price = predict(p, inv, tmp)
            steps[name] = round(price, 4)
            mine = profiles if name == "mixed" else {name: profiles[name]}
            got = price_spread(p, inv, tmp, mine, price)
            spread[name] = None if got is None else round(got, 4)
        except PlanError:
            steps[name] = spread[name] = None
    return {"steps_priced_now_s": steps, "steps_priced_now_spread": spread, "profiled_now": profiled(profiles)}


# the microbatch of the profile's block cell each rank times between an interleaved check's pairs
# (harness/run/probe.py) where the check's plans run none the profile timed (probe_microbatch):
# a visit is two passes (the first kept apart), 0.2 CPU s, 0.8 s wall at 0.25 CPU, 12% of a pair at batch 24
PROBE_MB = 4


def probe_microbatch(jobs: dict, inv: Path) -> int:
    """The block microbatch the probe times in a check of these jobs ({name: (plan, batch)}, priced
    from the inventory `inv`, whose first device's profile says the sizes profiled): the
    profiled size the most of the jobs' kinds run at (price_spread.plan_microbatches; a tie, the
    smaller), PROBE_MB where none runs a profiled size. Why: a price scaled by the probe moves with
    its cells relative to the probe's cell in the profile (price_spread.py), and the cell itself
    cancels: a pipeline check at batch 24 runs microbatch 1, whose cell one rank's profile of 3-7
    visits put the morning's prices at +-21-33% for, and +-7-14% relative to the block at 4
    (2026-12-07, kept profiles); until 2026-12-07 evening every check probed microbatch 4."""
    import yaml
    sizes = set(block_sizes(yaml.safe_load(inv.read_text())["devices"][0]["profile"]))
    votes: dict[int, int] = {}
    for plan, _ in jobs.values():
        for runs in (plan_microbatches(plan) or {}).values():
            for b in runs & sizes:
                votes[b] = votes.get(b, 0) + 1
    return min(votes, key=lambda b: (-votes[b], b)) if votes else PROBE_MB


def block_sizes(profile: Path | list[Path] | str) -> list[int]:
    """The microbatches the kind's first profile record timed its block at."""
    return sorted(block_visits_by_microbatch(kind_records(profile)[:1])[0])


def block_cpu_s(profile: Path | list[Path], microbatch: int = PROBE_MB) -> float:
    """The profile's block at `microbatch`: mean forward + mean backward CPU seconds over its visits
    (cells.Layer by_cpu; the figure its row prices at the rank's wall per CPU second); over a
    kind's records, the mean of theirs (as pooled prices it)."""
    return statistics.fmean(statistics.fmean(f) + statistics.fmean(b) for f, b in _block_rows(profile, microbatch))


def block_visits(profile: Path | list[Path], microbatch: int = PROBE_MB) -> list[float]:
    """Every visit's forward + backward CPU seconds of the profile's block at `microbatch`, over
    the kind's records (a visit's forward and backward are one round's: cells.Layer)."""
    return [x + y for f, b in _block_rows(profile, microbatch) for x, y in zip(f, b)]


def _block_rows(profile: Path | list[Path], microbatch: int) -> list[tuple[list[float], list[float]]]:
    from results.record import schema
    got = []
    for rec in kind_records(profile):
        rows = schema.read_record(rec)["summary"]["layers"]["block"]  # the records' validating reader
        row = next((r for r in rows if r.get("microbatch") == microbatch), None)
        if row is None:
            raise ValueError(f"{rec.name}: no block figure at microbatch {microbatch}")
        got.append((row["fwd_cpu_samples_s"], row["bwd_cpu_samples_s"]))
    return got


def probe_factors(records: list[dict], rank_kinds: list[str], profiles: dict[str, Path]) -> dict:
    """Each kind's speed in an interleaved check over its speed in the profile: the mean CPU seconds
    of the probe's visits on the kind's ranks, over every process of the check (records), over the
    profile's mean for the same cell (the block at the probe's microbatch, every record's the
    same). Means, as the profile prices a cell (its mean visit): a step sums many passes.
    {"microbatch": the probe's, "factors": {kind: x}, "ci95": {kind: [lo, hi] or None}
    (_factor_interval: the probe's sampling and the profile's), "ci95_visits": the same for the
    check's visits alone (what a price scaled by the factor carries: harness/bench/price_spread.py),
    "probe_cpu_s", "profile_cpu_s", "visits": {kind: n}, "profile_visits": {kind: n},
    "profile_half_width": {kind: the profile's mean's relative 95% half-width, or None}}."""
    got: dict[str, list[float]] = {k: [] for k in profiles}
    moments: dict[str, list[float]] = {k: [] for k in profiles}  # per visit, the mean of the kind's ranks
    mb = records[0]["summary"]["ab"]["probe"]["microbatch"] if records else PROBE_MB
    for rec in records:
        probe = rec["summary"]["ab"]["probe"]
        if probe["microbatch"] != mb or len(probe["per_rank"]) != len(rank_kinds):
            raise ValueError(f"a probe of microbatch {probe['microbatch']} on {len(probe['per_rank'])} ranks; "
                             f"expected {mb}, as the check's first, on {len(rank_kinds)}")
        for kind in profiles:
            mine = [r["cpu_s"] for k, r in zip(rank_kinds, probe["per_rank"]) if k == kind]
            for r in mine:
                got[kind] += r
            moments[kind] += [statistics.fmean(v) for v in zip(*mine)]
    ref = {k: block_cpu_s(p, mb) for k, p in profiles.items()}
    ref_visits = {k: block_visits(p, mb) for k, p in profiles.items()}
    ref_half = {k: relative_half_width(v) for k, v in ref_visits.items()}
    mean = {k: statistics.fmean(v) for k, v in got.items()}
    return {"microbatch": mb, "factors": {k: round(mean[k] / ref[k], 4) for k in profiles},
            "ci95": {k: _factor_interval(moments[k], mean[k], ref[k], ref_half[k]) for k in profiles},
            "ci95_visits": {k: _factor_interval(moments[k], mean[k], ref[k], 0.0) for k in profiles},
            "probe_cpu_s": {k: round(v, 6) for k, v in mean.items()},
            "profile_cpu_s": {k: round(v, 6) for k, v in ref.items()}, "visits": {k: len(v) for k, v in got.items()},
            "profile_visits": {k: len(v) for k, v in ref_visits.items()},
            "profile_half_width": {k: None if v is None else round(v, 4) for k, v in ref_half.items()}}


def _factor_interval(moments: list[float], mean: float, ref: float, ref_half: float | None) -> list[float] | None:
    """The factor's 95% interval, from both means it divides: Student's t on the mean of the kind's
    visits in the check, each visit the mean of its ranks (they visit at once, between the same
    pairs: one moment of the machine, not two), and on the profile's mean (`ref_half`: its relative
    half-width over the kind's records' visits, pooled), added in quadrature (independent samples;
    the delta method for a ratio: relative variances add). None under 2 visits of either.
    Why both: a visit's CPU seconds vary ~10% (CV) around the check's drift, so some 20 visits a
    process put the probe's mean to +-3-4% (2026-12-07, AMD EPYC: visits 0.144-0.236 s at
    microbatch 4); and the profile's cell at the probe's microbatch ends by its budget after 3-7
    visits a rank at +-6-14% (2026-12-07 morning's profiles, kept: the twins' means 0.152 and
    0.165 s in one profile). Until 2026-12-07 evening the profile's mean was taken as exact: the
    intervals then understated the factor's uncertainty."""
    probe_half = relative_half_width(moments)
    if probe_half is None or ref_half is None:
        return None
    half = math.hypot(probe_half * statistics.fmean(moments) / mean, ref_half)
    f = mean / ref
    return [round(max(f * (1 - half), 0.0), 4), round(f * (1 + half), 4)]


def priced_in_check(tmp: Path, jobs: dict, tag: str, records: list[dict], rank_kinds: list[str]) -> dict:
    """Each job's plan priced from the profile just before the check (priced_now's inventories,
    tmp/inv<tag>-<job>.yaml) with every kind's costs scaled by its probe factor (inventory
    `calibration`, layer_costs.Costs.scaled: compute only, links as measured): the price for the
    machine's speed while the check ran. {"steps_priced_in_check_s": {name: s or None},
    "steps_priced_in_check_spread": {name: the price's log 95% half-width for the profile's cells
    relative to the probe's (harness/bench/price_spread.py), or None}, "probe": ...}, or
    {"probe_skipped": why} where a record or the profile cannot give the factors."""
    import yaml

    from results.planner.inventory import PlanError
    from results.record.schema import RecordError
    invs = {name: tmp / f"inv{tag}-{name}.yaml" for name in jobs}
    profiles = {d["kind"]: kind_records(d["profile"]) for d in yaml.safe_load(invs["mixed"].read_text())["devices"]}
    try:
        probe = probe_factors(records, rank_kinds, profiles)
    except (RecordError, KeyError, TypeError, ValueError, ZeroDivisionError, statistics.StatisticsError) as e:
        # a probe or profile that cannot give a factor costs this price only: the check's figures stand
        return {"probe_skipped": f"{type(e).__name__}: {e}"[:300]}
    steps: dict[str, float | None] = {}
    spread: dict[str, float | None] = {}
    for name, (p, _) in jobs.items():
        inv = calibrated_inventory(invs[name], probe["factors"], invs[name].with_name(f"inv{tag}-probe-{name}.yaml"))
        try:
            price = predict(p, inv, tmp)
            steps[name] = round(price, 4)
            # the price's cells over the probe's cell in the profile, paired by round (price_spread.py)
            got = price_spread(p, inv, tmp, profiles if name == "mixed" else {name: profiles[name]}, price,
                               probe["microbatch"])
            spread[name] = None if got is None else round(got, 4)
        except PlanError:
            steps[name] = spread[name] = None
    return {"steps_priced_in_check_s": steps, "steps_priced_in_check_spread": spread, "probe": probe}
