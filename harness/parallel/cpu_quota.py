"""Ranks of unequal speed, made for real: a CPU quota per rank from the cgroup v1 `cpu`
controller (cpu.cfs_quota_us / cpu.cfs_period_us), for checking the heterogeneous planner.

HARNESS_RANK_CPU="1,0.5" lets rank 0 use at most 1 CPU and rank 1 at most 0.5 (CFS bandwidth
control: the rank's threads run for quota us in every period us, then wait). One value
applies to every rank. Each rank moves its own process into its own group, made under
/sys/fs/cgroup/cpu/harness-<pid>, and moves back and removes the group when it ends (also on
an error: `release` runs in the runner's finally). The record says how each rank was held
(summary key rank_cpu).

Needs root and a writable v1 cpu controller (so on this project's CPU machines); elsewhere the
run is `unsupported` with the reason, never a silent run at full speed.
"""
from __future__ import annotations

import os
from pathlib import Path

from harness.config.errors import BadInput, Unsupported

ENV = "HARNESS_RANK_CPU"
ROOT = Path("/sys/fs/cgroup/cpu")
# 10 ms: throttling far finer than a step (tens to hundreds of ms), so a 0.5 quota reads as a
# steady half speed rather than 50 ms on, 50 ms off (the kernel's default period is 100 ms)
PERIOD_US = 10_000


def parse(text: str, world: int) -> list[float]:
    """CPUs per rank from HARNESS_RANK_CPU's text; BadInput (exit 2) with the reason."""
    try:
        cpus = [float(x) for x in text.split(",")]
    except ValueError:
        raise BadInput(f"{ENV} must be CPUs per rank, comma-separated (e.g. \"1,0.5\"); got {text!r}") from None
    if len(cpus) == 1:
        cpus *= world
    if len(cpus) != world or not all(0.01 <= c <= os.cpu_count() for c in cpus):
        raise BadInput(f"{ENV}={text!r}: needs 1 or {world} values (one per rank), each between 0.01 and "
                       f"{os.cpu_count()} CPUs")
    return cpus


def unavailable(root: Path = ROOT) -> str | None:
    """Why per-process CPU quotas can't be set here, or None."""
    if not (root / "cpu.cfs_quota_us").exists():
        return f"no cgroup v1 cpu controller at {root} (CPU quotas per rank need it)"
    if not os.access(root, os.W_OK):
        return f"{root} is not writable by this user (CPU quotas per rank need root)"
    return None


def _own_group(root: Path) -> Path:
    """This process's group in the v1 cpu hierarchy (from /proc/self/cgroup), else the root."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpu" in controllers.split(",") and (root / path.lstrip("/")).is_dir():
                return root / path.lstrip("/")
    except (OSError, ValueError):
        pass
    return root


def sweep_stale(root: Path = ROOT) -> list[str]:
    """Remove the groups of ranks that died without release() (killed by a signal: a segfault
    inside a gloo collective left two on 2026-12-04): a harness-<pid> group whose process is gone
    and that holds no task. Returns the names removed."""
    gone = []
    for g in root.glob("harness-*"):
        pid = g.name.removeprefix("harness-")
        try:
            if not pid.isdigit() or Path(f"/proc/{pid}").exists() or (g / "tasks").read_text().strip():
                continue
            g.rmdir()
            gone.append(g.name)
        except OSError:  # another rank swept it first, or a task moved in: leave it
            continue
    return gone


class Quota:
    """This process held to `cpus` CPUs in a group of its own, until release()."""

    def __init__(self, cpus: float, root: Path = ROOT):
        self.cpus, self.root = cpus, root
        self.home = _own_group(root)  # where the process was: it goes back there on release
        sweep_stale(root)
        self.group = root / f"harness-{os.getpid()}"
        self.group.mkdir(exist_ok=True)
        (self.group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (self.group / "cpu.cfs_quota_us").write_text(str(int(cpus * PERIOD_US)))
        (self.group / "cgroup.procs").write_text(str(os.getpid()))  # every thread of the process moves

    def describe(self) -> dict:
        return {"cpus": self.cpus, "cgroup": str(self.group), "cfs_period_us": PERIOD_US,
                "cfs_quota_us": int(self.cpus * PERIOD_US), "how": "cgroup v1 cpu.cfs_quota_us"}

    def throttled(self) -> dict:
        """The kernel's count of periods this group ran out of quota, and the time it waited."""
        stat = dict(line.split() for line in (self.group / "cpu.stat").read_text().splitlines())
        return {"nr_periods": int(stat.get("nr_periods", 0)), "nr_throttled": int(stat.get("nr_throttled", 0)),
                "throttled_s": int(stat.get("throttled_time", 0)) / 1e9}

    def release(self) -> None:
        try:
            (self.home / "cgroup.procs").write_text(str(os.getpid()))
            self.group.rmdir()
        except OSError:
            pass  # already gone; a leftover empty group costs nothing and names its pid


def record(world: int, env=os.environ) -> dict:
    """How every rank was held, for the run's summary (rank 0 writes it)."""
    return {"cpus_per_rank": parse(env[ENV], world), "cfs_period_us": PERIOD_US, "how": "cgroup v1 cpu.cfs_quota_us"}


def apply(rank: int, world: int, env=os.environ) -> Quota | None:
    """This rank's quota from HARNESS_RANK_CPU, or None when it is not set."""
    text = env.get(ENV, "").strip()
    if not text:
        return None
    cpus = parse(text, world)[rank]
    reason = unavailable()
    if reason:
        raise Unsupported(f"{ENV}={text}: {reason}")
    return Quota(cpus)
