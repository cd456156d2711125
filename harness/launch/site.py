"""Site files: what a cluster needs rendered into #SBATCH scripts (harness/sites/*.yaml).

Nothing about a cluster is hard-coded; a site file holds it. Unknown keys and wrong types are
UsageErrors naming the file, line and key.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

from harness.config.run_config import UsageError, has_type
from harness.config.yaml_file import read_yaml_mapping

SITES_DIR = Path(__file__).resolve().parent.parent / "sites"


@dataclass(frozen=True)
class Site:
    scheduler: str = "slurm"
    """Which scheduler runs the jobs: slurm or local (harness/launch/schedulers.py)."""
    partition: str = ""
    """Slurm partition (-p); checked against `sinfo` before anything is submitted. Required for slurm."""
    account: str = ""
    """Slurm account (-A); empty: none."""
    time: str = "00:30:00"
    """Time limit per array task (--time)."""
    nodes: int = 1
    ntasks_per_node: int = 1
    """Ranks per node: a task with > 1 rank in total is launched through `launcher`."""
    gpus_per_node: int = 0
    cpus_per_task: int = 0
    """0: Slurm's default."""
    launcher: str = "srun"
    """How multi-rank tasks start their ranks: srun (--mpi=pmi2) or mpiexec."""
    setup: list[str] = field(default_factory=list)
    """Shell lines run first in every job: `module load ...`, `source venv/bin/activate` ..."""
    python: str = ""
    """Interpreter inside the job (after `setup`). Empty: the one running `submit` (fine where
    the login node and the compute nodes share the filesystem, as on most clusters)."""
    results_dir: str = ""
    """Where records are written; must be on a filesystem every node sees. Empty: this repo's results/."""
    data_dir: str = ""
    """Dataset root (HARNESS_DATA) on the shared filesystem. Empty: this repo's data/."""
    stage_dir: str = ""
    """Node-local directory for mpi_staging (HARNESS_STAGE_DIR). Empty: /tmp/harness-stage."""
    tracking_uri: str = ""
    """MLflow tracking server (http://host:5000) for live logging; empty: ingest into the sqlite
    store next to the records in the dependent job."""
    max_array_size: int = 0
    """Split arrays to respect MaxArraySize; 0: ask `scontrol show config`."""
    signal_seconds: int = 60
    """SIGTERM this many seconds before the time limit (--signal=B:TERM@N): a `killed` record."""
    poll_seconds: float = 30.0
    """Minimum seconds between squeue/sacct polls when waiting (schedulers throttle heavy pollers)."""
    extra_sbatch: list[str] = field(default_factory=list)
    """More #SBATCH options, verbatim (e.g. --constraint=a100, --exclusive)."""
    path: str = field(default="", compare=False)
    """The file this site was read from (set by load; not a key of the file)."""

    @property
    def ranks(self) -> int:
        return self.nodes * self.ntasks_per_node


_TYPES = {f.name: f.type for f in fields(Site) if f.name != "path"}


def _line(text: str, key: str) -> int:
    for n, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*:", line):
            return n
    return 0


def load(name_or_path: str) -> Site:
    path = Path(name_or_path)
    if not path.suffix:  # a bare name: harness/sites/<name>.yaml
        path = SITES_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in SITES_DIR.glob("*.yaml"))
        raise UsageError(f"site file {path} not found; sites: {', '.join(known)} (or a path to a .yaml)")
    d, text = read_yaml_mapping(path, "site file")
    for key, value in d.items():
        where = f"{path}:{_line(text, str(key))}: {key}"
        if key not in _TYPES:
            raise UsageError(f"{where}: unknown site key; valid keys: {', '.join(_TYPES)}")
        want = _TYPES[key]
        if not has_type(value, want):
            raise UsageError(f"{where}: expected {want}; got {value!r}")
    site = Site(**d, path=str(path))
    if not site.python:
        import sys
        site = dataclasses.replace(site, python=sys.executable)
    # the scheduler's name is checked where schedulers are registered (harness/launch/schedulers.py)
    if site.launcher not in ("srun", "mpiexec"):
        raise UsageError(f"{path}:{_line(text, 'launcher')}: launcher: must be srun or mpiexec; got {site.launcher!r}")
    if site.nodes < 1 or site.ntasks_per_node < 1:
        raise UsageError(f"{path}: nodes and ntasks_per_node must be >= 1")
    return site
