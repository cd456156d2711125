"""What else the machine was doing while a run ran, so a number measured on a loaded machine is
marked as such (pyperf's `system show` names the same causes: load, CPU frequency, other
processes). Linux /proc and /sys only; every field is absent where unreadable.

Measured over the whole run, between begin() and end():
- others_cpu_frac: CPU time used by other processes, as a fraction of all CPUs' time over the
  run's wall time: (busy jiffies of the machine - this job's CPU time) / (wall x CPUs). The
  job's CPU time is this process's (all threads, reaped children) x the ranks on this node
  (ranks do the same work; the other ranks are not "other load").
- steal_frac: time the hypervisor gave the VM's CPUs to someone else, same denominator.
- cpu_per_wall: this process's CPU seconds per wall second (about the thread count when it
  has the CPUs to itself; lower when it waits or is crowded out).
- reclaim: file pages read back from disk (workingset_refault_file), major faults and KiB read
  (pgpgin), the whole machine's over the run (harness/measure/reclaim.py: a VM that pages out
  its page cache on its own).
And at start and end: the 1-minute load average, the busiest other processes over a 0.2 s
window, the CPU frequency governor and current frequency where readable.
"""
from __future__ import annotations

import os
import resource
import time
from pathlib import Path

from harness.measure import reclaim, sysfs

TICK = os.sysconf("SC_CLK_TCK")  # jiffies per second in /proc/stat and /proc/<pid>/stat
WINDOW_S = 0.2                   # sampling window for the busiest processes


def _cpu_jiffies() -> tuple[float, float] | None:
    """(busy, steal) jiffies of all CPUs since boot, from /proc/stat's 'cpu' line."""
    try:
        f = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = f[:7]
    steal = f[7] if len(f) > 7 else 0.0
    return user + nice + system + irq + softirq, steal


def _own_cpu_s() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _proc_times() -> dict[int, tuple[str, float]]:
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            raw = (d / "stat").read_text()
            name = raw[raw.index("(") + 1:raw.rindex(")")]
            f = raw[raw.rindex(")") + 2:].split()
            out[int(d.name)] = (name, (float(f[11]) + float(f[12])) / TICK, int(f[2]))  # utime+stime, pgrp
        except (OSError, ValueError, IndexError):
            continue
    return out


def busiest(n: int = 3) -> list[dict]:
    """The n processes (not this one, nor its process group) using the most CPU over WINDOW_S."""
    mine = {os.getpid()}
    try:
        group = os.getpgrp()
    except OSError:
        group = -1
    a = _proc_times()
    time.sleep(WINDOW_S)
    b = _proc_times()
    use = [(pid, name, (t - a[pid][1]) / WINDOW_S) for pid, (name, t, pgrp) in b.items()
           if pid in a and pid not in mine and pgrp != group]
    use.sort(key=lambda x: -x[2])
    return [{"pid": pid, "name": name, "cpu_pct": round(100 * u, 1)} for pid, name, u in use[:n] if u > 0.005]


def _freq() -> dict:
    out: dict = {}
    base = Path("/sys/devices/system/cpu/cpu0/cpufreq")
    for key, name, scale in (("governor", "scaling_governor", None), ("cur_freq_mhz", "scaling_cur_freq", 1e-3)):
        v = sysfs.read(base / name)
        if v is None:
            continue
        try:
            out[key] = float(v) * scale if scale else v
        except ValueError:
            pass
    if "cur_freq_mhz" not in out:  # VMs without cpufreq: /proc/cpuinfo's figure
        try:
            mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("cpu MHz")]
            if mhz:
                out["cur_freq_mhz"] = sum(mhz) / len(mhz)
        except (OSError, ValueError, IndexError):
            pass
    return out


def _point() -> dict:
    out: dict = {"busiest": busiest(), **_freq()}
    try:
        out["loadavg_1m"] = float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return out


def begin() -> dict:
    return {"t": time.monotonic(), "jiffies": _cpu_jiffies(), "own_cpu_s": _own_cpu_s(), "start": _point(),
            "reclaim": reclaim.counters()}


def end(state: dict, local_ranks: int = 1) -> dict:
    """The run's machine figures (see the module docstring); local_ranks = ranks on this node."""
    wall = time.monotonic() - state["t"]
    own = _own_cpu_s() - state["own_cpu_s"]
    cpus = os.cpu_count() or 1
    out: dict = {"wall_s": wall, "cpus": cpus, "cpu_per_wall": own / wall if wall > 0 else None,
                 "start": state["start"], "end": _point()}
    j0, j1 = state["jiffies"], _cpu_jiffies()
    if j0 and j1 and wall > 0:
        capacity = wall * cpus
        out["others_cpu_frac"] = max(0.0, ((j1[0] - j0[0]) / TICK - own * local_ranks) / capacity)
        out["steal_frac"] = (j1[1] - j0[1]) / TICK / capacity
    read_back = reclaim.during(state.get("reclaim", {}), reclaim.counters())
    if read_back:  # the whole machine's, over the run: pages the kernel had dropped and read again
        out["reclaim"] = read_back
    return out
