"""The interleaved A/B engine: its statistics on synthetic timings with known answers, and one
real interleaved pair in one process (harness/run/interleave.py, results/stats/interleaved.py)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from results.analysis import calibration, speedups
from results.analysis.run_report import describe
from results.record import schema
from results.stats import estimators, interleaved, paired, stability
from tests.conftest import harness, run_dirs


def _pairs(rng, ratio: float, n: int, drift: float = 0.4, noise: float = 0.05) -> list[float]:
    """n block pairs on a machine whose speed moves +-drift between pairs (shared by both blocks
    of a pair, as interleaving arranges) with per-block noise: baseline / config medians."""
    out = []
    for _ in range(n):
        speed = rng.uniform(1 - drift, 1 + drift)
        a = 0.05 * speed * (1 + noise * rng.standard_normal())
        b = 0.05 / ratio * speed * (1 + noise * rng.standard_normal())
        out.append(a / b)
    return out


def test_block_order_is_abba():
    assert [interleaved.abba_first(i) for i in range(4)] == ["A", "B", "A", "B"]


def test_a_known_ratio_is_recovered_through_machine_drift():
    rng = np.random.default_rng(0)
    s = interleaved.summarise(_pairs(rng, 1.25, 60))
    assert s["ci_lo"] < 1.25 < s["ci_hi"]
    assert s["half_width"] < 0.03 and s["method"] == estimators.HODGES_LEHMANN
    assert estimators.verdict(s["ci_lo"], s["ci_hi"]) == "faster"


def test_the_stop_rule_waits_for_min_pairs_and_the_target():
    rng = np.random.default_rng(1)
    exact = [1.1] * (interleaved.MIN_PAIRS - 1)
    assert not interleaved.precise_enough(exact, 0.03)  # a perfect interval, but too few pairs
    assert interleaved.precise_enough(exact + [1.1], 0.03)
    noisy = _pairs(rng, 1.0, 12, noise=0.3)
    assert not interleaved.precise_enough(noisy, 0.03)


def test_a_a_streams_are_rarely_flagged():
    """200 synthetic A/A trials of 30 pairs each: the rule's false-positive rate stays near the 5%
    a 95% interval allows (the order-statistics interval is exact for the median)."""
    rng = np.random.default_rng(2)
    flagged = 0
    for _ in range(200):
        s = interleaved.summarise(_pairs(rng, 1.0, 30))
        flagged += estimators.verdict(s["ci_lo"], s["ci_hi"]) != "within noise"
    assert flagged / 200 <= 0.08


def test_combining_processes_that_agree_narrows_and_that_disagree_widens():
    agree = interleaved.combine([(1.20, 1.17, 1.23), (1.21, 1.18, 1.24)])
    assert agree["tau"] == 0 and not agree["process_effect"]
    assert 1.17 < agree["ci_lo"] < agree["ratio"] < agree["ci_hi"] < 1.24
    apart = interleaved.combine([(1.50, 1.46, 1.54), (1.85, 1.80, 1.90)])
    assert apart["process_effect"] and apart["tau"] > 0.05
    assert apart["ci_lo"] < 1.50 and apart["ci_hi"] > 1.85  # the interval covers both processes
    assert interleaved.combine([(1.1, math.nan, math.nan)]) is None
    one = interleaved.combine([(1.1, 1.05, 1.15)])
    assert (one["ratio"], one["ci_lo"], one["ci_hi"], one["processes"]) == (1.1, 1.05, 1.15, 1)


def test_processes_apart_in_size_but_one_in_direction_get_that_direction_as_verdict():
    """+amp=bf16 on a Zen 4 (2026-12-04): one process 1.07x, the next 1.30x, each to +-3%. Their
    random-effects interval holds 1; every process called it faster, and the verdict says that,
    on its own basis, while the interval still says how uncertain the size is."""
    rows = pd.DataFrame({"ab_ratio": [1.07, 1.30], "ab_lo": [1.04, 1.26], "ab_hi": [1.10, 1.34], "ab_pairs": [12, 14]})
    got = paired.interleaved_speedup(rows)
    assert got["processes"] == 2 and got["pairs"] == 26
    assert estimators.verdict(got["paired_lo"], got["paired_hi"], got["paired_speedup"]) == "within noise"
    assert got["paired_lo"] < 1 and got["process_direction"] == "faster"
    v = speedups._verdict({**got, "speedup": 1.2, "ci_lo": 1.1, "ci_hi": 1.3}, "+amp=bf16")
    assert v == {"verdict": "faster", "verdict_on": interleaved.EVERY_PROCESS}
    assert speedups.verdict_text({**got, **v}) == "faster in every process"
    assert speedups.verdict_figure({**got, **v}) == (got["paired_speedup"], got["paired_lo"], got["paired_hi"])
    assert interleaved.direction([(0.93, 0.90, 0.96), (0.80, 0.77, 0.83)]) == "slower"
    assert interleaved.verdict([(1.07, 1.04, 1.10), (1.30, 1.26, 1.34)]) == ("faster", interleaved.EVERY_PROCESS)
    assert interleaved.verdict([(1.28, 1.25, 1.31), (1.30, 1.26, 1.34)]) == ("faster", "interleaved")
    assert interleaved.verdict([(1.1, math.nan, math.nan)]) is None
    # no direction: one process within noise, two opposite ways, one without an interval, or one process
    assert interleaved.direction([(1.07, 1.04, 1.10), (1.02, 0.99, 1.05)]) is None
    assert interleaved.direction([(0.93, 0.90, 0.96), (1.30, 1.26, 1.34)]) is None
    assert interleaved.direction([(1.07, 1.04, 1.10), (1.30, math.nan, math.nan)]) is None
    assert interleaved.direction([(1.07, 1.04, 1.10)]) is None
    # where the combined interval already decides, it stays the basis
    tight = paired.interleaved_speedup(rows.assign(ab_ratio=[1.28, 1.30], ab_lo=[1.25, 1.26]))
    assert speedups._verdict({**tight, "speedup": 1.3, "ci_lo": 1.2, "ci_hi": 1.4}, "+amp=bf16") == \
        {"verdict": "faster", "verdict_on": "interleaved"}


def test_every_process_calling_one_direction_is_rare_in_a_a_streams():
    """500 synthetic A/A pairs of processes (30 block pairs each, drift and noise as above): both
    processes call the same direction at about 2 x 0.025^2 = 0.125% (the intersection-union test),
    far below the 5% one process allows; the calibration counts it in its two-process figure."""
    rng = np.random.default_rng(3)
    est = []
    for _ in range(1000):
        s = interleaved.summarise(_pairs(rng, 1.0, 30))
        est.append((s["ratio"], s["ci_lo"], s["ci_hi"]))
    called = sum(interleaved.direction(est[i:i + 2]) is not None for i in range(0, 1000, 2))
    assert called <= 5
    sweep = "calibrate@20261202T000000-1a2b"
    both = [(1.07, 1.04, 1.10), (1.30, 1.26, 1.34), (1.0, 0.98, 1.02), (1.0, 0.98, 1.02)]
    df = pd.DataFrame([{"sweep": sweep, "status": schema.FINISHED, "repeat": i, "workload": "cosmoflow",
                        "size": "tiny", "ab_ratio": r, "ab_lo": lo, "ab_hi": hi} for i, (r, lo, hi) in enumerate(both)])
    cal = calibration.latest(df)
    assert (cal["false_positives"], cal["pairs_of_two"], cal["pair_false_positives"]) == (2, 2, 1)


def test_the_stability_verdict_judges_interleaved_runs_by_their_ratios():
    """Process medians 40 and 56 ms (this VM's drift) do not disturb an interleaved speedup that
    agrees between processes; ratios that disagree beyond their intervals do, named."""
    rows = pd.DataFrame({"ab_ratio": [1.20, 1.21], "ab_lo": [1.17, 1.18], "ab_hi": [1.23, 1.24]})
    runs = [[0.040] * 20, [0.056] * 20]
    assert stability.verdict(rows, runs) == stability.STABLE
    apart = pd.DataFrame({"ab_ratio": [1.50, 1.85], "ab_lo": [1.46, 1.80], "ab_hi": [1.54, 1.90]})
    v = stability.verdict(apart, runs)
    assert v.startswith(stability.DISTURBED) and "differs between processes" in v
    plain = stability.verdict(pd.DataFrame({"cv_step": [0.02, 0.02]}), runs)
    assert plain.startswith(stability.DISTURBED) and "repeat medians differ" in plain


def test_calibration_counts_false_positives_and_combines_two_by_two():
    sweep = "calibrate@20261202T000000-1a2b"
    est = [(1.0, 0.98, 1.02)] * 9 + [(1.04, 1.01, 1.07)]  # one trial's interval excludes 1
    df = pd.DataFrame([{"sweep": sweep, "status": schema.FINISHED, "repeat": i, "workload": "cosmoflow",
                        "size": "tiny", "ab_ratio": r, "ab_lo": lo, "ab_hi": hi, "ab_precision_reached": 1}
                       for i, (r, lo, hi) in enumerate(est)])
    cal = calibration.latest(df)
    assert (cal["trials"], cal["false_positives"], cal["pairs_of_two"]) == (10, 1, 5)
    assert cal["rate"] == pytest.approx(0.1)
    line = calibration.line(cal)
    assert "1 of 10 trials" in line and "ABOVE" in line
    assert calibration.latest(df.assign(sweep="demo@20261202T000000-1a2b")) is None
    assert "none yet" in calibration.line(None)


def test_replication_counts_pairs_of_intervals_holding_each_others_estimate():
    """Valid 95% intervals of one quantity hold each other's estimate in about 83% of pairs
    (calibration.REPLICATION_CAPTURE); intervals half as wide as they should be, in about 52%."""
    rng = np.random.default_rng(11)
    se, mu = 0.02, np.log(1.3)

    def groups(width: float) -> list[dict]:
        x = rng.normal(mu, se, 400)
        return [{"ratio": math.exp(v), "ci_lo": math.exp(v - width * se), "ci_hi": math.exp(v + width * se)} for v in x]
    inside, n = calibration.replication(groups(1.96))
    assert n == 400 * 399 // 2
    assert inside / n == pytest.approx(calibration.REPLICATION_CAPTURE, abs=0.03)
    narrow, _ = calibration.replication(groups(0.98))
    assert narrow / n == pytest.approx(0.52, abs=0.04)
    assert calibration.replication([{"ratio": 1.0, "ci_lo": 0.99, "ci_hi": 1.01}, None,
                                    {"ratio": 1.05, "ci_lo": 1.04, "ci_hi": 1.06}]) == (0, 1)


def test_one_real_interleaved_pair_in_one_process(env, data_root):
    """CosmoFlow tiny, +channels_last against its baseline in one process: both sides' steps are
    recorded, the blocks alternate A B | B A, the ratio of the blocks is the record's figure, the
    CLI prints it, and the baseline side trains exactly as the baseline's own run (same losses)."""
    base = harness(env, "run", "cosmoflow", "--set", "steps=6", "--set", "profile_steps=0", "--no-ingest")
    assert base.returncode == 0, base.stderr[-2000:]
    ref = run_dirs(env)[0]
    p = harness(env, "run", "cosmoflow", "--set", "steps=6", "--set", "toggles.channels_last=true", "--set", "interleave=true",
                "--set", "budget_s=4", "--set", "profile_steps=0", "--set", f"reference_run={ref}", "--no-ingest",
                "--set", "eval_batches=1")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "interleaved in this process with its other side (every toggle off): speedup" in p.stdout
    run = next(d for d in run_dirs(env) if d != ref)
    rec = schema.read_record(run, with_metrics=True)
    s = rec["summary"]
    ab = s["ab"]
    assert s["gate_passed"] == 1 and s["ab_baseline_gate_passed"] == 1
    assert [b[1] for b in ab["blocks"][:4]] == ["A", "B", "A", "B"][:len(ab["blocks"][:4])]
    ratios = [b[2] / b[3] for b in ab["blocks"]]
    assert s["ab_pairs"] == len(ratios) >= 1
    assert s["ab_ratio"] == pytest.approx(estimators.hodges_lehmann_ratio(ratios)["ratio"])  # from the kept blocks
    assert ab["ended_by"] in ("precision", "budget", "steps cap")
    # the baseline side: its losses are the reference run's, step for step
    ref_losses = [m["loss"] for m in schema.read_record(ref, with_metrics=True)["metrics"] if m.get("kind") == "step"]
    k = min(len(ref_losses), len(ab["baseline"]["loss"]))
    assert ab["baseline"]["loss"][:k] == pytest.approx(ref_losses[:k], rel=1e-6)
    steady = [m for m in rec["metrics"] if m.get("kind") == "step" and m.get("phase") == "steady"]
    assert steady and all("block" in m for m in steady)
    # short steps: each of the configuration's blocks opens with exactly one untimed re-warm step
    assert ab["rewarm"] == {"baseline": True, "config": True}
    rewarm = [m["block"] for m in rec["metrics"] if m.get("kind") == "step" and m.get("phase") == "rewarm"]
    assert rewarm == list(range(s["ab_pairs"]))
    assert describe(rec)[1].startswith("interleaved in this process with its other side")
    assert ab["against"] == "every toggle off" and ab["aa"] is False
    # eval_batches=1: the quality is a spot check over one batch of 8 of the 96 validation samples,
    # and the MLPerf log's eval_samples says so; the reference run evaluated all of them
    assert (s["eval_samples"], s["n_val"]) == (8, 96)
    assert schema.read_record(ref)["summary"]["eval_samples"] == 96
    assert '"key": "eval_samples", "value": 8,' in (run / "mlperf.log").read_text()
    json.dumps(s)  # the summary stays plain JSON (no inf)


@pytest.mark.slow  # 2 ranks, ~25 s: make test-all
def test_a_strategy_interleaved_against_ddp_on_two_ranks(env, data_root):
    """FSDP against DDP in one process group under mpiexec (each rank holds both): every rank
    stops at the same block pair, the other side is named, and both sides pass the gate against
    the one-rank baseline."""
    from tests.helpers import mpirun
    base = harness(env, "run", "lm", "--set", "steps=4", "--set", "profile_steps=0", "--no-ingest")
    assert base.returncode == 0, base.stderr[-2000:]
    ref = run_dirs(env)[0]
    p = mpirun(env, 2, "-m", "harness", "run", "lm", "--set", "steps=4", "--set", "parallel.data=fsdp", "--set", "interleave=true",
               "--set", "budget_s=3", "--set", "profile_steps=0", "--set", f"reference_run={ref}", "--no-ingest")
    assert p.returncode == 0, p.stderr[-2000:]
    run = next(d for d in run_dirs(env) if d != ref)
    s = schema.read_record(run)["summary"]
    assert s["ab"]["against"] == "every toggle off, DDP on the same ranks" and not s["ab"]["aa"]
    assert s["gate_passed"] == 1 and s["ab_baseline_gate_passed"] == 1
    assert s["ab_pairs"] == len(s["ab"]["blocks"]) >= 1 and s["world"] == 2
    assert "interleaved in this process with its other side (every toggle off, DDP on the same ranks)" in p.stdout


def test_a_pipeline_split_interleaved_against_the_uniform_one_on_two_ranks(env, data_root):
    """Two pipelines on the same two ranks, each side its own stages and schedule: both sides
    pass the gate against the one-rank run, and the run's schedule record holds exactly the
    configuration side's timed steps (not its warm-up, re-warm steps or the other side's)."""
    from tests.helpers import mpirun
    size = ["--size", "deep-tiny", "--set", "steps=4", "--set", "profile_steps=0", "--no-ingest"]
    base = harness(env, "run", "lm", *size)
    assert base.returncode == 0, base.stderr[-2000:]
    ref = run_dirs(env)[0]
    p = mpirun(env, 2, "-m", "harness", "run", "lm", *size, "--set", "parallel.pp=2", "--set", "parallel.microbatches=4",
               "--set", "parallel.pp_split=6,2", "--set", "against=parallel.pp_split=4,4", "--set", "interleave=true",
               "--set", "budget_s=2", "--set", f"reference_run={ref}")
    assert p.returncode == 0, p.stderr[-2000:]
    s = schema.read_record(next(d for d in run_dirs(env) if d != ref))["summary"]
    assert s["ab"]["against"] == "parallel.pp_split=4,4" and s["gate_passed"] == 1 and s["ab_baseline_gate_passed"] == 1
    pipe = s["pipeline"]
    assert pipe["split"] == [6, 2] and s["ab_pairs"] >= 1
    assert len(pipe["steps"]) == s["ab_pairs"] * s["ab_block_steps_config"]
    assert {e["mb"] for e in pipe["events"] if e["kind"] == "F"} == {0, 1, 2, 3}


def test_a_block_lasts_block_s_and_only_short_steps_are_re_warmed():
    """block_plan: steps per block so a block lasts >= block_s; the untimed re-warm step only
    where a step is short enough for its cost (~1-2 ms measured) to matter."""
    from harness.run.interleave import REWARM_BELOW_S, block_plan
    assert block_plan(0.06, 0.2) == (4, True)            # CosmoFlow tiny's baseline
    assert block_plan(0.013, 0.2) == (16, True)          # LM tiny's
    assert block_plan(1.6, 0.2) == (1, False)            # CosmoFlow tiny +amp=bf16 on an emulating CPU
    assert block_plan(REWARM_BELOW_S, 0.2) == (1, False)
    assert block_plan(REWARM_BELOW_S * 0.99, 0.2) == (1, True)
    assert block_plan(0.3, 1.0) == (4, True)
    assert block_plan(0.0, 0.2)[0] >= 1                 # a zero warm-up time never divides by zero


def test_the_other_side_is_the_toggles_off_config_or_what_against_says():
    from harness.config.run_config import RunConfig, UsageError
    from harness.run import interleave
    cfg = RunConfig(workload="cosmoflow", interleave=True).with_overrides(["toggles.channels_last=true"])
    assert interleave.baseline_of(cfg).toggles.enabled() == [] and not interleave.baseline_of(cfg).interleave
    assert interleave.baseline_of(cfg).variant_hash() == RunConfig(workload="cosmoflow").variant_hash()
    par = RunConfig(workload="lm", ranks=2).with_overrides(["parallel.data=fsdp", "interleave=true"])
    assert interleave.baseline_of(par, 2).parallel.data == "ddp"
    split = RunConfig(workload="lm", ranks=2, batch_size=8).with_overrides(
        ["parallel.batch_split=6,2", "against=parallel.batch_split=4,4"])
    assert interleave.baseline_of(split, 2).parallel.batch_split == "4,4"
    assert interleave.baseline_of(split, 2).variant_hash() != split.variant_hash()
    assert split.variant_hash() == RunConfig(workload="lm", ranks=2, batch_size=8).with_overrides(
        ["parallel.batch_split=6,2"]).variant_hash()  # how it was sampled is a label
    for bad in ("nokey", "toggles.nope=1", "sweep=x"):
        with pytest.raises(UsageError, match="against"):
            cfg.with_overrides([f"against={bad}"])
    for bad in ("precision=0", "budget_s=-1", "block_s=nan"):
        with pytest.raises(UsageError, match=bad.split("=")[0]):
            cfg.with_overrides([bad])
    pp = RunConfig(workload="lm", ranks=2).with_overrides(["parallel.pp=2", "interleave=true"])
    assert interleave.why_not(pp) is None  # pipelines interleave too (each side its own stages)
    assert "time-to-train" in interleave.why_not(RunConfig(workload="cosmoflow", mode="ttt", interleave=True))


def test_the_warning_names_the_disturbing_cause_not_the_noise_beside_it():
    v = stability.verdict(pd.DataFrame({"cv_step": [0.21, 0.2], "ab_ratio": [1.50, 2.00], "ab_lo": [1.43, 1.90],
                                        "ab_hi": [1.56, 2.14]}))
    line = stability.warning(pd.DataFrame({"config": ["+channels_last"], "stability": [v]}))
    assert "the speedup differs between processes" in line and "step times vary" not in line
    # both processes said "faster": the size moved, the verdict did not, and the warning says so
    assert v.endswith("; its verdict held in every process (faster)"), v
    assert "their sizes moved between processes but every verdict held in each" in line
    assert "can't be trusted" not in line


def test_a_process_effect_that_splits_the_verdict_is_not_trusted():
    """0.95x [0.93, 0.97] "slower" in one process, 1.08x [1.05, 1.11] "faster" in the next: no verdict
    held, so the sweep's warning says the speedups can't be trusted; so it does when load is a cause
    beside a size-only process effect."""
    split = stability.verdict(pd.DataFrame({"ab_ratio": [0.95, 1.08], "ab_lo": [0.93, 1.05], "ab_hi": [0.97, 1.11]}))
    assert split.startswith(stability.DISTURBED) and "held in every process" not in split
    line = stability.warning(pd.DataFrame({"config": ["+dali"], "stability": [split]}))
    assert line.endswith("these speedups can't be trusted; rerun on a quiet machine")
    held = stability.verdict(pd.DataFrame({"ab_ratio": [0.042, 0.05], "ab_lo": [0.040, 0.045],
                                           "ab_hi": [0.044, 0.07]}))
    assert held.endswith("its verdict held in every process (slower)")
    loaded = stability.verdict(pd.DataFrame({"ab_ratio": [0.042, 0.05], "ab_lo": [0.040, 0.045], "ab_hi": [0.044, 0.07],
                                             "others_cpu_frac": [0.45, 0.0], "cpus": [2, 2]}))
    both = stability.warning(pd.DataFrame({"config": ["+amp=bf16", "+dali"], "stability": [held, loaded]}))
    assert "can't be trusted" in both
