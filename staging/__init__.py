"""Node-local data staging with MPI: every source file is read once across the job.

The only module that reads the `mpi_staging` toggle. With it on, the run copies its dataset to
node-local storage (HARNESS_STAGE_DIR, default /tmp/harness-stage) between staging_start and
staging_stop inside init (HPC v3.0 keeps staging off the run clock), records bytes, time and
bandwidth in the run record, and the loaders read the staged copy. `python -m staging` stages
for many instances at once (multi-instance / weak-scaling jobs).
"""
from __future__ import annotations

import os
from pathlib import Path

DEFAULT_LOCAL_ROOT = "/tmp/harness-stage"
INSTANCES_ENV = "HARNESS_INSTANCES"  # concurrent training instances in this MPI job (harness weak)


def unsupported_reason(cfg) -> str | None:
    """Why the staging this configuration asks for can't run here, or None."""
    if not cfg.toggles.mpi_staging:
        return None
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi_staging needs mpi4py and an MPI library (pip install mpi4py mpich)"
    return None


def local_root(source: Path) -> Path:
    """Where a dataset is staged: <HARNESS_STAGE_DIR>/<workload>/<dataset>, one copy per instance below."""
    base = os.environ.get("HARNESS_STAGE_DIR", DEFAULT_LOCAL_ROOT)
    return Path(base) / source.parent.name / source.name


def prepare(cfg, dist, source: Path, mllog, info: dict) -> Path:
    """The dataset directory the loaders should read: `source`, or its staged copy."""
    if not cfg.toggles.mpi_staging:
        return source
    from mpi4py import MPI

    from workloads.errors import BadInput
    from mlperf_logging.mllog import constants as K  # the field's MLLOG key names
    from staging import layout, stager

    instances = int(os.environ.get(INSTANCES_ENV, "1"))  # set by `harness weak`
    if MPI.COMM_WORLD.size != dist.world * instances:
        raise BadInput(f"mpi_staging needs an MPI launcher (mpiexec, or srun --mpi=pmi2): MPI sees "
                       f"{MPI.COMM_WORLD.size} rank(s) but {dist.launcher} started {dist.world} x {instances} instance(s)")
    # collective over every instance: each source file is read once for all of them
    lay = layout.build(MPI.COMM_WORLD, instance_size=dist.world)
    mllog.start(K.STAGING_START)
    dest, rep = stager.stage(lay, source, local_root(source))
    mllog.end(K.STAGING_STOP)
    info["staging"] = summarize(lay, rep)
    info["staged_dir"] = str(dest)
    return dest


def summarize(lay, rep) -> dict:
    """Job-wide figures from every rank's report (collective)."""
    from mpi4py import MPI

    w = lay.world
    read = w.allreduce(rep.bytes_read, op=MPI.SUM)
    seconds = w.allreduce(rep.seconds, op=MPI.MAX)  # the slowest rank ends staging
    return {"bytes_read": read, "bytes_written": w.allreduce(rep.bytes_written, op=MPI.SUM),
            "files_staged": w.allreduce(rep.files_staged, op=MPI.SUM),
            "files_already_valid": w.allreduce(rep.files_verified_present, op=MPI.SUM),
            "seconds": seconds, "read_gb_per_s": read / seconds / 1e9 if seconds else 0.0,
            "read_mode": rep.read_mode, "read_fallback": rep.read_fallback, "copy_threads": rep.threads,
            "instances": w.allreduce(int(lay.instance_rank == 0), op=MPI.SUM), "ranks": w.size}
