"""The store on a real PostgreSQL (results/store/postgres.py; `make postgres-up`, which CI runs as it
starts Slurm): MLflow's tables made on it, `python -m results migrate` copying the embedded
sqlite store into it run for run (twice: the second copies nothing), and a bad destination
named in one line."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.helpers import make_records, store_runs
from tests.test_tracking_server import postgres_database


def _results(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "results", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


def test_migrate_copies_the_sqlite_store_into_postgresql_run_for_run_and_is_idempotent(tmp_path):
    dst = postgres_database("t_migrate")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    dirs = make_records(tmp_path / "runs", 6, sweep="mig@1")
    p = _results(["ingest", "--results", str(tmp_path)], env)
    assert p.returncode == 0, p.stderr
    src = f"sqlite:///{tmp_path / 'mlflow.db'}"
    p = _results(["migrate", "--results", str(tmp_path), "--to", dst], env)
    assert p.returncode == 0, p.stderr
    assert "6 copied, 0 already there" in p.stdout
    want = store_runs(src)
    assert store_runs(dst) == want == {"run_ids": sorted(d.name for d in dirs), "deleted": 0, "incomplete": 0,
                                       "parents": ["mig@1"]}
    from mlflow.tracking import MlflowClient
    a, b = MlflowClient(src), MlflowClient(dst)
    ea, eb = (c.get_experiment_by_name("mlperf-harness").experiment_id for c in (a, b))
    for d in dirs:  # the same parameters, the same metric histories, the same artifacts
        (ra,) = a.search_runs([ea], f"tags.run_id = '{d.name}'")
        (rb,) = b.search_runs([eb], f"tags.run_id = '{d.name}'")
        assert ra.data.params == rb.data.params and ra.data.metrics == rb.data.metrics
        assert ra.info.status == rb.info.status and ra.info.start_time == rb.info.start_time
        assert [(m.step, m.value) for m in a.get_metric_history(ra.info.run_id, "loss")] == \
               [(m.step, m.value) for m in b.get_metric_history(rb.info.run_id, "loss")]
        assert sorted(x.path for x in a.list_artifacts(ra.info.run_id)) == \
               sorted(x.path for x in b.list_artifacts(rb.info.run_id))
        parent = b.get_run(rb.data.tags["mlflow.parentRunId"])
        assert parent.data.tags["sweep"] == "mig@1"
    p = _results(["migrate", "--results", str(tmp_path), "--to", dst], env)  # again: nothing to do
    assert p.returncode == 0 and "0 copied, 6 already there" in p.stdout, p.stdout + p.stderr
    assert store_runs(dst) == want


def test_ingest_straight_into_postgresql_and_the_readers_see_it(tmp_path):
    """Jobs pointed at the database itself (MLFLOW_TRACKING_URI=postgresql+psycopg://...): ingest
    writes, load_runs reads the same runs back."""
    dst = postgres_database("t_direct")
    dirs = make_records(tmp_path / "runs", 3, sweep="")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": dst}
    p = _results(["ingest", "--results", str(tmp_path)], env)
    assert p.returncode == 0 and "3 added" in p.stdout, p.stdout + p.stderr
    from results.store.frames import load_runs
    assert sorted(load_runs(dst)["run_id"]) == sorted(d.name for d in dirs)


@pytest.mark.parametrize("to, fragment", [
    ("", "migrate needs --to URI"),
    ("postgresql+psycopg://harness:wrong@127.0.0.1:1/none", "results: error:"),
])
def test_a_bad_migrate_destination_is_one_line_exit_2(tmp_path, to, fragment):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HARNESS_STORE_BUDGET_S": "5"}
    env.pop("MLFLOW_TRACKING_URI", None)
    make_records(tmp_path / "runs", 1, sweep="")
    assert _results(["ingest", "--results", str(tmp_path)], env).returncode == 0
    p = _results(["migrate", "--results", str(tmp_path), *(("--to", to) if to else ())], env)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and fragment in p.stderr, p.stderr


def _restart_postgres() -> None:
    """pg_ctl restart of the harness's cluster (every open connection dropped)."""
    from results.store import postgres
    b = postgres.bindir()
    data = postgres.BASE / str(postgres.DEFAULT_PORT)
    # -l: the restarted server logs to its file, not to our pipes (which it would hold open)
    subprocess.run(["runuser", "-u", "postgres", "--", str(b / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"),
                    "-m", "fast", "-w", "restart"], check=True, capture_output=True, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["server killed", "postgres restarted"])
def test_a_fault_mid_ingest_loses_nothing_and_duplicates_nothing(tmp_path, fault):
    """An ingest of 40 records into the PostgreSQL-backed server is cut halfway (the server killed
    and started again, or PostgreSQL restarted under it); the next ingest leaves exactly one
    complete run per record, none half-written, and the records untouched."""
    from tests.test_tracking_server import free_port, start_server, stop, wait_healthy
    port = free_port()
    backend = postgres_database(f"t_fault_{port}")
    dirs = make_records(tmp_path / "runs", 40, sweep="fault@1")
    before = {d.name: sorted((f.name, f.stat().st_size) for f in d.iterdir()) for d in dirs}
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": url, "HARNESS_STORE_BUDGET_S": "5"}
    proc = start_server(tmp_path / "tracking", port, backend)
    try:
        wait_healthy(port)
        ingest = subprocess.Popen([sys.executable, "-m", "results", "ingest", "--results", str(tmp_path)], cwd=REPO,
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        from mlflow.tracking import MlflowClient
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:  # cut it once some runs are in
            exp = MlflowClient(url).get_experiment_by_name("mlperf-harness")
            if exp and len(MlflowClient(url).search_runs([exp.experiment_id], "tags.kind = 'run'")) >= 5:
                break
            time.sleep(0.3)
        if fault == "server killed":
            stop(proc)
            proc = start_server(tmp_path / "tracking", port, backend)
            wait_healthy(port)
        else:
            _restart_postgres()
        ingest.communicate(timeout=600)  # it may finish or give up within its budget: either is allowed
        p = _results(["ingest", "--results", str(tmp_path)], env)  # the next ingest completes the store
        assert p.returncode == 0, p.stderr[-1000:]
        got = store_runs(url)
        assert got["run_ids"] == sorted(d.name for d in dirs) and got["incomplete"] == 0, got
        assert got["parents"] == ["fault@1"]
        assert {d.name: sorted((f.name, f.stat().st_size) for f in d.iterdir()) for d in dirs} == before
    finally:
        stop(proc)
