"""The scheduler registry (ReFrame's `getscheduler(name)`): a site file's `scheduler` names one."""
from __future__ import annotations

from harness.config.errors import UsageError
from harness.launch.backend import Backend
from harness.launch.local import LocalBackend
from harness.launch.slurm import SlurmBackend

SCHEDULERS = {"local": LocalBackend, "slurm": SlurmBackend}  # name -> factory(site) -> Backend
DEFAULT = "local"     # no site file: this machine
SITE_DEFAULT = "slurm"  # a site file that names no scheduler


def get(name: str, site) -> Backend:
    if name not in SCHEDULERS:
        where = f"{site.path}: " if getattr(site, "path", "") else ""
        raise UsageError(f"{where}unknown scheduler {name!r}; valid schedulers: {', '.join(SCHEDULERS)}")
    return SCHEDULERS[name](site)
