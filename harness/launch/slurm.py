"""`python -m harness submit SWEEP [--site SITE] [--dry-run] [--rerun-failed] [--wait]`
(make submit): a sweep as Slurm jobs.

  phase 1  job array: the baseline cells (one task per cell)
  phase 2  job array: every other cell, --dependency=afterany on phase 1, so each finds its
           repeat's baseline record for the correctness gate, as in a local sweep
  ingest   one job, --dependency=afterany on all arrays: ingests every record into MLflow
           (failed and killed ones too) and prints the sweep summary

Arrays longer than the cluster's MaxArraySize are split (task id + HARNESS_CELL_OFFSET = cell).
Every task execs the harness (or srun for multi-rank cells), so --signal=B:TERM@N reaches the
run: a time limit or scancel leaves a `killed` record with the samples so far.
A rejected submission cancels whatever this call already submitted, then exits 2 with
Slurm's own message.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from harness import sweep as sweep_mod
from harness.config import RunConfig, UsageError
from harness.launch.site import Site
from results.paths import REPO_ROOT

CELLS = "cells.json"


# -- planning -------------------------------------------------------------------------------------
def plan_cells(sw: sweep_mod.Sweep, site: Site) -> list[dict]:
    """Every (label, config) of the sweep with its baseline's variant (for the gate lookup)."""
    device = "cuda" if site.gpus_per_node else "cpu"
    cells, baseline_of = [], {}
    for label, cfg in sweep_mod.plan(sw, device):
        cfg = dataclasses.replace(cfg, ranks=site.ranks)
        key = (cfg.workload, cfg.size)
        if label == "baseline":
            baseline_of[key] = cfg.variant_hash()
        cells.append({"label": label, "config": cfg.to_dict(), "baseline_variant": baseline_of.get(key, "")})
    return cells


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


def render_array(site: Site, sweep_id: str, results: Path, cells_file: Path, offset: int, ids: list[int],
                 script_path: Path) -> str:
    logs = results / "slurm" / _safe(sweep_id)
    run = f"{site.python} -m harness cell {shlex.quote(str(cells_file))} $((SLURM_ARRAY_TASK_ID + {offset}))"
    if site.ranks > 1:  # srun/mpiexec forward SIGTERM to the ranks
        run = (f"srun --mpi=pmi2 --kill-on-bad-exit=0 {run}" if site.launcher == "srun"
               else f"mpiexec -n {site.ranks} {run}")
    lines = _header(site, f"harness-{_safe(sweep_id)}", f"{logs}/%A_%a.out",
                    [f"--array={array_spec(ids)}", f"--signal=B:TERM@{site.signal_seconds}"])
    lines += ["set -eo pipefail", *site.setup, f"cd {shlex.quote(str(REPO_ROOT))}", *_env_lines(site, results),
              f"export HARNESS_SLURM_SCRIPT={shlex.quote(str(script_path))}",
              "# exec: the run itself receives Slurm's SIGTERM and writes a `killed` record", f"exec {run}", ""]
    return "\n".join(lines)


def render_ingest(site: Site, sweep_id: str, results: Path) -> str:
    logs = results / "slurm" / _safe(sweep_id)
    lines = _header(dataclasses.replace(site, nodes=1, ntasks_per_node=1, gpus_per_node=0),
                    f"harness-ingest-{_safe(sweep_id)}", f"{logs}/ingest-%j.out", [])
    lines += ["set -eo pipefail", *site.setup, f"cd {shlex.quote(str(REPO_ROOT))}", *_env_lines(site, results),
              f"{site.python} -m results ingest",
              f"{site.python} -m results summary --sweep {shlex.quote(sweep_id)}", ""]
    return "\n".join(lines)


def _safe(sweep_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in sweep_id)


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

    def sbatch(self, script: Path, dependency: list[str] | None = None) -> str:
        cmd = ["sbatch", "--parsable"]
        if dependency:
            cmd.append("--dependency=afterany:" + ":".join(dependency))
        out = subprocess.run([*cmd, str(script)], capture_output=True, text=True)
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


class SubmitError(UsageError):
    pass


# -- the command ----------------------------------------------------------------------------------
def submit(sweep_file: Path, site: Site, dry_run: bool = False, rerun_failed: bool = False,
           wait: bool = False, repeats: int = 0) -> int:
    sw = sweep_mod.load(sweep_file)
    if repeats:
        sw = dataclasses.replace(sw, repeats=repeats)
    results = Path(site.results_dir or REPO_ROOT / "results").expanduser()
    runs_root = results / "runs"
    if rerun_failed:
        sweep_id = sweep_mod.latest_instance(runs_root, sw.name)
        if not sweep_id:
            raise UsageError(f"no earlier run of sweep {sw.name!r} under {runs_root} to rerun")
        sweep_dir = results / "sweeps" / _safe(sweep_id)
        cells = json.loads((sweep_dir / CELLS).read_text())
        done = sweep_mod.existing_records(runs_root, sweep_id)
        todo = [i for i, c in enumerate(cells) if done.get(
            (RunConfig.from_dict(c["config"]).variant_hash(), c["config"]["repeat"]), ("",))[0] not in sweep_mod.DONE]
    else:
        sweep_id = f"{sw.name}@{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
        cells = plan_cells(dataclasses.replace(sw, name=sweep_id), site)
        todo = list(range(len(cells)))
        sweep_dir = results / "sweeps" / _safe(sweep_id)
    slurm = None if dry_run else Slurm(site.poll_seconds)
    if slurm:
        slurm.check_partition(site.partition)
    max_array = site.max_array_size or (slurm.max_array_size() if slurm else 1001)
    phases = [[i for i in todo if cells[i]["label"] == "baseline"], [i for i in todo if cells[i]["label"] != "baseline"]]

    scripts: list[tuple[int, Path, str]] = []  # (phase, path, text)
    for phase, idx in enumerate(phases):
        for off, ids in chunks(idx, max_array):
            path = sweep_dir / f"array-p{phase + 1}-o{off}{'-rerun' if rerun_failed else ''}.sbatch"
            scripts.append((phase, path, render_array(site, sweep_id, results, sweep_dir / CELLS, off, ids, path)))
    ingest_path = sweep_dir / f"ingest{'-rerun' if rerun_failed else ''}.sbatch"
    ingest_text = render_ingest(site, sweep_id, results)
    if dry_run:
        for _, path, text in [*scripts, (None, ingest_path, ingest_text)]:
            print(f"# ---- {path}\n{text}")
        print(f"# dry run: {len(todo)} cells in {len(scripts)} array job(s) + 1 ingest job; nothing submitted")
        return 0
    if not todo:
        print(f"sweep {sweep_id}: every cell already has a finished record; nothing to submit")
        return 0

    sweep_dir.mkdir(parents=True, exist_ok=True)
    (results / "slurm" / _safe(sweep_id)).mkdir(parents=True, exist_ok=True)
    if not rerun_failed:
        (sweep_dir / CELLS).write_text(json.dumps(cells, indent=1))
    submitted: list[str] = []
    try:
        phase1: list[str] = []
        for phase, path, text in scripts:
            path.write_text(text)
            job = slurm.sbatch(path, phase1 if phase == 1 else None)
            submitted.append(job)
            if phase == 0:
                phase1.append(job)
        ingest_path.write_text(ingest_text)
        ingest_job = slurm.sbatch(ingest_path, list(submitted))
        submitted.append(ingest_job)
    except SubmitError:
        slurm.cancel(submitted)  # nothing half-submitted left behind
        raise
    (sweep_dir / "jobs.json").write_text(json.dumps({"arrays": submitted[:-1], "ingest": ingest_job}))
    print(f"sweep {sweep_id}: {len(todo)} cells as job(s) {', '.join(submitted[:-1])}; "
          f"ingest + summary job {ingest_job} (output under {results / 'slurm' / _safe(sweep_id)})")
    if wait:
        while slurm.active(submitted):
            pass
        for out in sorted((results / "slurm" / _safe(sweep_id)).glob(f"ingest-{ingest_job}.out")):
            print(out.read_text())
    return 0
