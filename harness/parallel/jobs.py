"""Independent jobs on one launch (parallel.jobs): what a step of them takes, and which ranks
are whose. Torch-free; harness/parallel/strategies.py builds each job's gradient group.

Ranks split into `jobs` equal, contiguous groups (job j holds ranks j*n .. j*n + n - 1, n = world
/ jobs), and each job trains on its own share of the global batch. A step of one job ends when its
slowest rank does; the jobs do not wait for each other within a step. Their combined rate is the
sum of the jobs' rates, so the step that the global batch takes at that rate is

    step = B / sum_j (b_j / t_j)        (B = sum_j b_j; t_j = job j's slowest rank's step, s)

the throughput-equivalent step: with one job it is the slowest rank's, as for any run. Against a
mixed job over the same ranks and the same global batch, (this step) / (the mixed job's step) is
the mixed job's throughput over the sum of the jobs' throughputs: HETHUB's utilization against
each kind's own homogeneous job (arXiv 2405.16256), as results/planner/utilization.py prices it.
"""
from __future__ import annotations


def members(world: int, jobs: int) -> list[list[int]]:
    """Each job's ranks, in order."""
    n = world // jobs
    return [list(range(j * n, (j + 1) * n)) for j in range(jobs)]


def step_s(rank_steps: list[float], jobs: int, shares: list[int] | None = None) -> float:
    """The throughput-equivalent step (seconds) of `jobs` jobs from every rank's step time;
    `shares`: samples per rank (parallel.batch_split), else equal."""
    if jobs <= 1:
        return max(rank_steps)
    shares = shares or [1] * len(rank_steps)
    groups = members(len(rank_steps), jobs)
    rate = sum(sum(shares[r] for r in g) / max(rank_steps[r] for r in g) for g in groups)  # samples / s
    return sum(shares) / rate


def job_steps(rank_steps: list[float], jobs: int) -> list[float]:
    """Each job's own step: its slowest rank's."""
    return [max(rank_steps[r] for r in g) for g in members(len(rank_steps), jobs)]


def pipeline_mesh(world: int, jobs: int) -> list[list[list[int]]]:
    """The (pp, dp, tp) rank layout of `jobs` jobs that are one pipeline each: job j's stages on
    its own contiguous ranks j*pp .. j*pp + pp - 1 (as members() holds them), so the mesh's "dp"
    index is the job and its "pp" index the stage. init_device_mesh's row-major layout would put a
    stage's replicas on contiguous ranks instead (stage 0 on ranks 0..jobs-1): across the jobs."""
    pp = world // jobs
    return [[[j * pp + s] for j in range(jobs)] for s in range(pp)]
