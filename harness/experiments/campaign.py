"""MLPerf-style results: time-to-train campaigns and weak-scaling (throughput) runs.

`harness ttt WORKLOAD --runs N`: N seeded time-to-train runs (seeds 1..N), each its own process
and record, then the olympic score (results/stats/scoring.py) from each log's run_start/run_stop,
read back with mlperf_logging's own parser. Staging time (staging_start/stop) is reported
separately: HPC v3.0 keeps it off the clock.

`mpiexec -n M*S python -m harness weak WORKLOAD --instance-size S`: M concurrent instances of S
ranks, each an independent data-parallel job with its own process group and seed (seed +
instance, as NVIDIA does for CosmoFlow), training to target; TTTa = latest run_stop - earliest
run_start over the instances.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from harness.config import registry
from harness.config.run_config import RunConfig, UsageError
from results.stats import scoring
from results.record.paths import results_root

TTT_STEP_CAP = 100_000  # ttt runs stop at the target; the cap only bounds a run that never gets there


def log_times(log: Path) -> dict:
    """run_start/run_stop/staging times (ms) and the run_stop status, from a run's MLLOG file
    (results/record/schema.mllog_events: the checker's own parser; no log for an unsupported run)."""
    from results.record import schema
    t = {e["key"]: e for e in schema.mllog_events(Path(log).parent)} if Path(log).name == schema.MLPERF_LOG else {}
    out = {"run_start_ms": t["run_start"]["time_ms"] if "run_start" in t else None,
           "run_stop_ms": t["run_stop"]["time_ms"] if "run_stop" in t else None,
           "status": t["run_stop"]["metadata"].get("status") if "run_stop" in t else None}
    if "staging_start" in t and "staging_stop" in t:
        out["staging_s"] = (t["staging_stop"]["time_ms"] - t["staging_start"]["time_ms"]) / 1000
    return out


def ttt_seconds(log: Path) -> float | None:
    """MLPerf time-to-train of one run, or None if it did not reach the target."""
    t = log_times(log)
    if t["status"] != "success" or t["run_start_ms"] is None or t["run_stop_ms"] is None:
        return None
    return (t["run_stop_ms"] - t["run_start_ms"]) / 1000


def _system(env: dict) -> str:
    return env.get("gpu_name") or env.get("cpu_model") or env.get("hostname", "?")


def ttt(workload: str, size: str, runs: int, sets: list[str], device: str) -> int:
    from rich.console import Console
    from rich.table import Table

    from harness.launch.backend import Cell, SweepPlan
    from harness.launch.local import LocalBackend
    from results.record import schema

    if runs < 1:
        raise UsageError(f"--runs must be >= 1; got {runs}")
    sweep_id = f"ttt-{workload}-{size}@{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    base = RunConfig(workload=workload, size=size, mode="ttt", device=device, steps=TTT_STEP_CAP, ranks=1,
                     sweep=sweep_id).with_overrides(sets)
    cfgs = [base.with_overrides([f"seed={base.seed + i}", f"repeat={i}"]) for i in range(runs)]
    cells = [Cell("ttt", c.to_dict(), c.variant_hash()) for c in cfgs]
    print(f"time-to-train campaign {sweep_id}: {runs} runs, seeds {base.seed}..{base.seed + runs - 1}")
    LocalBackend().run_cells(SweepPlan(sweep_id, cells, list(range(runs)), results_root(), python=sys.executable))
    required = registry.get(workload).mlperf_required_runs
    rows, times, staging, env = [], [], [], {}
    for d, rec, _ in schema.scan_records(results_root() / "runs", f"{workload}-{size}-*"):
        if rec is None or rec["config"].get("sweep") != sweep_id:
            continue
        env = rec["env"]
        t = ttt_seconds(d / schema.MLPERF_LOG) if rec["status"]["status"] == schema.FINISHED else None
        times.append(t)
        staging.append(log_times(d / schema.MLPERF_LOG).get("staging_s", 0.0))
        rows.append((rec["config"]["seed"], rec["status"]["status"], t))
    score = scoring.olympic(times, required)
    con = Console()
    per = Table(title=f"{sweep_id}: runs")
    for c in ("seed", "status", "time to train (min)"):
        per.add_column(c)
    for seed, status, t in rows:
        per.add_row(str(seed), status, f"{t / 60:.3f}" if t is not None else "did not converge")
    con.print(per)
    res = Table(title="time-to-train result (olympic mean: fastest and slowest dropped)")
    for c in ("workload", "system", "ranks", "score (min)", "runs used", "staging (s, off the clock)", "note"):
        res.add_column(c)
    res.add_row(f"{workload}/{size}", _system(env), str(base.ranks),
                f"{score.score_s / 60:.3f}" if score.score_s is not None else "-",
                f"{score.used} of {score.runs}", f"{max(staging, default=0.0):.2f}", score.note or "scored")
    con.print(res)
    if score.note:
        print(f"warning: {score.note}")
    print("check the logs with: make check-logs")
    return 0 if score.score_s is not None else 1


def weak(workload: str, size: str, instance_size: int, sets: list[str], device: str) -> int:
    """Collective over COMM_WORLD: every rank calls it under mpiexec / srun --mpi=pmi2."""
    from mpi4py import MPI

    from harness.run import runner
    from harness.parallel.dist import from_env, mpi_rendezvous

    comm = MPI.COMM_WORLD
    if instance_size < 1 or comm.size % instance_size:
        raise UsageError(f"--instance-size {instance_size} does not divide the {comm.size} ranks")
    instance, irank = divmod(comm.rank, instance_size)
    icomm = comm.Split(color=instance, key=irank)
    addr = mpi_rendezvous(icomm)  # each instance is its own process group
    local = from_env().local_rank  # the launcher's node-local rank: dist.py owns its variables
    # the instance is the data-parallel world: torchrun-style variables take precedence in dist.py
    from staging import INSTANCES_ENV
    os.environ[INSTANCES_ENV] = str(comm.size // instance_size)  # mpi_staging stages for all instances at once
    os.environ.update(RANK=str(irank), WORLD_SIZE=str(instance_size), LOCAL_RANK=str(local % max(instance_size, 1)),
                      MASTER_ADDR=addr[0], MASTER_PORT=addr[1])
    sweep_id = comm.bcast(f"weak-{workload}-{size}@{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}", root=0)
    base = RunConfig(workload=workload, size=size, mode="ttt", device=device, steps=TTT_STEP_CAP,
                     ranks=instance_size, sweep=sweep_id).with_overrides(sets)
    cfg = base.with_overrides([f"seed={base.seed + instance}", f"repeat={instance}"])
    out = runner.execute(cfg)
    if irank == 0:  # each instance's record into the store, as `harness run` does (concurrent ingests are safe)
        problem = runner.ingest_quietly(out.dir, results_root())
        if problem:
            print(f"warning: MLflow store not updated ({problem}); the record is kept, run `make ingest`",
                  file=sys.stderr)
    mine = {"instance": instance, "run_id": out.run_id, "dir": str(out.dir), "status": out.status} if irank == 0 else None
    leaders = [x for x in comm.gather(mine, root=0) or [] if x]
    if comm.rank != 0:
        return 0
    times = [log_times(Path(x["dir"]) / "mlperf.log") for x in leaders]
    ok = [t for t, x in zip(times, leaders) if x["status"] == "finished" and t["status"] == "success"]
    result = {"sweep": sweep_id, "workload": f"{workload}/{size}", "instance_size": instance_size,
              "instances": len(leaders), "converged": len(ok), "runs": leaders}
    if ok:
        result.update(scoring.weak_scaling([t["run_start_ms"] / 1000 for t in ok], [t["run_stop_ms"] / 1000 for t in ok]))
    path = results_root() / "weak" / f"{sweep_id.replace('@', '_')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    if ok:
        print(f"weak scaling {sweep_id}: M={len(ok)} instances x {instance_size} rank(s): "
              f"TTTa {result['ttta_min']:.3f} min, {result['models_per_min']:.2f} models/min ({path})")
    else:
        print(f"weak scaling {sweep_id}: no instance reached the target ({path})")
    return 0 if len(ok) == len(leaders) else 1
