"""The layer profile's block timed between an interleaved run's pairs (harness/run/probe.py,
`--set probe_microbatch=M`), and planner_seed's plans priced for the machine's speed it measured
(harness/bench/seed_profiles.probe_factors, priced_in_check)."""
from __future__ import annotations

import statistics
from pathlib import Path

import pytest
import yaml

from harness.bench import seed_profiles
from harness.config.errors import UsageError
from harness.config.run_config import RunConfig
from results.planner.inventory import PlanError
from results.record import schema
from tests.conftest import harness, run_dirs

KINDS = {"cpu0.5": 0.5, "cpu0.25": 0.25}
ORDER = ["cpu0.5", "cpu0.5", "cpu0.25", "cpu0.25"]  # the four ranks' kinds, as the mixed plan holds them


def test_an_interleaved_run_times_the_profiles_block_once_after_every_pair(env, data_root):
    """One visit per pair on the rank, in CPU and wall seconds, its first pass's CPU seconds kept
    apart, named by its cell and microbatch; both sides still train as their own runs did (the gate
    against the reference run's losses: the baseline side's step for step, +amp=bf16's within its
    tolerance)."""
    one = ["--set", "steps=4", "--set", "profile_steps=0", "--no-ingest", "--set", "threads=1"]
    base = harness(env, "run", "lm", *one)
    assert base.returncode == 0, base.stderr[-2000:]
    ref = run_dirs(env)[0]
    p = harness(env, "run", "lm", *one, "--set", "toggles.amp=bf16", "--set", "interleave=true", "--set", "budget_s=2", "--set", "probe_microbatch=2",
                "--set", f"reference_run={ref}")
    assert p.returncode == 0, p.stderr[-2000:]
    s = schema.read_record(next(d for d in run_dirs(env) if d != ref))["summary"]
    probe = s["ab"]["probe"]
    assert (probe["cell"], probe["microbatch"], len(probe["per_rank"])) == ("block", 2, 1)
    mine = probe["per_rank"][0]
    assert len(mine["cpu_s"]) == len(mine["wall_s"]) == len(mine["first_cpu_s"]) == s["ab_pairs"] >= 1
    assert all(x > 0 for x in mine["cpu_s"] + mine["wall_s"] + mine["first_cpu_s"])
    assert "after the first" in probe["by"]  # the sample is not the pass first after the barrier
    assert s["gate_passed"] == 1 and s["ab_baseline_gate_passed"] == 1


@pytest.mark.parametrize("sets, says", [
    ({"probe_microbatch": 4}, "applies to interleaved runs"),
    ({"probe_microbatch": 4, "interleave": True, "workload": "cosmoflow"}, "of a workload with a layer profile (lm)"),
    ({"probe_microbatch": -1, "interleave": True}, "probe_microbatch must be >= 0"),
    ({"probe_microbatch": 4, "interleave": True, "device": "cuda"}, "device=cpu runs only"),
])
def test_a_probe_where_there_is_nothing_to_probe_is_refused_by_name(sets, says):
    with pytest.raises(UsageError, match=says.replace("(", r"\(").replace(")", r"\)")):
        RunConfig(**{"workload": "lm", **sets})


def _profile(d: Path, fwd: list[float], bwd: list[float], microbatch: int = seed_profiles.PROBE_MB) -> Path:
    """A layer profile record as `harness profile` writes one (read through the records' reader)."""
    d.mkdir(parents=True)
    schema.write_json(d / schema.CONFIG, {"kind": schema.PROFILE_KIND, "run_id": d.name, "workload": "lm", "size": "small"})
    schema.write_json(d / schema.ENV, {})
    schema.open_record(d, 0.0)
    schema.close_record(d, {"layers": {"block": [
        {"microbatch": 1, "fwd_cpu_samples_s": [9.0], "bwd_cpu_samples_s": [9.0]},
        {"microbatch": microbatch, "fwd_cpu_samples_s": fwd, "bwd_cpu_samples_s": bwd}]}}, schema.FINISHED, "", 0.0)
    return d


def _record(per_rank: list[list[float]], microbatch: int = seed_profiles.PROBE_MB) -> dict:
    return {"summary": {"ab": {"probe": {"cell": "block", "microbatch": microbatch,
                                         "per_rank": [{"cpu_s": c, "wall_s": c} for c in per_rank]}}}}


def test_each_kinds_factor_is_its_ranks_mean_visit_in_the_check_over_the_profiles_mean(tmp_path):
    # the profile's block at the probe's microbatch: 0.05 + 0.10 CPU s (means of the visits)
    profiles = {"cpu0.5": _profile(tmp_path / "fast", [0.04, 0.06], [0.1, 0.1]),
                "cpu0.25": _profile(tmp_path / "slow", [0.05], [0.12])}
    two = [_record([[0.15, 0.18], [0.15], [0.17, 0.17], [0.20]]), _record([[0.12], [0.15], [0.17], [0.16]])]
    got = seed_profiles.probe_factors(two, ORDER, profiles)
    assert got["profile_cpu_s"] == {"cpu0.5": pytest.approx(0.15), "cpu0.25": pytest.approx(0.17)}
    assert got["visits"] == {"cpu0.5": 5, "cpu0.25": 5}
    assert got["probe_cpu_s"]["cpu0.5"] == pytest.approx((0.15 + 0.18 + 0.15 + 0.12 + 0.15) / 5)
    assert got["factors"] == {"cpu0.5": pytest.approx(0.15 / 0.15, abs=1e-4),
                              "cpu0.25": pytest.approx(0.174 / 0.17, abs=1e-4)}  # a mean, not the median 0.17
    with pytest.raises(ValueError, match="no block figure at microbatch 2"):  # a cell the profile did not time
        seed_profiles.probe_factors([_record([[0.1]] * 4, microbatch=2)], ORDER, profiles)
    with pytest.raises(ValueError, match="microbatch 1 on 4 ranks; expected 4, as the check's first"):
        seed_profiles.probe_factors([two[0], _record([[0.1]] * 4, microbatch=1)], ORDER, profiles)
    # the probe's microbatch is the records': the profile's cell at 1 (9 + 9 CPU s) is its reference then
    at_1 = seed_profiles.probe_factors([_record([[18.0], [18.0], [9.0], [9.0]], microbatch=1)], ORDER, profiles)
    assert (at_1["microbatch"], at_1["factors"]) == (1, {"cpu0.5": 1.0, "cpu0.25": 0.5})
    with pytest.raises(ValueError, match="on 2 ranks"):
        seed_profiles.probe_factors([_record([[0.1]] * 2)], ORDER, profiles)


def test_the_probe_times_the_profiled_microbatch_most_of_the_checks_plans_run(tmp_path):
    """Votes of each job's kinds (price_spread.plan_microbatches) among the sizes profiled (1 and 4
    here); a tie goes to the smaller; none profiled, PROBE_MB."""
    profiles = {"cpu0.5": _profile(tmp_path / "fast", [0.05], [0.1]), "cpu0.25": _profile(tmp_path / "slow", [0.05], [0.1])}
    inv = seed_profiles.inventory(tmp_path / "inv-mixed.yaml", KINDS, profiles, 2.0)
    pipe = {"strategy": "pp", "devices": ORDER, "microbatch_size": 1}
    own = {"strategy": "pp", "devices": ["cpu0.5"] * 2, "microbatch_size": 1}
    assert seed_profiles.probe_microbatch({"mixed": (pipe, 24), "cpu0.5": (own, 12)}, inv) == 1
    dp = {"strategy": "dp", "devices": ORDER, "batch_split": [8, 8, 4, 4], "microbatch_split": [2, 2, 1, 1]}
    assert seed_profiles.probe_microbatch({"mixed": (dp, 24)}, inv) == 4  # both kinds run 4
    both = {"mixed": (dp, 24), "cpu0.5": (own, 12)}  # 4 twice (the mixed job's kinds), 1 once
    assert seed_profiles.probe_microbatch(both, inv) == 4
    tie = {"mixed": ({**dp, "microbatch_split": [2, 2, 4, 4]}, 24)}  # cpu0.5 at 4, cpu0.25 at 1
    assert seed_profiles.probe_microbatch(tie, inv) == 1
    odd = {"mixed": ({"strategy": "pp", "devices": ORDER, "microbatch_size": 3}, 24), "k": ({"strategy": "kinds"}, 12)}
    assert seed_profiles.probe_microbatch(odd, inv) == seed_profiles.PROBE_MB


def test_each_factor_has_a_t_interval_from_the_checks_visits_and_the_profiles_in_quadrature(tmp_path):
    """The kind's two ranks visit at once (one moment of the machine): each visit is their mean,
    Student's t on those moments' mean; and Student's t on the profile's mean over its visits
    (forward + backward of one round), pooled over the kind's records; the relative half-widths
    add in quadrature."""
    profiles = {"cpu0.5": _profile(tmp_path / "fast", [0.04, 0.06], [0.1, 0.1]),
                "cpu0.25": _profile(tmp_path / "slow", [0.05, 0.05, 0.05], [0.1, 0.1, 0.1])}
    two = [_record([[0.15, 0.17, 0.16], [0.15, 0.15, 0.16], [0.2, 0.2, 0.2], [0.2, 0.2, 0.2]]),
           _record([[0.14], [0.16], [0.2], [0.2]])]
    got = seed_profiles.probe_factors(two, ORDER, profiles)
    moments = [0.15, 0.16, 0.16, 0.15]  # mean 0.155, sd 0.005774, t(0.975, 3 df) = 3.182446
    probe = 3.182446 * statistics.stdev(moments) / 2 / 0.155
    ref = 12.706205 * statistics.stdev([0.14, 0.16]) / 2 ** 0.5 / 0.15  # visits 0.14 and 0.16, t(0.975, 1 df)
    assert got["profile_visits"] == {"cpu0.5": 2, "cpu0.25": 3}
    assert got["profile_half_width"] == {"cpu0.5": pytest.approx(ref, abs=1e-4), "cpu0.25": 0.0}
    f = 0.155 / 0.15
    half = (probe ** 2 + ref ** 2) ** 0.5  # 0.849: the two visits' profile swamps the probe's 4.3%
    assert got["factors"]["cpu0.5"] == pytest.approx(f, abs=1e-4)
    assert got["ci95"]["cpu0.5"] == pytest.approx([max(f * (1 - half), 0.0), f * (1 + half)], abs=1e-4)
    assert got["ci95"]["cpu0.25"] == pytest.approx([0.2 / 0.15, 0.2 / 0.15], abs=1e-4)  # no spread, no width
    # the check's visits alone: what a price scaled by the factor carries (the profile's part is in its spread)
    assert got["ci95_visits"]["cpu0.5"] == pytest.approx([f * (1 - probe), f * (1 + probe)], abs=1e-4)
    one = seed_profiles.probe_factors([_record([[0.16], [0.16], [0.2], [0.2]])], ORDER, profiles)
    assert one["ci95"] == {"cpu0.5": None, "cpu0.25": None}  # one visit in the check has no interval
    thin = {"cpu0.5": _profile(tmp_path / "one", [0.05], [0.1]), "cpu0.25": profiles["cpu0.25"]}
    assert seed_profiles.probe_factors(two, ORDER, thin)["ci95"]["cpu0.5"] is None  # nor one in the profile


def test_each_job_is_priced_from_the_profile_before_the_check_scaled_by_its_kinds_factor(tmp_path, monkeypatch):
    profiles = {"cpu0.5": _profile(tmp_path / "fast", [0.05], [0.1]), "cpu0.25": _profile(tmp_path / "slow", [0.05], [0.1])}
    tag = "-now-dp-24"
    for name in ("mixed", *KINDS):  # what priced_now wrote
        seed_profiles.inventory(tmp_path / f"inv{tag}-{name}.yaml", KINDS, profiles, 2.0,
                                only=None if name == "mixed" else name)

    def predict(plan: dict, inv: Path, links_root: Path) -> float:
        if plan["strategy"] == "kinds":
            raise PlanError("cannot price a 'kinds' plan again")
        return sum(d["count"] * d["calibration"] for d in yaml.safe_load(inv.read_text())["devices"])

    monkeypatch.setattr(seed_profiles, "predict", predict)
    jobs = {"mixed": ({"strategy": "dp"}, 24), "cpu0.5": ({"strategy": "dp"}, 12), "cpu0.25": ({"strategy": "kinds"}, 12)}
    # the check ran the 0.5-CPU ranks 10% slower than profiled, the 0.25-CPU ranks 20% faster
    got = seed_profiles.priced_in_check(tmp_path, jobs, tag, [_record([[0.165], [0.165], [0.12], [0.12]])], ORDER)
    assert got["probe"]["factors"] == {"cpu0.5": 1.1, "cpu0.25": 0.8}
    assert got["steps_priced_in_check_s"] == {"mixed": pytest.approx(2 * 1.1 + 2 * 0.8), "cpu0.5": pytest.approx(2.2),
                                              "cpu0.25": None}
    # plans that do not say their microbatches (these) have no spread (harness/bench/price_spread.py)
    assert got["steps_priced_in_check_spread"] == {"mixed": None, "cpu0.5": None, "cpu0.25": None}
    # the inventories it priced are kept beside priced_now's, each device with its kind's factor
    own = yaml.safe_load((tmp_path / f"inv{tag}-probe-cpu0.5.yaml").read_text())["devices"]
    assert [(d["kind"], d["calibration"]) for d in own] == [("cpu0.5", 1.1)]
    # a record without a probe, or a profile record that is not one, costs this price only: one line, no raise
    assert "KeyError" in seed_profiles.priced_in_check(tmp_path, jobs, tag, [{"summary": {"ab": {}}}], ORDER)["probe_skipped"]
    (profiles["cpu0.25"] / schema.STATUS).write_text("[]")
    got = seed_profiles.priced_in_check(tmp_path, jobs, tag, [_record([[0.165], [0.165], [0.12], [0.12]])], ORDER)
    assert got["probe_skipped"].startswith("RecordError: slow: status.json is list")
