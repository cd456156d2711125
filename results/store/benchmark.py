"""Ingest benchmark and the synthetic store the portal benchmark renders (`make perf`; torch-free).

ingest_rate: runs/s of results.store.ingest against a bare MlflowClient loop (create_run, log_batch
  with 50 metrics and 20 params, set_terminated), each into its own fresh sqlite store, in the
  same process, interleaved in blocks. Target: ingest >= 90% of the bare loop.
build_store: a store with N synthetic runs in real record folders, for portal/perf.py.
"""
from __future__ import annotations

import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from results.record.toggles import BY_NAME, TOGGLES



def synthetic_record(sweep: str, config: str, repeat: int, rng: random.Random, steps: int = 20,
                     started: float | None = None) -> dict:
    """A finished run record in the real format (results/record/schema.py: config, env, summary,
    status, metrics), with synthetic numbers, as schema.read_record returns it (no folder yet)."""
    tog = {t.name: t.default for t in TOGGLES}
    if config[1:] in BY_NAME:  # "+x1".. are configurations with no toggle of their own
        tog[config[1:]] = BY_NAME[config[1:]].on
    run_id = f"cosmoflow-tiny-{abs(hash((sweep, config))) % 10**10:010d}-{sweep.split('@')[1]}-{repeat}{rng.getrandbits(16):04x}"
    variant = f"{abs(hash(config)) % 10**10:010d}"
    cfg = {"workload": "cosmoflow", "size": "tiny", "mode": "throughput", "device": "cpu", "steps": steps,
           "warmup_steps": 1, "seed": 1, "toggles": tog, "sweep": sweep, "repeat": repeat, "ranks": 1,
           "run_id": run_id, "variant": variant, "record_version": 1}
    speed = {"baseline": 1.0, "+channels_last": 1.8, "+compile": 0.8, "+amp": 1.5}.get(config, 1.0)
    t, rows = 0.0, []
    for s in range(steps + 1):
        step_s = rng.gauss(0.1 / speed, 0.005)
        t += step_s
        rows.append({"step": s, "phase": "warmup" if s == 0 else "steady", "t": t, "step_s": step_s,
                     "data_s": 0.001, "loss": 4 - 0.01 * s, "kind": "step"})
    steady = sorted(r["step_s"] for r in rows[1:])
    now = time.time() if started is None else started
    return {"config": cfg, "env": {"hostname": "bench", "git_sha": "0" * 40, "cpu_model": "bench"},
            "summary": {"median_step_s": steady[len(steady) // 2], "samples_per_s": 8 / steady[len(steady) // 2],
                        "quality": 0.3, "final_loss": rows[-1]["loss"], "steps_done": steps + 1},
            "status": {"status": "finished", "reason": "", "started": now, "ended": now + t},
            "metrics": rows, "dir": ""}


def write_record(runs: Path, sweep: str, config: str, repeat: int, rng: random.Random, steps: int = 20) -> Path:
    """synthetic_record written as a record folder under `runs`."""
    rec = synthetic_record(sweep, config, repeat, rng, steps)
    d = runs / rec["config"]["run_id"]
    d.mkdir(parents=True)
    for name in ("config", "env", "summary", "status"):
        (d / f"{name}.json").write_text(json.dumps(rec[name]))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rec["metrics"]))
    (d / "mlperf.log").write_text("")
    return d


def bare_client_rate(uri: str, n: int) -> float:
    """Runs/s of a bare MlflowClient loop: create_run, log_batch (50 metrics, 20 params), set_terminated."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient
    client = MlflowClient(uri)
    exp = client.create_experiment("bare")
    t0 = time.perf_counter()
    for i in range(n):
        run = client.create_run(exp)
        ts = int(time.time() * 1000)
        client.log_batch(run.info.run_id, metrics=[Metric(f"m{k}", float(k), ts, 0) for k in range(50)],
                         params=[Param(f"p{k}", str(k)) for k in range(20)])
        client.set_terminated(run.info.run_id)
    return n / (time.perf_counter() - t0)


def _ours(uri: str, runs: Path, n: int) -> float:
    """`make ingest`'s path (ingest_all) over a folder of n fresh records."""
    from results.store.ingest import experiment_id, ingest_all
    from results.store.tracking import client as mlflow_client
    client = mlflow_client(uri)
    experiment_id(client)  # creates the database and experiment before the clock, as the bare loop does
    t0 = time.perf_counter()
    res = ingest_all(runs, uri, client)
    dt = time.perf_counter() - t0
    assert len(res["added"]) == n, res
    return n / dt


def ingest_rate(n: int = 100, blocks: int = 3) -> dict:
    import logging
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    rng = random.Random(0)
    bare, ours = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for b in range(blocks):  # B O B O ...: drift hits both alike
            for i in range(n):
                write_record(Path(tmp) / f"runs{b}", f"bench@{b:04d}", "baseline", i, rng)
            bare.append(bare_client_rate(f"sqlite:///{tmp}/bare{b}.db", n))
            ours.append(_ours(f"sqlite:///{tmp}/ours{b}.db", Path(tmp) / f"runs{b}", n))
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {"runs_per_block": n, "blocks": blocks, "bare_runs_per_s": bare, "ingest_runs_per_s": ours,
            "ratio_of_medians": med(ours) / med(bare), "target": ">= 0.90",
            "note": "ours also copies the record folder as artifacts, logs per-step loss/step-time "
                    "histories and keeps the run index"}


def build_store(n_runs: int, root: Path) -> str:
    """results/perf/store-<n>/ with n_runs ingested records (cached: built once)."""
    uri = f"sqlite:///{root / 'mlflow.db'}"
    if (root / "built").exists():
        return uri
    shutil.rmtree(root, ignore_errors=True)
    from rich.console import Console
    from rich.progress import track

    from results.store.ingest import ingest_run
    from results.store.tracking import client as mlflow_client
    rng = random.Random(1)
    configs = ["baseline"] + [f"+{t.name}" for t in TOGGLES] + ["+x1", "+x2", "+x3"]
    per_sweep = len(configs) * 10
    client = mlflow_client(uri)
    dirs = [write_record(root / "runs", f"bench{s:03d}@2026{s:06d}", c, r, rng)
            for s in range(n_runs // per_sweep) for r in range(10) for c in configs[:per_sweep // 10]]
    for d in track(dirs, description=f"ingesting {len(dirs)} synthetic runs", console=Console(stderr=True)):
        ingest_run(d, uri, client)
    (root / "built").write_text(str(len(dirs)))
    return uri
