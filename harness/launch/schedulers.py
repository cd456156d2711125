"""The scheduler registry (ReFrame's `getscheduler(name)`): a site file's `scheduler` names one."""
from __future__ import annotations

from harness.config.errors import UsageError
from harness.launch.backend import Backend
from harness.launch.local import LocalBackend
from harness.launch.slurm import SlurmBackend

SCHEDULERS = {"local": LocalBackend, "slurm": SlurmBackend}  # name -> factory(site) -> Backend
DEFAULT = "local"     # no site file: this machine


def get(name: str, site) -> Backend:
    where = f"{site.path}: " if getattr(site, "path", "") else ""
    if name not in SCHEDULERS:
        raise UsageError(f"{where}unknown scheduler {name!r}; valid schedulers: {', '.join(SCHEDULERS)}")
    missing = [k for k in SCHEDULERS[name].site_requires if site is not None and not getattr(site, k, None)]
    if missing:  # what this scheduler cannot do without, asked of the backend (no scheduler names here)
        raise UsageError(f"{where}{', '.join(missing)} is required for scheduler {name}")
    return SCHEDULERS[name](site)
