"""Many writers: a real `mlflow server` (make tracking-server), on sqlite and on a real PostgreSQL,
with 16 concurrent ingesting processes, and ingest riding out a server that is briefly down."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import make_records

from conftest import REPO

N_WRITERS = 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(root: Path, port: int, backend: str = "") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "results.store.server", "--dir", str(root), "--port", str(port),
                             "--workers", "2", *(("--backend", backend) if backend else ())], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def postgres_database(name: str) -> str:
    """A fresh database on the harness's PostgreSQL (make postgres-up; CI starts it as it starts
    Slurm): its URI, or the test is skipped where none runs (not root)."""
    from results.store import postgres
    if not postgres.is_up():
        pytest.skip("no harness PostgreSQL on this machine (make postgres-up, as root)")
    return postgres.create_database(name)


def wait_healthy(port: int, timeout: float = 90) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow server on port {port} not healthy after {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    import os
    import signal
    os.killpg(proc.pid, signal.SIGTERM)  # uvicorn workers too
    proc.wait(timeout=30)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.slow)])
def server(tmp_path, request):
    """`make tracking-server` on its sqlite file, and on a real PostgreSQL (a database of its own;
    make test-all: CI's make test keeps PostgreSQL in tests/test_postgres_store.py)."""
    port = free_port()
    backend = postgres_database(f"t_{port}") if request.param == "postgres" else ""
    proc = start_server(tmp_path / "tracking", port, backend)
    try:
        wait_healthy(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


def test_16_concurrent_bulk_ingests_give_exactly_one_run_per_record(server, tmp_path):
    """16 `python -m results ingest` of the same 20 records into one tracking server (whose run
    ids no client chooses): one MLflow run per record, none deleted in flight, one sweep parent."""
    import os

    from tests.helpers import concurrent_ingests, store_runs
    dirs = make_records(tmp_path / "runs", 20, sweep="many@1")
    outcomes = concurrent_ingests(tmp_path, N_WRITERS, env={**os.environ, "MLFLOW_TRACKING_URI": server})
    assert all(rc == 0 for rc, _, _ in outcomes), [err[-400:] for _, _, err in outcomes]
    assert sum(int(out.split(": ")[1].split()[0]) for _, out, _ in outcomes) == 20
    assert store_runs(server) == {"run_ids": sorted(d.name for d in dirs), "deleted": 0, "incomplete": 0,
                                  "parents": ["many@1"]}
    from results.store.frames import load_runs
    assert sorted(load_runs(server)["run_id"]) == sorted(d.name for d in dirs)


def test_ingest_waits_out_a_briefly_unreachable_server(tmp_path):
    (d,) = make_records(tmp_path / "runs", 1, sweep="")
    before = {f.name: f.read_bytes() for f in d.iterdir()}
    port = free_port()
    code = "import sys; from results.store.ingest import ingest_run; print(ingest_run(sys.argv[1], sys.argv[2]))"
    ingest = subprocess.Popen([sys.executable, "-c", code, str(d), f"http://127.0.0.1:{port}"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**__import__("os").environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
                                   # a server start took >14 s on a loaded CI machine: the budget
                                   # covers it, so the test checks waiting, not the start's speed
                                   "HARNESS_STORE_BUDGET_S": "120", "HARNESS_INGEST_ATTEMPTS": "20"})
    time.sleep(3)  # the ingest is already failing and backing off
    assert ingest.poll() is None
    proc = start_server(tmp_path / "tracking", port)
    try:
        out, err = ingest.communicate(timeout=120)
        assert ingest.returncode == 0 and out.strip() == "added", err[-500:]
        assert {f.name: f.read_bytes() for f in d.iterdir()} == before  # the record is untouched
    finally:
        stop(proc)
