"""The MLflow store under concurrency, poison records and crashes, with real processes and a
real sqlite store: exactly one MLflow run per record however many ingesters race, one bad
record never blocks the rest, and a store killed half-made is detected and rebuilt from the
records (they are the truth)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import REPO
from tests.helpers import concurrent_ingests, ingest_env as _env, make_records, store_runs

N_INGESTERS = 16


def ingest(results: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "results", "ingest", "--results", str(results), *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=600, env=env or _env())


def test_concurrent_first_ingests_into_no_store_give_exactly_one_run_per_record(tmp_path):
    """16 bulk ingests of the same 20 records, started together before any store exists: the
    store is created once, whole, and each record gets one run; nothing is deleted in flight."""
    dirs = make_records(tmp_path / "runs", 20, sweep="race@1")
    outcomes = concurrent_ingests(tmp_path, N_INGESTERS)
    assert all(rc == 0 for rc, _, _ in outcomes), [err[-400:] for _, _, err in outcomes]
    added = [int(out.split(": ")[1].split()[0]) for _, out, _ in outcomes]
    assert sum(added) == 20  # every record added by exactly one ingester; the rest found it present
    got = store_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert got == {"run_ids": sorted(d.name for d in dirs), "deleted": 0, "incomplete": 0, "parents": ["race@1"]}
    assert not list(tmp_path.glob(".mlflow.db.*.tmp"))  # no creator's temporary file left


def test_a_poison_record_fails_alone_with_one_line_and_the_rest_go_in(tmp_path):
    """Labels with quotes (both kinds) and a byte that is not UTF-8 are stored, visibly; a record
    MLflow rejects (a param name that resolves to another path) fails alone, not retried, and
    leaves no half-written run; a second ingest adds nothing and names it again."""
    runs = tmp_path / "runs"
    good = make_records(runs, 2, sweep="plain@1") + make_records(runs, 1, sweep="it's mine@1")
    good += make_records(runs, 1, sweep="b\udcffd \"q\" 'q'@1")
    (poison,) = make_records(runs, 1, sweep="plain@1")
    cfg = json.loads((poison / "config.json").read_text())
    (poison / "config.json").write_text(json.dumps({**cfg, "../evil": 1}))
    first = ingest(tmp_path, env={**_env(), "HARNESS_INGEST_ATTEMPTS": "8"})
    assert first.returncode == 1, first.stderr
    assert "4 added" in first.stdout and "1 rejected by the store" in first.stdout
    lines = first.stderr.strip().splitlines()
    assert len(lines) == 1 and poison.name in lines[0] and "../evil" in lines[0]
    got = store_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert got["run_ids"] == sorted(d.name for d in good) and got["incomplete"] == 0
    assert got["parents"] == sorted(["plain@1", "it's mine@1", "b\\xffd \"q\" 'q'@1"])  # the byte as \xff
    again = ingest(tmp_path)
    assert again.returncode == 1 and "0 added, 4 already present" in again.stdout
    assert store_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")["run_ids"] == got["run_ids"]


KILL_AT = """
import os, signal, sys
from sqlalchemy import event
from sqlalchemy.engine import Engine
count = [0]
@event.listens_for(Engine, "before_cursor_execute")
def die(*_):  # a SIGKILL at a fixed point of the schema's creation: a crash or a full disk
    count[0] += 1
    if count[0] == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
if sys.argv[1] == "harness":
    from results.store.tracking import client
    client("sqlite:///" + sys.argv[2])
else:  # what MLflow does by itself, as this harness did before: migrate the store file in place
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    SqlAlchemyStore("sqlite:///" + sys.argv[2], "file:///tmp/unused")
"""


def kill_mid_creation(how: str, db: Path, at: int) -> None:
    # an empty cache: the harness migrates the schema itself rather than copy this machine's
    # empty store (results/store/empty_store.py), so the kill lands inside the migrations
    env = {**_env(), "HARNESS_CACHE": str(db.parent / "empty-cache")}
    p = subprocess.run([sys.executable, "-c", KILL_AT, how, str(db), str(at)], cwd=REPO, capture_output=True, env=env)
    assert p.returncode == -9, p.stderr[-500:]


def test_a_store_killed_mid_creation_is_never_left_half_made(tmp_path):
    """Killed while the harness creates the store: the store path never holds a half-made
    file, and the next ingest creates it whole."""
    dirs = make_records(tmp_path / "runs", 3, sweep="")
    kill_mid_creation("harness", tmp_path / "mlflow.db", 200)
    assert not (tmp_path / "mlflow.db").exists() and list(tmp_path.glob(".mlflow.db.*.tmp"))
    p = ingest(tmp_path, env=_env())
    assert p.returncode == 0 and "3 added" in p.stdout, p.stderr
    assert not list(tmp_path.glob(".mlflow.db.*.tmp"))
    assert store_runs(f"sqlite:///{tmp_path / 'mlflow.db'}")["run_ids"] == sorted(d.name for d in dirs)


def test_a_half_made_store_is_named_and_rebuilt_from_the_records(tmp_path):
    """A store killed while migrated in place (three points: before the version table, between
    migrations, inside one): ingest says so in one line, exit 2; `rebuild-store` sets it aside
    and fills a new one from the records; on a healthy store it asks for --force."""
    dirs = make_records(tmp_path / "runs", 3, sweep="s@1")
    for at, why in ((20, "never completed"), (200, "schema stops at revision"), (400, "left half done")):
        db = tmp_path / "mlflow.db"
        db.unlink(missing_ok=True)
        kill_mid_creation("mlflow", db, at)
        p = ingest(tmp_path, env=_env())
        assert p.returncode == 2 and p.stdout == "", p.stdout
        (line,) = p.stderr.strip().splitlines()
        assert why in line and "rebuild-store" in line
    before = db.read_bytes()
    rebuilt = subprocess.run([sys.executable, "-m", "results", "rebuild-store", "--results", str(tmp_path)],
                             cwd=REPO, capture_output=True, text=True, timeout=600, env=_env())
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "3 added" in rebuilt.stdout
    (aside,) = tmp_path.glob("mlflow.db.damaged-*")
    assert aside.read_bytes() == before  # set aside, not deleted
    assert store_runs(f"sqlite:///{db}")["run_ids"] == sorted(d.name for d in dirs)
    again = subprocess.run([sys.executable, "-m", "results", "rebuild-store", "--results", str(tmp_path)],
                           cwd=REPO, capture_output=True, text=True, timeout=600, env=_env())
    assert again.returncode == 2 and "--force" in again.stderr and len(again.stderr.strip().splitlines()) == 1


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def test_a_read_only_store_is_named_read_only_in_one_line(tmp_path):
    """The store behind a read-only bind mount (as root, file modes alone don't stop writes)."""
    import pytest
    src, ro = tmp_path / "src", tmp_path / "ro"
    make_records(src / "runs", 1, sweep="")
    assert ingest(src).returncode == 0
    make_records(src / "runs", 1, sweep="")
    ro.mkdir()
    if not (_mount("--bind", str(src), str(ro)) and _mount("-o", "remount,bind,ro", str(ro))):
        subprocess.run(["umount", str(ro)], capture_output=True)
        pytest.skip("no bind mounts here (needs root with CAP_SYS_ADMIN)")
    try:
        p = ingest(ro)
    finally:
        subprocess.run(["umount", str(ro)], check=True)
    assert p.returncode == 2 and p.stdout == ""
    (line,) = p.stderr.strip().splitlines()
    assert "is read-only here" in line and "records are kept" in line


def test_a_full_results_disk_ends_the_run_in_one_line_with_a_failed_record(tmp_path):
    """A 600 KiB tmpfs filled to its last 24 KiB: the run stops at the first write that does
    not fit, says so in one line (exit 2), its status says why, and no temporary file is left."""
    import os

    import pytest
    disk = tmp_path / "disk"
    disk.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)):
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN)")
    try:
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        (disk / "fill").write_bytes(b"\0" * (free - 24 * 1024))
        env = {**_env(), "HARNESS_RESULTS": str(disk), "HARNESS_DATA": str(tmp_path / "data")}
        p = subprocess.run([sys.executable, "-m", "harness", "run", "lm", "--set", "steps=30", "--set",
                            "warmup_steps=1", "--set", "profile_steps=0"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 2, p.stderr[-800:]
        assert p.stderr.strip().splitlines() == ["harness: error: cannot write the results: No space left on device"]
        (rec,) = (disk / "runs").iterdir()
        status = json.loads((rec / "status.json").read_text())
        assert status["status"] == "failed" and "No space left on device" in status["reason"]
        assert not [f for f in disk.rglob("*") if f.name.endswith(".tmp")]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_a_killed_creators_temporary_files_are_removed_by_the_next_creation(tmp_path):
    """A store creation killed mid-way leaves `.mlflow.db.<pid>.tmp` and sqlite's -journal beside
    it; the next creation (under the lock) removes them and makes the store whole."""
    from results.store import sqlite_store
    db = tmp_path / "mlflow.db"
    left = [tmp_path / ".mlflow.db.99999.tmp", tmp_path / ".mlflow.db.99999.tmp-journal"]
    for f in left:
        f.write_bytes(b"half")
    sqlite_store.ensure(db)
    assert db.is_file() and sqlite_store.damage(db) == ""
    assert not any(f.exists() for f in left)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".mlflow.db.") and "tmp" in p.name) == []
