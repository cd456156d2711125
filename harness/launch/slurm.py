"""The `slurm` scheduler (harness/launch/backend.py): `python -m harness submit SWEEP --site
SITE [--dry-run] [--rerun-failed] [--wait]` (make submit) with a site file whose scheduler is
slurm runs a sweep as Slurm jobs.

  phase 1  job array: the baseline cells (one task per cell)
  phase 2  job array: every other cell, --dependency=afterany on phase 1, so each finds its
           repeat's baseline record for the correctness gate, as in a local sweep
  ingest   one job, --dependency=afterany on all arrays: ingests every record into MLflow
           (failed and killed ones too) and prints the sweep summary

Arrays longer than the cluster's MaxArraySize are split (cell = array task id + the array's offset).
Every task execs the harness (or srun for multi-rank cells), so --signal=B:TERM@N reaches the
run: a time limit or scancel leaves a `killed` record with the samples so far.
A rejected submission cancels whatever this call already submitted, then exits 2 with
Slurm's own message.
"""
from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from harness.config.errors import UsageError
from harness.launch.backend import Job, SubmitError, SweepPlan, safe
from harness.launch.site import Site
from results.record.paths import REPO_ROOT


# -- arrays -----------------------------------------------------------------------------------------
def chunks(indices: list[int], max_array: int) -> list[tuple[int, list[int]]]:
    """(offset, array task ids) groups with every task id < max_array (Slurm's MaxArraySize)."""
    groups: dict[int, list[int]] = {}
    for i in indices:
        groups.setdefault(i // max_array * max_array, []).append(i)
    return [(off, [i - off for i in ids]) for off, ids in sorted(groups.items())]


def array_spec(ids: list[int]) -> str:
    """Compact --array value: runs of consecutive ids as a-b."""
    parts, start = [], None
    for a, b in zip(ids, ids[1:] + [None]):
        start = a if start is None else start
        if b != a + 1:
            parts.append(f"{start}-{a}" if a != start else f"{a}")
            start = None
    return ",".join(parts)


# -- rendering ------------------------------------------------------------------------------------
def _env_lines(site: Site, results: Path) -> list[str]:
    env = {"HARNESS_RESULTS": str(results), "PYTHONUNBUFFERED": "1"}
    if site.data_dir:
        env["HARNESS_DATA"] = site.data_dir
    if site.stage_dir:
        env["HARNESS_STAGE_DIR"] = site.stage_dir
    if site.tracking_uri:
        env["MLFLOW_TRACKING_URI"] = site.tracking_uri
    return [f"export {k}={shlex.quote(v) if '$' not in v else v}" for k, v in env.items()]


def _header(site: Site, job_name: str, output: str, extra: list[str]) -> list[str]:
    d = [f"--job-name={job_name}", f"--partition={site.partition}", f"--time={site.time}",
         f"--nodes={site.nodes}", f"--ntasks-per-node={site.ntasks_per_node}", f"--output={output}",
         "--open-mode=append", *extra]
    if site.account:
        d.append(f"--account={site.account}")
    if site.gpus_per_node:
        d.append(f"--gpus-per-node={site.gpus_per_node}")
    if site.cpus_per_task:
        d.append(f"--cpus-per-task={site.cpus_per_task}")
    d += site.extra_sbatch
    return ["#!/bin/bash", *(f"#SBATCH {x}" for x in d)]


def render_array(site: Site, plan: SweepPlan, offset: int, ids: list[int], script_path: Path) -> str:
    results, sweep_id, logs = plan.results, plan.sweep_id, plan.logs
    run = plan.cell_command(f"$((SLURM_ARRAY_TASK_ID + {offset}))")
    if site.ranks > 1:  # srun/mpiexec forward SIGTERM to the ranks
        run = (f"srun --mpi=pmi2 --kill-on-bad-exit=0 {run}" if site.launcher == "srun"
               else f"mpiexec -n {site.ranks} {run}")
    lines = _header(site, f"harness-{safe(sweep_id)}", f"{logs}/%A_%a.out",
                    [f"--array={array_spec(ids)}", f"--signal=B:TERM@{site.signal_seconds}"])
    lines += ["set -eo pipefail", *site.setup, f"cd {shlex.quote(str(REPO_ROOT))}", *_env_lines(site, results),
              f"export HARNESS_SLURM_SCRIPT={shlex.quote(str(script_path))}",
              "# exec: the run itself receives Slurm's SIGTERM and writes a `killed` record", f"exec {run}", ""]
    return "\n".join(lines)


def render_ingest(site: Site, plan: SweepPlan) -> str:
    lines = _header(dataclasses.replace(site, nodes=1, ntasks_per_node=1, gpus_per_node=0),
                    f"harness-ingest-{safe(plan.sweep_id)}", f"{plan.logs}/ingest-%j.out", [])
    lines += ["set -eo pipefail", *site.setup, f"cd {shlex.quote(str(REPO_ROOT))}",
              *_env_lines(site, plan.results), *plan.ingest_commands(), ""]
    return "\n".join(lines)


# -- talking to Slurm -----------------------------------------------------------------------------
class Slurm:
    """sbatch / scancel / squeue with one-line errors and a floor on polling frequency."""

    def __init__(self, poll_seconds: float):
        if not shutil.which("sbatch"):
            raise UsageError("sbatch not found on PATH: run on a Slurm login node "
                             "(or start a local one: make slurm-up)")
        self.poll_seconds = max(poll_seconds, 1.0)
        self._last_poll = 0.0

    def check_partition(self, partition: str) -> None:
        out = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True)
        if out.returncode:
            raise UsageError(f"sinfo failed: {out.stderr.strip() or out.returncode}")
        parts = sorted(set(out.stdout.split()))
        if partition not in parts:
            raise UsageError(f"partition {partition!r} not found; partitions: {', '.join(parts)}")

    def max_array_size(self) -> int:
        out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.strip().startswith("MaxArraySize"):
                return int(line.split("=", 1)[1])
        return 1001  # Slurm's default

    @staticmethod
    def sbatch_args(script: Path, dependency: list[str] | None = None) -> list[str]:
        cmd = ["sbatch", "--parsable"]
        if dependency:
            cmd.append("--dependency=afterany:" + ":".join(dependency))
        return [*cmd, str(script)]

    def sbatch(self, script: Path, dependency: list[str] | None = None) -> str:
        out = subprocess.run(self.sbatch_args(script, dependency), capture_output=True, text=True)
        if out.returncode:
            msg = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
            raise SubmitError(f"sbatch rejected {script.name}: {msg}")
        return out.stdout.strip().split(";")[0]

    def cancel(self, job_ids: list[str]) -> None:
        if job_ids:
            subprocess.run(["scancel", *job_ids], capture_output=True)

    def active(self, job_ids: list[str]) -> set[str]:
        wait = self._last_poll + self.poll_seconds - time.monotonic()
        if wait > 0:  # rate limit: schedulers throttle (and admins dislike) tight squeue loops
            time.sleep(wait)
        self._last_poll = time.monotonic()
        out = subprocess.run(["squeue", "-h", "-o", "%A", "-j", ",".join(job_ids)], capture_output=True, text=True)
        return set(out.stdout.split()) & set(job_ids)


class SlurmBackend:
    """Two job arrays and an ingest job per submission:

      phase 1  the baseline cells (one array task per cell)
      phase 2  every other cell, --dependency=afterany on phase 1, so each finds its repeat's
               baseline record for the correctness gate, as in a local sweep
      ingest   --dependency=afterany on all arrays: ingests every record (failed and killed
               ones too) and prints the sweep summary
    """

    name = "slurm"
    runs_here = False
    site_requires = ("partition",)

    def __init__(self, site: Site):
        if not site.partition:
            raise UsageError("scheduler slurm needs a partition in the site file")
        self.site = site
        self.client: Slurm | None = None  # made by check(): a dry run needs no Slurm

    def check(self) -> None:
        self.client = Slurm(self.site.poll_seconds)
        self.client.check_partition(self.site.partition)

    def render(self, plan: SweepPlan) -> list[Job]:
        max_array = self.site.max_array_size or (self.client.max_array_size() if self.client else 1001)
        phases = [[i for i in plan.todo if plan.cells[i].is_baseline],
                  [i for i in plan.todo if not plan.cells[i].is_baseline]]
        jobs: list[Job] = []
        phase1: tuple[str, ...] = ()
        for phase, idx in enumerate(phases):
            for off, ids in chunks(idx, max_array):
                name = f"array-p{phase + 1}-o{off}{plan.suffix()}"
                path = plan.dir / f"{name}.sbatch"
                jobs.append(Job(name, render_array(self.site, plan, off, ids, path), path,
                                tuple(off + i for i in ids), phase1 if phase == 1 else ()))
            if phase == 0:
                phase1 = tuple(j.name for j in jobs)
        name = f"ingest{plan.suffix()}"
        jobs.append(Job(name, render_ingest(self.site, plan), plan.dir / f"{name}.sbatch", (),
                        tuple(j.name for j in jobs)))
        plan.logs.mkdir(parents=True, exist_ok=True) if self.client else None
        return jobs

    def submit_command(self, job: Job, after: list[str]) -> str:
        return shlex.join(Slurm.sbatch_args(job.path, after))

    def submit(self, job: Job, after: list[str]) -> str:
        return self.client.sbatch(job.path, after)

    def poll(self, ids: list[str]) -> set[str]:
        return self.client.active(ids)

    def cancel(self, ids: list[str]) -> None:
        if self.client:
            self.client.cancel(ids)
