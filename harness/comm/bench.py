"""`python -m harness comm` (entry: harness/comm/run.py): collectives measured as nccl-tests measures them, on gloo, MPI and
NCCL over the same ranks, recorded like any run (harness/comm/record.py, results/analysis/collectives.py).

--via host measures the host relay between accelerators that share no collective library (seed
001's CPU path between chips of different vendors): each call copies its input from the device to
host memory (pinned on a GPU), runs the collective on the host buffers with gloo or MPI, and copies
the result back to the device, all inside the timed call. On a CPU-only machine the "device" is host
memory, so the copies are memcpys. Its records say via=host; the planner's host_relay link reads
them (results/planner/links.py).

Per collective, dtype and size (-b .. -e, x -f), for each backend in turn (so gloo and MPI at
one size are measured back to back, paired in time) and each mode (out-of-place, in-place):
a barrier, `warmup` untimed calls, `iters` calls each timed on its own (blocking calls: the
host clock brackets the whole collective; NCCL adds a device sync point), then nccl-tests'
check: fresh check data, one call, every element compared. Per-iteration times of every rank
go to rank 0 (one gather over gloo, outside the timing). nccl-tests warms up once per sweep at
the largest and smallest size; we warm up at every size, since each size allocates new
buffers whose first touch costs page faults on CPU.

A rank that dies: gloo's next call fails on the survivors (or the process-group timeout,
HARNESS_DIST_TIMEOUT, ends a hang) and rank 0 closes its open records as failed; under
mpiexec the launcher kills the survivors and the next ingest closes the orphaned record.
"""
from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from harness.config.run_config import UsageError
from results.record import comm as comm_record

BACKENDS = ("gloo", "mpi", "nccl")
UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}  # nccl-tests' parsesize: binary units


@dataclass(frozen=True)
class Options:
    collectives: tuple[str, ...] = comm_record.COLLECTIVES
    backends: tuple[str, ...] = BACKENDS
    dtypes: tuple[str, ...] = ("float32",)
    min_bytes: int = 8
    max_bytes: int = 256 * 2 ** 20
    factor: int = 2
    iters: int = 20      # nccl-tests -n default
    warmup: int = 1      # nccl-tests -w default (5 before 2025)
    check: bool = True   # nccl-tests -c default
    explicit_backends: bool = False  # the user named the backends (so an impossible one is an error)
    via: str = "direct"  # "host": the host relay (device -> host copy, the collective on host buffers, back)


def parse_size(text: str) -> int:
    """8, 64K, 64KB, 64KiB, 256M, 1.5G -> bytes (binary units, as nccl-tests' parsesize)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in UNITS else ""
    try:
        return int(float(t[:-1] if unit else t) * UNITS[unit])
    except ValueError:
        raise UsageError(f"bad size {text!r}: a byte count like 8, 64K, 256M or 1G") from None


def _choices(text: str, valid: tuple[str, ...], what: str) -> tuple[str, ...]:
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if items == ("all",):
        return valid
    bad = [x for x in items if x not in valid]
    if bad or not items:
        raise UsageError(f"unknown {what} {', '.join(bad) or repr(text)}; valid: {', '.join(valid)} (or all)")
    return items


VIAS = ("direct", "host")


def options(collectives: str, backends: str, dtypes: str, minb: str, maxb: str, factor: int,
            iters: int, warmup: int, check: int, via: str = "direct") -> Options:
    """Validated options (UsageError, one line, on anything wrong); checked on every rank alike
    before any rank joins a process group."""
    from harness.comm.cases import DTYPES
    lo, hi = parse_size(minb), parse_size(maxb)
    if lo <= 0 or hi <= 0:
        raise UsageError(f"sizes must be positive: -b {minb} -e {maxb}")
    if lo > hi:
        raise UsageError(f"sizes out of order: -b {minb} is larger than -e {maxb}")
    if factor < 2:
        raise UsageError(f"-f must be an integer of 2 or more (sizes multiply by it); got {factor}")
    if iters < 1 or warmup < 0:
        raise UsageError(f"-n must be at least 1 and -w at least 0; got -n {iters} -w {warmup}")
    if via not in VIAS:
        raise UsageError(f"unknown --via {via!r}; valid: {', '.join(VIAS)}")
    return Options(_choices(collectives, comm_record.COLLECTIVES, "collective"), _choices(backends, BACKENDS, "backend"),
                   _choices(dtypes, tuple(DTYPES), "dtype"), lo, hi, factor, iters, warmup, bool(check),
                   explicit_backends=backends.strip() != "all", via=via)


def load_now() -> dict[str, float]:
    """Load on the machine now: the 1-minute load average and runnable processes (ours included)."""
    out: dict[str, float] = {}
    try:
        out["loadavg_1m"] = float(Path("/proc/loadavg").read_text().split()[0])
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running"):
                out["procs_running"] = float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return out


def describe(opts: Options) -> dict:
    d = asdict(opts)
    d.pop("explicit_backends")
    return d


def progress(enabled: bool):
    """A rich progress bar on rank 0 (stderr), nothing elsewhere."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.console import Console
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(file=sys.stderr), disable=not enabled, transient=False)


def bench_id() -> str:
    """One invocation's id, shared by its records (rank 0's, broadcast)."""
    from harness.run.record import unique_stamp
    return unique_stamp()

