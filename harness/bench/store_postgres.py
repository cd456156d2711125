"""The shared store on a real PostgreSQL for `make perf` (not a test): many `python -m results ingest`
processes (32 by default) ingesting the same 1,000 records into one `mlflow server` on the
harness's PostgreSQL (results/store/postgres.py) at once. Checked: exactly one run per record,
none deleted, none half-written. Beside it, records/s of one ingester into the same kind of
server, of one ingester into the embedded sqlite store, and of a bare MlflowClient loop writing
the same metrics into the server (create_run, log_batch, set_terminated; no artifacts).

Records are synthetic, in the real format (results/store/benchmark.write_record).
"""
from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from results.record.paths import REPO_ROOT


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """`python -m results.store.server` on a fresh database, for the `with` block."""

    def __init__(self, tmp: Path, db: str):
        from results.store import postgres
        self.backend = postgres.create_database(db)
        self.port, self.dir = _port(), tmp / f"tracking-{db}"

    def __enter__(self) -> str:
        self.proc = subprocess.Popen([sys.executable, "-m", "results.store.server", "--dir", str(self.dir),
                                      "--port", str(self.port), "--workers", "4", "--backend", self.backend],
                                     cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        url = f"http://127.0.0.1:{self.port}"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        return url
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"mlflow server on {self.backend} not healthy after 120 s")

    def __exit__(self, *exc):
        import signal
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=60)


def _ingest(results: Path, uri: str, writers: int) -> tuple[float, list[int]]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(REPO_ROOT)}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "results", "ingest", "--results", str(results)],
                              cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(writers)]
    codes = [p.wait(timeout=3600) for p in procs]
    return time.perf_counter() - t0, codes


def _store(uri: str) -> dict:
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("mlperf-harness").experiment_id
    runs, token = [], None
    while True:
        page = c.search_runs([exp], "tags.kind = 'run'", max_results=1000, page_token=token)
        runs += page
        token = page.token
        if not token:
            break
    deleted = c.search_runs([exp], "", run_view_type=ViewType.DELETED_ONLY, max_results=5000)
    ids = [r.data.tags["run_id"] for r in runs]
    return {"runs": len(ids), "distinct": len(set(ids)), "deleted": len(deleted),
            "incomplete": sum(r.data.tags.get("ingest_complete") != "1" for r in runs)}


def concurrent_ingest(records: int = 1000, writers: int = 32, single: int = 200) -> dict:
    from results.store import benchmark, postgres
    postgres.up()
    rng = random.Random(0)
    out: dict = {"records": records, "writers": writers, "backend": "mlflow server (4 workers) on PostgreSQL"}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for i in range(records):
            benchmark.write_record(tmp / "many" / "runs", "bench@000001", "baseline", i, rng)
        for i in range(single):
            benchmark.write_record(tmp / "one" / "runs", "bench@000002", "baseline", i, rng)
            benchmark.write_record(tmp / "lite" / "runs", "bench@000003", "baseline", i, rng)
        with _Server(tmp, "bench_many") as url:
            wall, codes = _ingest(tmp / "many", url, writers)
            out["many"] = {"wall_s": round(wall, 1), "records_per_s": records / wall, "exit_codes": sorted(set(codes)),
                           **_store(url)}
        with _Server(tmp, "bench_one") as url:
            wall, codes = _ingest(tmp / "one", url, 1)
            out["one_ingester_server"] = {"records": single, "records_per_s": single / wall, "exit_codes": codes}
            out["bare_client_server"] = {"records": single, "records_per_s": benchmark.bare_client_rate(url, single)}
        wall, codes = _ingest(tmp / "lite", f"sqlite:///{tmp / 'lite' / 'mlflow.db'}", 1)
        out["one_ingester_sqlite"] = {"records": single, "records_per_s": single / wall, "exit_codes": codes}
    m = out["many"]
    out["targets"] = {"exactly_one_run_per_record": m["runs"] == m["distinct"] == records and m["deleted"] == 0
                      and m["incomplete"] == 0}
    return out
