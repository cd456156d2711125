"""The store on a real PostgreSQL (results/store/postgres.py; `make postgres-up`, which CI runs as it
starts Slurm): MLflow's tables made on it, `python -m results migrate` copying the embedded
sqlite store into it run for run (twice: the second copies nothing), and a bad destination
named in one line."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

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


def test_a_database_stores_index_follows_concurrent_writers(tmp_path, monkeypatch):
    """A store on PostgreSQL is written by jobs on other nodes, so its run index is the reader's:
    built once by a full search, then refreshed by ingest time. Read while four ingesters write:
    after they finish, the index holds exactly what a full MLflow search holds."""
    dst = postgres_database("t_refresh")
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))  # the reader's index: tmp_path/run_index.sqlite
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": dst}
    make_records(tmp_path / "first" / "runs", 2, sweep="")
    assert _results(["ingest", "--results", str(tmp_path / "first")], env).returncode == 0
    from results.store.frames import index_path, load_runs
    assert len(load_runs(dst)) == 2 and index_path(dst) == tmp_path / "run_index.sqlite"
    batches = [make_records(tmp_path / f"b{i}" / "runs", 3, sweep="conc@1") for i in range(4)]
    procs = [subprocess.Popen([sys.executable, "-m", "results", "ingest", "--results", str(tmp_path / f"b{i}")],
                              cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    seen = []
    while any(p.poll() is None for p in procs):
        seen.append(len(load_runs(dst)))  # never fewer than before, never a run twice
        time.sleep(0.5)
    assert all(p.wait() == 0 for p in procs), [p.stderr.read() for p in procs]
    final = load_runs(dst)
    want = sorted(d.name for b in batches for d in b) + []
    assert seen == sorted(seen) and final["run_id"].is_unique
    assert sorted(final["run_id"]) == sorted(load_runs(dst, use_index=False)["run_id"])
    assert set(want) <= set(final["run_id"]) and len(final) == 14
    assert sorted(load_runs(dst, sweeps=["conc@1"])["run_id"]) == want


@pytest.mark.slow
def test_a_full_database_disk_stops_the_ingest_in_one_line_and_loses_nothing(tmp_path):
    """The database in a tablespace on a 24 MB tmpfs filled to its last 256 KiB: the ingest stops
    at the first write that does not fit, one line naming the store and the full disk (exit 2);
    once there is space again the next ingest adds every record exactly once."""
    from results.store import postgres
    from tests.test_store_safety import _mount
    if not postgres.is_up():
        pytest.skip("no harness PostgreSQL on this machine (make postgres-up, as root)")
    import tempfile
    disk = Path(tempfile.mkdtemp(prefix="harness-pgdisk-", dir="/var/tmp"))  # where the postgres user can reach
    disk.chmod(0o755)
    if not _mount("-t", "tmpfs", "-o", "size=24m", "tmpfs", str(disk)):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        (disk / "ts").mkdir()
        dst = postgres.create_database("t_full", location=disk / "ts")
        env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": dst, "HARNESS_STORE_BUDGET_S": "20"}
        first = make_records(tmp_path / "a" / "runs", 1, sweep="")
        assert _results(["ingest", "--results", str(tmp_path / "a")], env).returncode == 0  # schema + experiment
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        (disk / "fill").write_bytes(b"\0" * (free - 256 * 1024))
        more = make_records(tmp_path / "b" / "runs", 40, sweep="")
        p = _results(["ingest", "--results", str(tmp_path / "b")], env)
        assert p.returncode == 2 and p.stdout == "", p.stdout + p.stderr
        (line,) = p.stderr.strip().splitlines()
        assert "out of disk space" in line and "No space left on device" in line and "t_full" in line, line
        assert "harness:harness@" not in line  # the password is not printed
        (disk / "fill").unlink()
        p = _results(["ingest", "--results", str(tmp_path / "b")], env)
        assert p.returncode == 0, p.stderr
        got = store_runs(dst)
        assert got["run_ids"] == sorted(d.name for d in first + more) and got["incomplete"] == 0
    finally:
        if postgres.is_up():
            postgres.drop_database("t_full")
        subprocess.run(["umount", str(disk)], check=True)
        disk.rmdir()


@pytest.mark.slow
def test_rebuild_store_against_a_database_restores_missing_runs_and_the_index(tmp_path, monkeypatch):
    dst = postgres_database("t_rebuild")
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": dst}
    dirs = make_records(tmp_path / "runs", 3, sweep="")
    assert _results(["ingest", "--results", str(tmp_path)], env).returncode == 0
    from mlflow.tracking import MlflowClient

    from results.store.frames import load_runs
    assert len(load_runs(dst)) == 3
    c = MlflowClient(dst)
    (lost,) = c.search_runs([c.get_experiment_by_name("mlperf-harness").experiment_id],
                            f"tags.run_id = '{dirs[0].name}'")
    c.delete_run(lost.info.run_id)  # a run lost from the database (an administrator's mistake)
    p = _results(["rebuild-store", "--results", str(tmp_path)], env)
    assert p.returncode == 0 and "not set aside" in p.stdout and "1 added, 2 already present" in p.stdout, \
        p.stdout + p.stderr
    assert store_runs(dst)["run_ids"] == sorted(d.name for d in dirs)
    assert sorted(load_runs(dst)["run_id"]) == sorted(d.name for d in dirs)
