"""The collectives benchmark record (`python -m harness comm`): its kind and folder, nccl-tests'
figures per size, and the per-size table read back. Written by harness/comm/record.py, read by
ingest and by results/analysis/collectives.py. Pure Python.

Definitions follow NVIDIA/nccl-tests (src/common.cu, src/*.cu, doc/PERFORMANCE.md):
- size S (bytes) is the whole array: the all_reduce buffer, the all_gather *output*, the
  reduce_scatter *input*, each rank's all_to_all buffer, the broadcast/reduce buffer, the
  send/recv buffer;
- time = mean over the timed iterations. nccl-tests then averages it over ranks by default
  (-a 1); we take the slowest rank's mean (its -a 3), the time a synchronous step waits for;
- algbw = S / time; busbw = algbw x factor(n), the factor making busbw comparable with the
  link's speed whatever the rank count (ring algorithms move S x factor bytes per rank).
"""
from __future__ import annotations

import bisect
import math
from pathlib import Path

from results.record import schema

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "send_recv")
BUS_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
              "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
              "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "send_recv": lambda n: 1.0,
              "gather": lambda n: (n - 1) / n, "scatter": lambda n: (n - 1) / n}
MODES = ("oop", "ip")  # out-of-place, in-place (nccl-tests prints both)
KIND = schema.COMM_KIND  # MLflow tag kind of a collectives record ("run" for training runs)
SUBDIR = "comm"        # records live in results/comm/<run_id>/, apart from training runs
SIZE_FIGURES = ("time_us_", "algbw_gb_per_s_", "busbw_gb_per_s_", "p50_us_", "p95_us_")  # per mode, per size


def bandwidths(collective: str, nbytes: int, time_s: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes/s, as nccl-tests prints) of S = nbytes moved in time_s."""
    algbw = nbytes / time_s / 1e9
    return algbw, algbw * BUS_FACTOR[collective](ranks)


def size_row(collective: str, nbytes: int, ranks: int, mode: str, times_s: list[float]) -> dict:
    """Figures of one (size, mode) from every rank's per-iteration times (seconds): time is
    the slowest rank's mean, p50/p95 the slowest rank's percentiles (as param's comms bench)."""
    means = [sum(t) / len(t) for t in times_s]
    time_s = max(means)
    algbw, busbw = bandwidths(collective, nbytes, time_s, ranks)
    return {f"time_us_{mode}": time_s * 1e6, f"algbw_gb_per_s_{mode}": algbw, f"busbw_gb_per_s_{mode}": busbw,
            f"p50_us_{mode}": max(_pct(t, 50) for t in times_s) * 1e6,
            f"p95_us_{mode}": max(_pct(t, 95) for t in times_s) * 1e6,
            f"rank_spread_{mode}": time_s / min(means) if min(means) > 0 else math.nan}


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def sizes(lo: int, hi: int, factor: int) -> list[int]:
    """nccl-tests' -b lo -e hi -f factor: lo, lo*f, ... up to hi."""
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def table(record_dir: str | Path) -> list[dict]:
    """The per-size rows of one record (metrics.jsonl, kind=size), smallest size first."""
    rows = [m for m in schema.read_metrics(Path(record_dir)) if m.get("kind") == "size"]
    return sorted(rows, key=lambda r: r["bytes"])


def best_mode(row: dict) -> str | None:
    """The mode a collective is measured in at this size: in-place when recorded (what training
    uses: DDP's and FSDP's collectives are in place), else out-of-place."""
    for mode in ("ip", "oop"):
        if row.get(f"time_us_{mode}") is not None:
            return mode
    return None


def time_at(rows: list[dict], nbytes: float) -> float | None:
    """Predicted seconds for one call of nbytes, interpolated log-log between the measured
    sizes around it (linear in size beyond the largest: bandwidth-bound there); None if none."""
    pts = [(r["bytes"], r[f"time_us_{m}"] / 1e6) for r in rows if (m := best_mode(r))]
    if not pts or nbytes <= 0:
        return None
    xs = [p[0] for p in pts]
    if nbytes <= xs[0]:
        return pts[0][1]
    if nbytes >= xs[-1]:
        return pts[-1][1] * nbytes / xs[-1]
    i = bisect.bisect_left(xs, nbytes)
    (x0, t0), (x1, t1) = pts[i - 1], pts[i]
    w = math.log(nbytes / x0) / math.log(x1 / x0)
    return math.exp(math.log(t0) + w * (math.log(t1) - math.log(t0)))
