"""`make perf` benchmarks that need real MPI launches (mpiexec from the mpich wheel).

staging_throughput: `python -m staging` against this machine's own numbers for the same bytes,
  plain sequential read (`cat` to /dev/null) and copy (`cp -r`), each repeated and interleaved;
  staging with buffered reads (page cache, as cp) and with O_DIRECT (page cache bypassed, as on
  a cluster's parallel filesystem), 1 and 2 ranks. Target: >= 80% of cp's bandwidth, each file
  read once.
ddp_scaling: samples/s of one rank (all cores) vs two DDP ranks (one core each) at the same
  per-rank batch; efficiency = (samples/s at 2 ranks) / (2 x samples/s at 1 rank).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import data, registry
from harness.config import RunConfig
import numpy as np
from results.paths import REPO_ROOT

MPIEXEC = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")


def _dataset(workload: str, size: str) -> Path:
    cfg = RunConfig(workload=workload, size=size)
    wl = registry.get(workload)
    root = data.dataset_root(cfg)
    data.ensure_dataset(wl, wl.sizes[size], root, cfg.data_seed)
    return root


def _timed(cmd: list[str], **kw) -> float:
    kw.setdefault("stdout", subprocess.DEVNULL)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stderr=subprocess.PIPE, **kw)
    return time.perf_counter() - t0


STAGE_CASES = {  # name: (ranks, --direct)
    "stage_buffered_1rank": ("1", "off"), "stage_buffered_2ranks": ("2", "off"),
    "stage_direct_1rank": ("1", "on"), "stage_direct_2ranks": ("2", "on"),
}


def _staged(n: str, direct: str, src: Path, dst: Path) -> tuple[float, float]:
    """(end-to-end s including mpiexec, Python and MPI start-up; staging s as the run logs it,
    staging_start to staging_stop, from the stager's own summary)."""
    t0 = time.perf_counter()
    p = subprocess.run([MPIEXEC, "-n", n, sys.executable, "-m", "staging", str(src), str(dst), "--direct", direct],
                       check=True, capture_output=True, text=True, cwd=REPO_ROOT)
    e2e = time.perf_counter() - t0
    return e2e, float(json.loads(p.stdout.strip().splitlines()[-1])["seconds"])


def staging_throughput(workload: str = "cosmoflow", size: str = "small", repeats: int = 3) -> dict:
    src = _dataset(workload, size)
    files = sorted(str(p) for p in src.rglob("*") if p.is_file())
    nbytes = sum(os.path.getsize(f) for f in files)
    secs: dict[str, list[float]] = {"cat": [], "cp": [], **{k: [] for k in STAGE_CASES}}
    e2e: dict[str, list[float]] = {k: [] for k in STAGE_CASES}
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)  # warm the page cache once
    with tempfile.TemporaryDirectory(dir=os.environ.get("HARNESS_STAGE_DIR")) as tmp:
        for _ in range(repeats):  # interleaved, each into a fresh target
            for key in secs:
                dst = Path(tmp) / key
                shutil.rmtree(dst, ignore_errors=True)
                if key == "cat":
                    secs[key].append(_timed(["cat", *files], stdout=subprocess.DEVNULL))
                elif key == "cp":
                    secs[key].append(_timed(["cp", "-r", str(src), str(dst)]))
                else:
                    whole, staged = _staged(*STAGE_CASES[key], src, dst)
                    e2e[key].append(whole)
                    secs[key].append(staged)
                shutil.rmtree(dst, ignore_errors=True)
    out = {"dataset": f"{workload}/{size}", "files": len(files), "bytes": nbytes, "repeats": repeats,
           "seconds": secs, "seconds_end_to_end": e2e}
    for key, s in secs.items():
        out[f"{key}_GBps"] = nbytes / float(np.median(s)) / 1e9
    for key in STAGE_CASES:
        out[f"{key}_vs_cp"] = out[f"{key}_GBps"] / out["cp_GBps"]
        out[f"{key}_end_to_end_vs_cp"] = nbytes / float(np.median(e2e[key])) / 1e9 / out["cp_GBps"]
    out["note"] = ("stage_* seconds are staging_start to staging_stop as a run logs them (manifest check, "
                   "reads, exchange, writes, crc32 verification of every file); *_end_to_end adds "
                   "mpiexec, Python and MPI start-up. buffered: page-cache reads, so comparable with cp; "
                   "direct: O_DIRECT reads from the disk (the page cache is bypassed by design).")
    return out


def _samples_per_s(results: Path) -> float:
    (run,) = list((results / "runs").glob("*"))
    summary = json.loads((run / "summary.json").read_text())
    shutil.rmtree(results / "runs")
    return summary["samples_per_s"]


def ddp_scaling(workload: str = "cosmoflow", size: str = "tiny", local_batch: int = 8, steps: int = 30,
                repeats: int = 3) -> dict:
    _dataset(workload, size)
    ncpu = os.cpu_count() or 1
    rates: dict[str, list[float]] = {"1rank": [], "2ranks": []}
    base = [sys.executable, "-m", "harness", "run", workload, "--size", size, "--no-ingest",
            "--set", f"steps={steps}", "--set", "warmup_steps=3"]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HARNESS_RESULTS": tmp}
        for _ in range(repeats):
            subprocess.run([*base, "--set", f"batch_size={local_batch}", "--set", f"threads={ncpu}"],
                           check=True, capture_output=True, env=env, cwd=REPO_ROOT)
            rates["1rank"].append(_samples_per_s(Path(tmp)))
            subprocess.run([MPIEXEC, "-n", "2", *base, "--set", f"batch_size={2 * local_batch}",
                            "--set", f"threads={max(1, ncpu // 2)}"], check=True, capture_output=True, env=env,
                           cwd=REPO_ROOT)
            rates["2ranks"].append(_samples_per_s(Path(tmp)))
    r1, r2 = float(np.median(rates["1rank"])), float(np.median(rates["2ranks"]))
    return {"workload": f"{workload}/{size}", "local_batch": local_batch, "cpus": ncpu, "samples_per_s": rates,
            "median_1rank": r1, "median_2ranks": r2, "efficiency_1_to_2": r2 / (2 * r1)}
