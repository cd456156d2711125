"""parallel.jobs (harness/parallel/jobs.py): independent jobs on one launch. The step rule on
known figures, the section's errors, and a real 4-rank run under mpiexec whose two jobs train
apart (each its own gradient all-reduce), interleaved against the mixed job on the same ranks."""
from __future__ import annotations

import pytest

from harness.parallel import jobs
from results.record import schema
from tests.conftest import harness, run_dirs, tiny_dataset
from tests.helpers import mpirun
from tests.test_parallel import STEPS, _only_new


def test_one_job_is_the_slowest_rank_and_equal_jobs_the_harmonic_mean():
    assert jobs.step_s([1.0, 3.0, 2.0, 2.0], 1) == 3.0
    # two jobs of equal batch: job 0's step 2 s (its slowest rank), job 1's 4 s -> 2 / (1/2 + 1/4)
    assert jobs.step_s([2.0, 1.0, 4.0, 3.0], 2) == pytest.approx(2 / (1 / 2 + 1 / 4))
    assert jobs.job_steps([2.0, 1.0, 4.0, 3.0], 2) == [2.0, 4.0]
    assert jobs.members(6, 3) == [[0, 1], [2, 3], [4, 5]]


def test_unequal_jobs_weigh_each_by_its_samples():
    # job 0 holds 16 samples at 4 s a step (4 samples/s), job 1 holds 8 at 8 s (1/s): 24 at 5/s
    assert jobs.step_s([4.0, 4.0, 8.0, 8.0], 2, [8, 8, 4, 4]) == pytest.approx(24 / 5)


def test_against_a_mixed_job_the_ratio_is_the_seeds_utilization():
    """Mixed job: 24 samples in 4.5 s. Each kind's own job on half the batch: 12 in 3 s and 12
    in 6 s, 6 samples/s together; the mixed job's 5.33/s is 0.889 of it (HETHUB's bound)."""
    mixed, own = 4.5, jobs.step_s([3.0, 3.0, 6.0, 6.0], 2, [6, 6, 6, 6])
    assert own / mixed == pytest.approx((24 / 4.5) / (12 / 3 + 12 / 6))


@pytest.mark.parametrize("sets, fragment", [
    (["parallel.jobs=0"], "parallel.jobs must be an integer >= 1"),
    (["parallel.jobs=2", "parallel.data=fsdp", "ranks=2"], "parallel.jobs=2 composes with plain parallel.data=ddp"),
    (["parallel.jobs=3", "ranks=2"], "parallel.jobs=3 does not divide ranks=2; valid: 1, 2"),
    (["parallel.jobs=2"], "parallel.jobs=2 needs more than one rank"),
    (["parallel.jobs=2", "parallel.pp=2", "ranks=2"], "each job is one pipeline, so pp must be ranks / jobs = 1"),
    (["parallel.jobs=2", "parallel.tp=2", "ranks=4"], "or with one pipeline a job (parallel.pp) so far"),
])
def test_bad_jobs_is_one_line_exit_2(env, sets, fragment):
    p = harness(env, "run", "lm", *[a for s in sets for a in ("--set", s)], "--no-ingest", timeout=120)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0, p.stderr
    assert fragment in p.stderr


def test_one_pipeline_a_job_holds_its_own_contiguous_ranks():
    """Mesh (pp, dp, tp) with dp = the job: job j's stages on ranks j*pp .., as members() has them;
    init_device_mesh's row-major layout would put stage 0 of every job on ranks 0 .. jobs-1."""
    assert jobs.pipeline_mesh(4, 2) == [[[0], [2]], [[1], [3]]]
    mesh = jobs.pipeline_mesh(6, 2)  # 2 jobs of 3 stages
    for j, ranks in enumerate(jobs.members(6, 2)):
        assert [mesh[s][j][0] for s in range(3)] == ranks


def test_the_label_names_the_jobs():
    from harness.config.parallel_config import Parallel
    assert Parallel(jobs=2, batch_split="6,6,6,6").label() == "jobs2xddp-split6.6.6.6"
    assert Parallel(jobs=2).label() == "jobs2xddp"


def _reference_losses(env, data_root) -> list[float]:
    """One rank's losses on LM tiny: what a job's first step matches and its later steps do not."""
    tiny_dataset(data_root, "lm")
    p = harness(env, "run", "lm", *STEPS)
    assert p.returncode == 0, p.stderr
    (ref_dir,) = run_dirs(env)
    return [m["loss"] for m in schema.read_metrics(ref_dir) if m["kind"] == "step"]


def _four_ranks(env, *sets: str) -> dict:
    """A finished 4-rank LM tiny run under mpiexec with these --set overrides: its record."""
    before = set(run_dirs(env))
    p = mpirun(env, 4, "-m", "harness", "run", "lm", *STEPS, *[a for s in sets for a in ("--set", s)], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    rec = schema.read_record(_only_new(env, before), with_metrics=True)
    assert rec["status"]["status"] == "finished", rec["status"]
    return rec


def _trains_apart(rec: dict, ref: list[float], shares: list[int] | None) -> None:
    """The jobs' record: the first step's loss is the global batch's, later ones not one world's
    update; each job's step its slowest rank's, the step their throughput-equivalent."""
    steps = [m for m in rec["metrics"] if m["kind"] == "step"]
    assert steps[0]["loss"] == pytest.approx(ref[0], rel=1e-5)
    assert all(abs(m["loss"] / r - 1) > 1e-4 for m, r in zip(steps[1:], ref[1:]))
    for m in steps:
        assert m["job_step_s"] == [max(m["rank_step_s"][:2]), max(m["rank_step_s"][2:])]
        assert m["step_s"] == pytest.approx(jobs.step_s(m["rank_step_s"], 2, shares))


def _interleaved_against_jobs(rec: dict, against: str) -> None:
    """The mixed side interleaved against the jobs: each job's own step beside the combined one."""
    ab = rec["summary"]["ab"]
    assert ab["against"] == against and not ab["aa"]
    assert len(ab["blocks"]) >= 2 and 0 < rec["summary"]["ab_ratio"] < 10
    base = ab["baseline"]
    assert len(base["job_step_s"]) == len(base["step_s"])
    for both, step in zip(base["job_step_s"], base["step_s"]):
        assert step == pytest.approx(2 / (1 / both[0] + 1 / both[1]))


@pytest.mark.slow
def test_two_jobs_on_four_ranks_train_apart_and_interleave_against_the_mixed_job(env, data_root):
    """Job 0 (ranks 0, 1: 6 and 2 samples) and job 1 (ranks 2, 3: 4 and 4). The first step's loss
    is the global batch's (same initial weights, the reported loss is the mean of the jobs' batch
    means); from then on it is not the one-rank run's, as it would be if the gradients were
    averaged over all four ranks. Each job's all-reduce moves its replica's gradients. Then the
    mixed job (one DDP over the four) interleaved against the jobs: a seed-utilization figure."""
    ref = _reference_losses(env, data_root)
    rec = _four_ranks(env, "parallel.jobs=2", "parallel.batch_split=6,2,4,4")
    _trains_apart(rec, ref, [6, 2, 4, 4])
    acc = rec["summary"]["parallel"]
    assert acc["strategy"] == "jobs2xddp-split6.2.4.4"
    assert acc["measured_per_step"]["all_reduce"]["bytes"] == pytest.approx(acc["analytic_per_step"]["all_reduce"],
                                                                            rel=0.01)
    against = "parallel.jobs=2;parallel.batch_split=4,4,4,4"
    rec = _four_ranks(env, "parallel.batch_split=5,5,3,3", "interleave=true", "budget_s=4", f"against={against}")
    _interleaved_against_jobs(rec, against)
    # both sides accumulating their gradients (the planner's data parallel at a large batch,
    # harness/bench/planner_seed.py): each side's microbatches its own, in one process group
    against = "parallel.jobs=2;parallel.batch_split=4,4,4,4;parallel.microbatch_split=2,2,1,1"
    rec = _four_ranks(env, "parallel.batch_split=5,5,3,3", "parallel.microbatch_split=3,2,1,1", "interleave=true",
                      "budget_s=4", f"against={against}")
    _interleaved_against_jobs(rec, against)
    assert rec["summary"]["parallel"]["strategy"] == "ddp-split5.5.3.3-m3.2.1.1"


@pytest.mark.slow
def test_two_pipelines_on_four_ranks_train_apart_and_interleave_against_the_mixed_pipelines(env, data_root):
    """Job 0 a 2-stage pipeline on ranks 0, 1 and job 1 on ranks 2, 3, each on half the batch:
    the first step's loss is the global batch's, later ones are not the one-rank run's (no
    gradient passes between the jobs: each rank's all-reduce is the tied embedding's alone). Then
    two mixed pipelines over the same ranks (stage 0 on ranks 0, 1) interleaved against the jobs."""
    ref = _reference_losses(env, data_root)
    pipe = ["parallel.pp=2", "parallel.microbatches=2"]
    rec = _four_ranks(env, *pipe, "parallel.jobs=2")
    _trains_apart(rec, ref, None)
    acc = rec["summary"]["parallel"]
    for measured, analytic in zip(acc["measured_per_rank"], acc["analytic_per_rank"]):
        assert {k: v["bytes"] for k, v in measured.items()} == pytest.approx(analytic, rel=0.01)
    tied = acc["analytic_per_rank"][0]["all_reduce"]  # the embedding's gradient, on a job's two ranks
    assert tied > 0 and all(a["all_reduce"] == tied for a in acc["analytic_per_rank"])
    pipeline = rec["summary"]["pipeline"]  # rank 0's job's timeline: its stages on ranks 0 and 1
    assert pipeline["pp"] == 2 and {e["rank"] for e in pipeline["events"]} == {0, 1}
    rec = _four_ranks(env, *pipe, "interleave=true", "budget_s=4", "against=parallel.jobs=2")
    _interleaved_against_jobs(rec, "parallel.jobs=2")
