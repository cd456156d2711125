"""`python -m harness doctor`: what makes this machine noisy for benchmarks right now, and what
to do about it (pyperf's `system show`, for this harness's runs). Linux /proc and /sys only;
a check whose source is unreadable says so instead of guessing.

Thresholds are the stability verdict's (results/stats/stability.py), so the doctor warns about what
would make a run's verdict disturbed: other processes above 10% of the CPUs, steal above 5%.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from harness.measure import allocator, machine_state, reclaim
from harness.measure.sysfs import read as _read
from results.stats import stability

SAMPLE_S = 1.0  # window for the CPU share of other processes and steal


@dataclass
class Check:
    name: str
    ok: bool | None      # None: for information (unreadable here, or not a fault by itself)
    found: str
    advice: str = ""


def _cpu_use(window_s: float) -> tuple[float, float] | None:
    """(busy share, steal share) of all CPUs over window_s (this process is idle meanwhile)."""
    a = machine_state._cpu_jiffies()
    time.sleep(window_s)
    b = machine_state._cpu_jiffies()
    if not a or not b:
        return None
    cap = window_s * (os.cpu_count() or 1)
    return (b[0] - a[0]) / machine_state.TICK / cap, (b[1] - a[1]) / machine_state.TICK / cap


def checks(window_s: float = SAMPLE_S) -> list[Check]:
    cpus = os.cpu_count() or 1
    out = []
    use = _cpu_use(window_s)
    top = machine_state.busiest(5)
    names = ", ".join(f"{b['name']} (pid {b['pid']}, {b['cpu_pct']:.0f}%)" for b in top) or "none"
    if use is None:
        out.append(Check("CPU use by others", None, "/proc/stat unreadable"))
    else:
        busy, steal = use
        out.append(Check("CPU use by others", busy <= stability.OTHERS_MAX,
                         f"{busy:.0%} of the {cpus} CPUs busy over {window_s:.0f} s; busiest: {names}",
                         "wait for these to finish, or run on an idle node (a run shares the CPUs with them)"))
        out.append(Check("steal", steal <= stability.STEAL_MAX, f"hypervisor took {steal:.1%} of CPU time",
                         "a shared VM: its neighbours move step times; prefer dedicated or bare-metal nodes"))
    load = _read("/proc/loadavg")
    if load:
        l1, l5 = (float(x) for x in load.split()[:2])
        out.append(Check("load average", l1 <= 0.5 * cpus, f"{l1:.2f} (1 min), {l5:.2f} (5 min) on {cpus} CPUs",
                         "runnable tasks beyond the benchmark's own: check the busiest processes above"))
    gov = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    freq = machine_state._freq().get("cur_freq_mhz")
    if gov is None:
        out.append(Check("CPU frequency governor", None,
                         "no cpufreq here (a VM or container)" + (f"; current {freq:.0f} MHz" if freq else ""),
                         "frequency is the host's to set; rely on paired speedups and repeats"))
    else:
        out.append(Check("CPU frequency governor", gov == "performance", f"{gov}" + (f", {freq:.0f} MHz" if freq else ""),
                         "sudo cpupower frequency-set -g performance (other governors change clocks under load)"))
    boost = _read("/sys/devices/system/cpu/intel_pstate/no_turbo")
    boost_generic = _read("/sys/devices/system/cpu/cpufreq/boost")
    if boost is not None or boost_generic is not None:
        on = boost == "0" if boost is not None else boost_generic == "1"
        out.append(Check("turbo boost", not on, "on" if on else "off",
                         "turbo clocks depend on temperature and other cores: disable it for stable figures"))
    iso = _read("/sys/devices/system/cpu/isolated")
    out.append(Check("isolated CPUs", True if iso else None, iso or "none",
                     "isolcpus= on the kernel command line and `taskset` keep other tasks off the benchmark's CPUs"
                     if not iso else ""))
    quota = _read("/sys/fs/cgroup/cpu.max") or _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    if quota is not None:
        limited = not (quota.startswith("max") or quota.startswith("-1"))
        out.append(Check("CPU quota (cgroup)", not limited, quota if limited else "none",
                         "this container's CPU time is capped: step times include throttling"))
    out.append(_malloc_check(allocator.state()))
    out.append(_reclaim_check(reclaim.schemes(), reclaim.counters()))
    mem = {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in (_read("/proc/meminfo") or "").splitlines()
                                             if ":" in line)}
    if "MemAvailable" in mem and "MemTotal" in mem:
        avail = mem["MemAvailable"] / mem["MemTotal"]
        swap = (mem.get("SwapTotal", 0) - mem.get("SwapFree", 0)) / 2 ** 20
        out.append(Check("memory", avail > 0.2 and swap < 0.1,
                         f"{avail:.0%} available, {swap:.1f} GiB swapped",
                         "little free memory evicts the page cache (loader figures) and swaps"))
    return out


def _malloc_check(state: dict) -> Check:
    """glibc's adaptive mmap threshold moves a process's step level (allocator.py): fixed in every
    harness process unless HARNESS_MALLOC=dynamic, or where the C library has no mallopt."""
    if state["malloc"] == "fixed":
        mmap, trim = state["mmap_threshold"] >> 20, state["trim_threshold"] >> 20
        return Check("host allocator", True, f"glibc malloc thresholds fixed (mmap {mmap} MiB, trim {trim} MiB)")
    if state["malloc"] == "dynamic":
        return Check("host allocator", False, f"glibc's adaptive thresholds ({state['why']})",
                     f"unset {allocator.ENV}: a process's level then moves with what it freed first "
                     "(+channels_last 1.27-1.79x from process to process on a 2-core EPYC)")
    return Check("host allocator", None, state["why"])


def _reclaim_check(found: list[dict], since_boot: dict) -> Check:
    """The kernel paging out what nobody touched (reclaim.py): a property of the machine, not a
    load that comes and goes, so information; a run's record counts what it read back."""
    if not found:
        return Check("proactive reclaim", True, "no DAMON pageout scheme running")
    return Check("proactive reclaim", None, reclaim.describe(found, since_boot),
                 "page cache untouched that long is read from disk again (a loader's first pass, a process's "
                 "start); each run's record counts it (machine.reclaim); on a machine you own: echo off > "
                 f"{reclaim.KDAMONDS}/N/state")


def report(found: list[Check]) -> tuple[str, int]:
    """Text and the count of warnings."""
    lines, warnings = [], 0
    for c in found:
        mark = "info" if c.ok is None else ("ok" if c.ok else "WARNING")
        warnings += c.ok is False
        lines.append(f"{mark:<8} {c.name}: {c.found}")
        if c.ok is not True and c.advice:
            lines.append(f"{'':<8}   -> {c.advice}")
    if warnings:
        lines.append(f"{warnings} warning(s): numbers measured now may not be trusted (the run records say the "
                     "same in their stability verdict); fix what you can, or compare paired speedups")
    else:
        lines.append("nothing found that would make measurements noisy now")
    return "\n".join(lines), warnings


def main() -> int:
    text, _ = report(checks())
    print(text)
    return 0
