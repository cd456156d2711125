"""Collectives benchmark for `make perf` (not a test): `harness comm` at 2 ranks under mpiexec,
gloo and MPI side by side, run twice (rounds) so run-to-run noise is visible beside each figure.
Per collective and backend: busbw at the largest size (in place where measured, as training
uses it), as a fraction of the measured memory-copy ceiling, and the MPI/gloo ratio; latency at
the smallest size. Sizes 8 B .. 64 MiB: beyond the caches, a quarter of the CLI's default 256 MiB
to keep the wall time near ten minutes on this 2-core machine.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from results.record import comm as comm_record
from results.record import schema
from results.record.paths import REPO_ROOT
from harness.parallel.dist import mpiexec

MPIEXEC = mpiexec()  # harness/parallel/dist.py: the one lookup


def _round(env: dict, results: Path, ranks: int, max_bytes: str, iters: int) -> dict[tuple[str, str], dict]:
    before = set(schema.record_dirs(results / comm_record.SUBDIR))
    subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, "-m", "harness", "comm", "--backends", "gloo,mpi",
                    "-e", max_bytes, "-n", str(iters), "--no-ingest"],
                   check=True, capture_output=True, env=env, cwd=REPO_ROOT)
    out = {}
    for d in schema.record_dirs(results / comm_record.SUBDIR):
        if d not in before:
            r = schema.read_record(d)
            out[(r["config"]["collective"], r["config"]["backend"])] = {**r["summary"], "status": r["status"]["status"]}
    return out


def collectives_bench(ranks: int = 2, max_bytes: str = "64M", iters: int = 10, rounds: int = 2) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HARNESS_RESULTS": tmp}
        env.pop("MLFLOW_TRACKING_URI", None)
        got = [_round(env, Path(tmp), ranks, max_bytes, iters) for _ in range(rounds)]
    first = next(iter(got[0].values()))
    ceiling = first.get("copy_gb_per_s_rank")
    out: dict = {"ranks": ranks, "max_bytes": max_bytes, "iters": iters, "rounds": rounds,
                 "copy_ceiling_gb_per_s": {"rank": ceiling, "rank_threads": first.get("copy_threads_rank"),
                                           "all_cores": first.get("copy_gb_per_s_all_cores")},
                 "loadavg_1m_start": [g[next(iter(g))].get("loadavg_1m_start") for g in got]}
    for c in comm_record.COLLECTIVES:
        row: dict = {}
        for b in ("gloo", "mpi"):
            rs = [g.get((c, b), {}) for g in got]
            if not all(r.get("status") == schema.FINISHED for r in rs):
                row[b] = {"status": [r.get("status") for r in rs]}
                continue
            bw = [r["busbw_gb_per_s"] for r in rs]
            row[b] = {"busbw_gb_per_s": float(np.median(bw)), "rounds": [round(x, 3) for x in bw],
                      "frac_of_copy_ceiling": float(np.median(bw)) / ceiling if ceiling else None,
                      "latency_us_smallest": float(np.median([r["latency_us"] for r in rs])),
                      "mode": rs[0]["mode"], "bytes": rs[0]["bytes_max"]}
        if "busbw_gb_per_s" in row.get("gloo", {}) and "busbw_gb_per_s" in row.get("mpi", {}):
            row["mpi_over_gloo"] = row["mpi"]["busbw_gb_per_s"] / row["gloo"]["busbw_gb_per_s"]
        out[c] = row
    return out
