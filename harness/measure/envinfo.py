"""What the run ran on: versions, CPU/GPU, host, scheduler, git state and the command line."""
from __future__ import annotations

import os
import platform
import shlex
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from harness.measure import allocator
from results.record.paths import REPO_ROOT

PACKAGES = ("torch", "nvidia-dali-cuda120", "mlflow", "mlperf-logging", "numpy", "mpi4py", "mpich")
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
              "SLURM_JOB_PARTITION", "SLURM_NTASKS", "SLURM_PROCID")


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def gpu_info() -> dict:
    import torch
    if not torch.cuda.is_available():
        return {"gpu_name": None, "gpu_count": 0, "gpu_driver": None, "cuda": torch.version.cuda}
    driver = None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10).stdout.split("\n")[0].strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"gpu_name": torch.cuda.get_device_name(0), "gpu_count": torch.cuda.device_count(),
            "gpu_driver": driver, "cuda": torch.version.cuda}


def scheduler_info() -> dict:
    """Scheduler-neutral job facts: {name, job_id, array_task_id, nodes}; empty outside one.
    Slurm's are read from its variables; the local scheduler (harness/launch/local.py) sets
    HARNESS_SCHEDULER and HARNESS_JOB_ID for each cell it runs."""
    e = os.environ
    if "SLURM_JOB_ID" in e:
        return {"name": "slurm", "job_id": e.get("SLURM_ARRAY_JOB_ID") or e["SLURM_JOB_ID"],
                "array_task_id": e.get("SLURM_ARRAY_TASK_ID", ""), "nodes": e.get("SLURM_JOB_NODELIST", "")}
    if "HARNESS_SCHEDULER" in e:
        return {"name": e["HARNESS_SCHEDULER"], "job_id": e.get("HARNESS_JOB_ID", ""), "array_task_id": "",
                "nodes": socket.gethostname()}
    return {}


def capture() -> dict:
    import torch
    sha = _git("rev-parse", "HEAD")
    return {
        "git_sha": sha or None,
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")) if sha else None,
        "python": platform.python_version(),
        "versions": {p: _version(p) for p in PACKAGES},
        "torch_build": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "malloc": allocator.state(),  # glibc's thresholds fixed or adaptive (allocator.py)
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        **gpu_info(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "slurm": {k: os.environ[k] for k in SLURM_VARS if k in os.environ},  # Slurm's own, as they are
        "scheduler": scheduler_info(),
        "command": shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv])),  # exact, as typed
        "cwd": os.getcwd(),
    }
