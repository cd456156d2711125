"""`make perf` benchmarks that need real MPI launches (mpiexec from the mpich wheel).

staging_throughput: `python -m staging` against this machine's own numbers for the same bytes,
  plain sequential read (`cat` to /dev/null) and copy (`cp -r`, and cp then a crc32 pass);
  staging with buffered reads (page cache, as cp) and with O_DIRECT (page cache bypassed, as on
  a cluster's parallel filesystem), 1 and 2 ranks; each stage pass paired with a cp pass, the
  page cache put in the same state before every pass. Target: >= 80% of cp's bandwidth (paired
  median), each file read once.
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

from harness.run import data
from harness.config import registry
from harness.config.run_config import RunConfig
import numpy as np
from results.record import schema
from results.record.paths import REPO_ROOT
from harness.parallel.dist import mpiexec

MPIEXEC = mpiexec()  # harness/parallel/dist.py: the one lookup


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


def _settle(files: list[str]) -> str:
    """The same page-cache state before every pass: no dirty pages pending (sync), nothing else
    cached where the kernel lets us drop it (/proc/sys/vm/drop_caches, root only), then the
    source read once so that every pass reads it from the page cache, as a re-run on a node
    would. Returns how the cache was controlled."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1")
        how = "sync, drop_caches, source re-read"
    except OSError:
        how = "sync, source re-read (drop_caches not permitted; each destination deleted, so its pages went)"
    subprocess.run(["cat", *files], stdout=subprocess.DEVNULL, check=True)
    return how


def _crc_pass(dst: Path) -> float:
    """Seconds to crc32 every file under dst, the stager's own check (workloads.manifest.file_crc32)."""
    from workloads.manifest import file_crc32
    t0 = time.perf_counter()
    for f in sorted(dst.rglob("*")):
        if f.is_file():
            file_crc32(f)
    return time.perf_counter() - t0


def staging_throughput(workload: str = "cosmoflow", size: str = "small", repeats: int = 5) -> dict:
    """Each stage case paired with a cp pass in the same repeat, back to back, in alternating
    order, each pass after _settle(); the ratio is the median over repeats of cp seconds over
    stage seconds (stage bandwidth as a fraction of cp's) with a bootstrap CI. Also against cp
    followed by a crc32 pass over the copy: the fair anchor for a stager that verifies every file."""
    from results.stats import estimators as stats
    src = _dataset(workload, size)
    files = sorted(str(p) for p in src.rglob("*") if p.is_file())
    nbytes = sum(os.path.getsize(f) for f in files)
    secs: dict[str, list[float]] = {"cat": [], "cp": [], "cp_then_crc32": [], **{k: [] for k in STAGE_CASES}}
    e2e: dict[str, list[float]] = {k: [] for k in STAGE_CASES}
    pair_cp: dict[str, list[float]] = {k: [] for k in STAGE_CASES}  # the cp pass paired with each case
    pair_cp_crc: dict[str, list[float]] = {k: [] for k in STAGE_CASES}
    cache = ""
    with tempfile.TemporaryDirectory(dir=os.environ.get("HARNESS_STAGE_DIR")) as tmp:
        def run(key: str) -> float:
            nonlocal cache
            dst = Path(tmp) / key
            shutil.rmtree(dst, ignore_errors=True)
            cache = _settle(files)
            if key == "cat":
                s = _timed(["cat", *files], stdout=subprocess.DEVNULL)
            elif key == "cp":
                s = _timed(["cp", "-r", str(src), str(dst)])
                secs["cp_then_crc32"].append(s + _crc_pass(dst))
            else:
                whole, s = _staged(*STAGE_CASES[key], src, dst)
                e2e[key].append(whole)
            shutil.rmtree(dst, ignore_errors=True)
            secs[key].append(s)
            return s

        for r in range(repeats):
            run("cat")
            for key in STAGE_CASES:
                order = ("cp", key) if r % 2 == 0 else (key, "cp")
                for k in order:
                    run(k)
                pair_cp[key].append(secs["cp"][-1])
                pair_cp_crc[key].append(secs["cp_then_crc32"][-1])
    out = {"dataset": f"{workload}/{size}", "files": len(files), "bytes": nbytes, "repeats": repeats,
           "cache_control": cache, "seconds": secs, "seconds_end_to_end": e2e}
    for key, s in secs.items():
        out[f"{key}_GBps"] = nbytes / float(np.median(s)) / 1e9
    for key in STAGE_CASES:
        for anchor, cp_s in (("cp", pair_cp[key]), ("cp_then_crc32", pair_cp_crc[key])):
            r = stats.paired_ratio(cp_s, secs[key])
            out[f"{key}_vs_{anchor}"] = round(r["ratio"], 3)
            out[f"{key}_vs_{anchor}_ci95"] = [round(r["ci_lo"], 3), round(r["ci_hi"], 3)]
        out[f"{key}_end_to_end_vs_cp"] = round(float(np.median(np.asarray(pair_cp[key]) / np.asarray(e2e[key]))), 3)
    out["note"] = ("paired: each stage pass beside a cp pass of the same repeat, the same cache state before "
                   "each (cache_control); *_vs_cp is the median of per-pair cp_s / stage_s with a bootstrap CI. "
                   "stage_* seconds are staging_start to staging_stop as a run logs them (manifest check, "
                   "reads, exchange, writes, crc32 verification of every file); cp_then_crc32 adds a crc32 pass "
                   "over cp's copy, the same check; *_end_to_end adds mpiexec, Python and MPI start-up. "
                   "buffered: page-cache reads, as cp; direct: O_DIRECT reads from the disk (by design).")
    return out


def _samples_per_s(results: Path) -> float:
    (run,) = list((results / "runs").glob("*"))
    summary = schema.read_record(run)["summary"]  # the one validating reader
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
