"""Page reclaim that the machine does on its own, and what it cost a run: the kernel's DAMON
schemes that page out memory nobody touched for a while (proactive reclaim), and the counters
that say how much was read back from disk. Linux /sys and /proc only; absent where unreadable.

Why: this project's VMs (Firecracker, kernel 6.18, 2026-12-05) run a kdamond over physical
memory with one scheme, `pageout` of every region not accessed for 12 aggregations of 5 s, at most
128 MiB a second. With no swap it is the page cache that goes: 1.0 GiB of 24 GiB was cache, and
23.2 million file pages had been read back since boot. A two-rank LM run launched after a
minute's idle read 96 MB back from disk (24,569 refaults), one launched right after another run
4 MB. A loader's figures, a process's start and a first epoch read from disk what a machine
without it reads from memory.
"""
from __future__ import annotations

from pathlib import Path

from harness.measure.sysfs import read as _read
from harness.measure.sysfs import read_int as _int

KDAMONDS = Path("/sys/kernel/mm/damon/admin/kdamonds")
VMSTAT = Path("/proc/vmstat")
COUNTERS = ("workingset_refault_file", "pgmajfault", "pgpgin")  # pages, faults, KiB read from disk


def schemes(root: Path = KDAMONDS) -> list[dict]:
    """Every running kdamond's pageout schemes: {kdamond, operations, cold_s (untouched this long
    and it is paged out), max_bytes_per_s (its quota; None when unlimited)}."""
    out = []
    for kd in sorted((p for p in root.glob("[0-9]*") if p.name.isdigit()), key=lambda p: int(p.name)):
        if _read(kd / "state") != "on":
            continue
        for ctx in sorted(kd.glob("contexts/[0-9]*")):
            aggr_us = _int(ctx / "monitoring_attrs/intervals/aggr_us")
            for sc in sorted(ctx.glob("schemes/[0-9]*")):
                if _read(sc / "action") != "pageout":
                    continue
                age = _int(sc / "access_pattern/age/min")
                quota, reset_ms = _int(sc / "quotas/bytes"), _int(sc / "quotas/reset_interval_ms")
                out.append({"kdamond": int(kd.name), "operations": _read(ctx / "operations"),
                            "cold_s": age * aggr_us / 1e6 if age is not None and aggr_us else None,
                            "max_bytes_per_s": quota * 1000 / reset_ms if quota and reset_ms else None})
    return out


def counters(path: Path = VMSTAT) -> dict[str, int]:
    """The kernel's counts since boot of COUNTERS (absent where unreadable)."""
    out = {}
    for line in (_read(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name in COUNTERS:
            try:
                out[name] = int(value)
            except ValueError:
                continue
    return out


def during(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What was read back from disk between two counters() readings, all processes together."""
    return {k: after[k] - before[k] for k in COUNTERS if k in before and k in after}


def describe(found: list[dict], since_boot: dict[str, int]) -> str:
    """One line for `harness doctor`."""
    parts = []
    for s in found:
        cold = f"{s['cold_s']:.0f} s" if s["cold_s"] is not None else "a while"
        cap = f"at most {s['max_bytes_per_s'] / 2 ** 20:.0f} MiB a second" if s["max_bytes_per_s"] else "no quota"
        parts.append(f"kdamond {s['kdamond']} ({s['operations']}) pages out memory untouched for {cold}, {cap}")
    refaults = since_boot.get("workingset_refault_file")
    return "; ".join(parts) + (f"; {refaults / 1e6:.1f} M file pages read back since boot" if refaults else "")
