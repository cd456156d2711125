"""Pipeline parallel (harness/parallel/pipeline.py) with real mpiexec (and torchrun once) on gloo: every
schedule's first losses equal the one-rank run of the same global batch (the correctness gate),
every rank's sends, receives and all-reduces equal the analytic volume, the record holds every
microbatch's forward and backward, and the bubble arithmetic (results/analysis/bubble.py) is checked
on schedules drawn by hand."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.run_config import RunConfig
from harness.config.errors import UsageError
from results.analysis import bubble as pipe
from results.record import schema
from tests.conftest import REPO, harness, run_dirs, tiny_dataset
from harness.parallel.dist import mpiexec

MPIEXEC = mpiexec()  # harness/parallel/dist.py: the one lookup
STEPS = ["--set", "steps=3", "--set", "warmup_steps=1", "--set", "profile_steps=0", "--no-ingest"]


# -- the bubble arithmetic -------------------------------------------------------------------------
def test_theory_is_p_minus_1_over_m_plus_p_minus_1():
    assert [round(pipe.theory(2, m), 2) for m in (1, 2, 4, 8)] == [0.50, 0.33, 0.20, 0.11]
    assert pipe.theory(4, 8) == pytest.approx(3 / 11)
    assert pipe.theory(2, 4, v=2) == pytest.approx(1 / 9)  # interleaved: (p-1)/(v*m+p-1)


def _gpipe_events(p: int, m: int, f: list[float], b: list[float], gap: float = 0.0) -> list[dict]:
    """A GPipe step drawn by hand: stage s runs forward of microbatch i when stage s-1 has
    finished it and s has finished i-1; backwards in reverse stage order; `gap` per hop."""
    fend = [[0.0] * m for _ in range(p)]
    events = []
    for s in range(p):
        for i in range(m):
            start = max(fend[s - 1][i] + gap if s else 0.0, fend[s][i - 1] if i else 0.0)
            fend[s][i] = start + f[s]
            events.append(dict(step=5, stage=s, rank=s, kind="F", mb=i, t0=start, t1=start + f[s]))
    t_last = max(fend[p - 1])
    bend = [[0.0] * m for _ in range(p)]
    for s in reversed(range(p)):
        for i in range(m):
            start = max(bend[s + 1][i] + gap if s < p - 1 else t_last, bend[s][i - 1] if i else 0.0)
            bend[s][i] = start + b[s]
            events.append(dict(step=5, stage=s, rank=s, kind="B", mb=i, t0=start, t1=start + b[s]))
    return events


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_equal_stages_measure_the_theory_and_the_prediction_matches(m):
    built = {"schedule": "gpipe", "pp": 2, "stages": 2, "virtual": 1, "microbatches": m, "split": [1, 1]}
    rec = pipe.analyse(built, _gpipe_events(2, m, [1.0, 1.0], [2.0, 2.0]))
    assert rec["bubble_measured"] == pytest.approx(pipe.theory(2, m))
    assert rec["bubble_predicted"] == pytest.approx(pipe.theory(2, m))
    assert rec["unexplained_s"] == pytest.approx(0.0) and rec["comm_overhead_s"] == pytest.approx(0.0)
    assert rec["window_s"] == pytest.approx((m + 1) * 3.0) and rec["bubble_replay"] == pytest.approx(pipe.theory(2, m))


def test_a_heavier_last_stage_is_predicted_and_hop_time_is_left_unexplained():
    built = {"schedule": "gpipe", "pp": 2, "stages": 2, "virtual": 1, "microbatches": 4, "split": [1, 1]}
    rec = pipe.analyse(built, _gpipe_events(2, 4, [1.0, 2.0], [2.0, 3.0], gap=0.25))
    # stage 1 is the bottleneck: window = (1 + 4*2) + (3*4 + 2) + 2 hops of 0.25 (one forward, one back)
    assert rec["window_s"] == pytest.approx(9 + 14 + 0.5)
    assert rec["predicted_window_s"] == pytest.approx(23.0)
    assert rec["unexplained_s"] == pytest.approx(0.5)
    # replayed with the measured durations and free sends: the hops are what is left
    assert rec["steps"][0]["replay_window_s"] == pytest.approx(23.0) and rec["comm_overhead_s"] == pytest.approx(0.5)
    assert rec["bubble_measured"] > pipe.theory(2, 4)  # unequal stages idle the lighter one longer
    rows = pipe.timeline(rec)
    assert len(rows) == 16 and min(r["start_ms"] for r in rows) == 0.0


def test_each_stage_has_its_cpu_seconds_beside_its_wall_seconds_where_the_events_carry_them():
    """The medians per microbatch in CPU seconds (fwd_cpu_s, bwd_cpu_s) from each event's cpu_s,
    as the wall ones from t1 - t0; a record whose events have none (before 2026-12-07) gets none."""
    built = {"schedule": "gpipe", "pp": 2, "stages": 2, "virtual": 1, "microbatches": 4, "split": [1, 1]}
    events = _gpipe_events(2, 4, [1.0, 2.0], [2.0, 3.0])
    assert "fwd_cpu_s" not in pipe.analyse(built, events)["stage_times"]["0"]
    for e in events:  # held to half a CPU: each operation ran half its wall seconds on the CPU
        e["cpu_s"] = (e["t1"] - e["t0"]) / 2
    times = pipe.analyse(built, events)["stage_times"]
    assert times["0"] == pytest.approx({"fwd_s": 1.0, "bwd_s": 2.0, "fwd_cpu_s": 0.5, "bwd_cpu_s": 1.0})
    assert times["1"] == pytest.approx({"fwd_s": 2.0, "bwd_s": 3.0, "fwd_cpu_s": 1.0, "bwd_cpu_s": 1.5})


def test_balanced_split_moves_blocks_off_the_stage_with_the_head():
    # 3 + 3 blocks of 10 ms; the last stage also runs a head + loss worth 25 ms
    times = {"0": {"fwd_s": 0.010, "bwd_s": 0.020}, "1": {"fwd_s": 0.020, "bwd_s": 0.035}}
    plan = pipe.balanced_split([3, 3], times)
    assert plan["block_s"] == pytest.approx(0.010) and plan["last_stage_extra_s"] == pytest.approx(0.025)
    assert plan["split"] == [4, 2]  # stage times 40 vs 45 ms instead of 30 vs 55
    assert plan["predicted_stage_s"] == pytest.approx([0.040, 0.045])
    # a middle stage gives the block time without extras
    times3 = {"0": {"fwd_s": 0.02, "bwd_s": 0.0}, "1": {"fwd_s": 0.02, "bwd_s": 0.0}, "2": {"fwd_s": 0.05, "bwd_s": 0.0}}
    plan3 = pipe.balanced_split([2, 2, 2], times3)  # head 30 ms: the last stage keeps one block
    assert plan3["split"][-1] == 1 and max(plan3["predicted_stage_s"]) == pytest.approx(0.040)


# -- configuration ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sets, fragment", [
    ({"pp": 2, "microbatches": 0}, "parallel.microbatches must be an integer >= 1; got 0"),
    ({"pp": 2, "pp_schedule": "zb"}, "parallel.pp_schedule must be one of gpipe, 1f1b, interleaved_1f1b; got 'zb'"),
    ({"pp": 2, "microbatches": 1}, "1f1b needs microbatches >= pp"),
    ({"pp": 2, "pp_split": "1,0"}, "has an empty stage"),
    ({"pp": 2, "pp_split": "2,1"}, "parallel.pp_split 2,1 sums to 3; lm tiny has 2 blocks"),
    ({"pp": 2, "pp_split": "a,b"}, "parallel.pp_split must be comma-separated block counts"),
    ({"pp": 2, "pp_split": "1,1,0"}, "parallel.pp_split has 3 stages; pp=2 x pp_virtual=1 needs 2"),
    ({"pp": 2, "pp_virtual": 2}, "interleaved_1f1b needs parallel.pp_virtual >= 2"),
    ({"pp": 2, "pp_virtual": 2, "pp_schedule": "interleaved_1f1b"}, "4 stages but lm tiny has 2 blocks"),
    ({"microbatches": 8}, "parallel.microbatches needs parallel.pp > 1"),
    ({"pp": 2, "tp": 2, "sp": True}, "parallel.pp with parallel.sp: not built yet"),
    ({"pp": 2, "data": "zero2"}, "parallel.data=zero2 with parallel.pp: not built yet"),
    ({"pp": 2, "data": "zero1"}, "parallel.data=zero1 with parallel.pp: not built yet"),
    ({"pp": 2, "batch_split": "3,1", "data": "fsdp"}, "parallel.batch_split with parallel.pp (unequal pipeline "
                                                       "replicas) composes with parallel.data=ddp"),
    ({"microbatch_split": "2,2"}, "parallel.microbatch_split needs parallel.batch_split"),
    ({"batch_split": "3,1", "microbatch_split": "2,1", "data": "fsdp"},
     "parallel.microbatch_split without a pipeline (gradient accumulation) composes with plain parallel.data=ddp"),
    ({"pp": 2, "batch_split": "3,1", "microbatch_split": "3,x"}, "must be comma-separated microbatch counts"),
    ({"pp": 2, "batch_split": "3,1", "microbatch_split": "3,0"}, "gives a replica no microbatches"),
])
def test_bad_pipeline_sections_name_the_problem(sets, fragment):
    with pytest.raises(UsageError) as e:
        RunConfig.from_dict({"workload": "lm", "parallel": sets})
    assert fragment in str(e.value)


def test_labels_and_old_variant_ids():
    p = RunConfig.from_dict({"workload": "lm", "parallel": {"pp": 2, "microbatches": 8, "pp_schedule": "gpipe"}})
    assert p.parallel.label() == "pp2-gpipe-m8"
    fs = RunConfig.from_dict({"workload": "lm", "size": "small", "parallel": {
        "data": "fsdp", "pp": 2, "pp_virtual": 3, "pp_schedule": "interleaved_1f1b", "microbatches": 4}})
    assert fs.parallel.label() == "fsdp+pp2v3-interleaved_1f1b-m4"
    # a tp run recorded before the pipeline keys existed keeps its variant id
    tp = RunConfig.from_dict({"workload": "lm", "parallel": {"tp": 2}})
    assert set(tp.parallel.hash_dict()) == {"data", "tp", "sp"}
    un = RunConfig.from_dict({"workload": "lm", "parallel": {"pp": 2, "batch_split": "17,7",
                                                             "microbatch_split": "17,7"}})
    assert un.parallel.label() == "ddp-split17.7+pp2-1f1b-m17.7"


@pytest.mark.parametrize("args, fragment", [
    (("--set", "parallel.pp=3", "--set", "ranks=2"), "parallel.pp=3 does not divide ranks=2; valid: 1, 2"),
    (("--set", "parallel.pp=2", "--set", "parallel.pp_split=2,1"), "sums to 3; lm tiny has 2 blocks"),
    (("--set", "parallel.pp=2", "--set", "parallel.pp_split=2,0"), "has an empty stage"),
    (("--set", "parallel.pp=2", "--set", "parallel.microbatches=0"), "parallel.microbatches must be an integer >= 1"),
    (("--set", "parallel.pp=2", "--set", "parallel.pp_schedule=zerobubble"), "must be one of gpipe, 1f1b"),
    (("--set", "parallel.pp=2", "--set", "parallel.microbatches=3", "--set", "ranks=2"),
     "parallel.microbatches=3 does not divide the per-replica batch 16"),
    (("--set", "parallel.pp=2", "--set", "parallel.batch_split=12,4", "--set", "parallel.microbatch_split=5,2",
      "--set", "ranks=4"), "pipeline replica 0: 5 microbatches do not divide its 12 samples"),
    (("--set", "parallel.pp=2", "--set", "parallel.batch_split=12,4", "--set", "parallel.microbatch_split=4,1",
      "--set", "ranks=4"), "pipeline replica 1: parallel.pp_schedule=1f1b needs microbatches >= pp=2; got 1"),
    (("--set", "parallel.pp=2", "--set", "parallel.batch_split=12,4", "--set", "parallel.microbatch_split=4",
      "--set", "ranks=4"), "parallel.microbatch_split '4' needs 2 entries"),
])
def test_bad_pipeline_input_is_one_line_exit_2(env, args, fragment):
    p = harness(env, "run", "lm", *args, timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
    assert fragment in p.stderr
    assert not run_dirs(env)


# -- real ranks ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def world(tmp_path_factory, data_root):
    """Results folder and the one-rank reference runs of LM tiny and LM small (batch 8)."""
    tiny_dataset(data_root, "lm")  # LM small's dataset is written by its first run
    results = tmp_path_factory.mktemp("pipe")
    env = {**os.environ, "HARNESS_RESULTS": str(results), "HARNESS_DATA": str(data_root), "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    refs = {}
    for size, extra in (("tiny", ()), ("small", ("--set", "batch_size=8"))):
        before = set(run_dirs(env))
        p = harness(env, "run", "lm", "--size", size, *STEPS, *extra)
        assert p.returncode == 0, p.stderr[-2000:]
        (refs[size],) = [d for d in run_dirs(env) if d not in before]
    return env, refs


def _launch(env, cmd_prefix, size_args, sets, ref) -> dict:
    before = set(run_dirs(env))
    args = [*cmd_prefix, "-m", "harness", "run", "lm", *size_args, *STEPS, "--set", f"reference_run={ref}",
            *[a for s in sets for a in ("--set", s)]]
    p = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (d,) = [d for d in run_dirs(env) if d not in before]
    return schema.read_record(d, with_metrics=True)


def _check_run(rec: dict, ref: Path, world: int, pp: int, m: int, stages: int) -> None:
    assert rec["status"]["status"] == "finished", rec["status"]  # the gate passed
    want = [m_["loss"] for m_ in schema.read_metrics(ref) if m_["kind"] == "step"]
    assert [m_["loss"] for m_ in rec["metrics"] if m_["kind"] == "step"] == pytest.approx(want, rel=1e-5)
    s = rec["summary"]
    assert s["quality"] == pytest.approx(schema.read_record(ref)["summary"]["quality"], rel=1e-5)  # eval too
    acc = s["parallel"]
    assert len(acc["measured_per_rank"]) == world
    for measured, analytic in zip(acc["measured_per_rank"], acc["analytic_per_rank"]):
        assert {k: v["bytes"] for k, v in measured.items()} == pytest.approx(analytic, rel=0.01)
        assert analytic["send_recv"] > 0 and analytic["all_reduce"] > 0  # activations; tied embedding
    p = s["pipeline"]
    assert p["pp"] == pp and p["microbatches"] == m and p["stages"] == stages
    steady = {e["step"] for e in p["events"]}
    assert steady == {1, 2, 3}  # the 3 timed steps only: warm-up (step 0) left out
    for kind in ("F", "B"):  # every microbatch on every stage, every step
        got = sorted((e["step"], e["stage"], e["mb"]) for e in p["events"] if e["kind"] == kind)
        assert got == sorted((st, sg, mb) for st in steady for sg in range(stages) for mb in range(m))
    assert all(e["t1"] >= e["t0"] and e["cpu_s"] >= 0 for e in p["events"])
    assert all(t["fwd_cpu_s"] > 0 and t["bwd_cpu_s"] > 0 for t in p["stage_times"].values())
    assert 0 < p["bubble_measured"] < 1 and p["bubble_theory"] == pytest.approx(pipe.theory(pp, m, stages // pp))
    assert s["pp_bubble"] == p["bubble_measured"]


@pytest.mark.slow
@pytest.mark.parametrize("ranks, sets", [
    (2, ["parallel.pp=2", "parallel.microbatches=2"]),
    (4, ["parallel.pp=2", "parallel.microbatches=2", "parallel.data=fsdp"]),
    (4, ["parallel.pp=2", "parallel.microbatches=4", "parallel.pp_schedule=gpipe"]),
])
def test_schedules_match_one_rank_under_mpiexec(world, ranks, sets):
    env, refs = world
    rec = _launch(env, [MPIEXEC, "-n", str(ranks), sys.executable], (), sets, refs["tiny"])
    m = int(next(s for s in sets if "microbatches" in s).split("=")[1])
    _check_run(rec, refs["tiny"], ranks, pp=2, m=m, stages=2)
    if ranks == 4:  # dp x pp: each stage's gradients reduced over its 2 data-parallel ranks too
        analytic = rec["summary"]["parallel"]["analytic_per_step"]
        if "parallel.data=fsdp" in sets:
            assert analytic["all_gather"] > 0 and analytic["reduce_scatter"] > 0
        else:  # replicate: the stage's gradients, beyond the tied embedding's (vocab x d_model fp32)
            assert analytic["all_reduce"] > 64 * 64 * 4


@pytest.mark.slow
def test_interleaved_1f1b_and_an_uneven_split_under_torchrun(world):
    """LM small (6 blocks) as 4 stages on 2 ranks (rank 0: stages 0 and 2), split 2,1,2,1."""
    env, refs = world
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2",
                "--master_port", str(29700 + os.getpid() % 200)]
    rec = _launch(env, torchrun, ("--size", "small", "--set", "batch_size=8"),
                  ["parallel.pp=2", "parallel.pp_virtual=2", "parallel.pp_schedule=interleaved_1f1b",
                   "parallel.microbatches=4", "parallel.pp_split=2,1,2,1"], refs["small"])
    _check_run(rec, refs["small"], 2, pp=2, m=4, stages=4)
    assert rec["summary"]["pipeline"]["split"] == [2, 1, 2, 1] and rec["summary"]["launcher"] == "RANK"


def test_unequal_pipeline_replicas_match_one_rank_under_mpiexec(world):
    """Two pipeline replicas of unequal shares and microbatch counts (the planner's data parallel
    over each device kind's own pipeline, results/planner/kind_jobs.py): replica 0 (ranks 0, 1)
    12 samples in 3 microbatches of 4, replica 1 (ranks 2, 3) 4 in 2 of 2. The update must be
    the one-rank run's: each replica's loss weighted by its share, and the 1/M of the mean applied
    before the replicas' all-reduce (torch's scale_grads divides after it, which left the replicas
    apart: losses off by 5e-5 to 2e-4 before the fix). 4 ranks but ~8 s: not marked slow, so CI
    checks it."""
    env, refs = world
    rec = _launch(env, [MPIEXEC, "-n", "4", sys.executable], (), [
        "parallel.pp=2", "parallel.batch_split=12,4", "parallel.microbatch_split=3,2"], refs["tiny"])
    _check_run(rec, refs["tiny"], 4, pp=2, m=3, stages=2)  # the record's timeline: replica 0's
    assert rec["summary"]["parallel"]["strategy"] == "ddp-split12.4+pp2-1f1b-m3.2"
    # each replica's activations cross its boundary once per sample: 12 and 4 samples' worth
    sends = [r["send_recv"] for r in rec["summary"]["parallel"]["analytic_per_rank"]]
    assert sends[0] == sends[1] == 3 * sends[2] == 3 * sends[3]
    windows = rec["summary"]["pipeline"]["replica_windows_s"]  # each replica's own pipeline, per step
    assert len(windows) == 2 and all(w > 0 for w in windows)


def test_the_bubble_table_reads_m_as_the_recorded_replica_ran_it():
    """Unequal replicas record replica 0's timeline: the table's M is microbatch_split's first entry,
    not parallel.microbatches (left at its default by a kinds plan's launch)."""
    import pandas as pd
    runs = pd.DataFrame({"run_id": ["a", "b"], "workload": "lm", "size": "small", "device": "cpu",
                         "status": "finished", "pp_bubble": [0.1, 0.2], "pp_bubble_theory": [0.08, 0.06],
                         "pp_window_s": [1.0, 1.0], "parallel.pp": ["2", "2"], "parallel.pp_virtual": ["1", "1"],
                         "parallel.microbatches": ["4", "4"],
                         "parallel.microbatch_split": ["", "17,7"]})
    assert pipe.bubble_table(runs).set_index("run_id")["microbatches"].to_dict() == {"a": 4, "b": 17}
