"""The embedded sqlite MLflow store (results/mlflow.db): made whole or not at all, checked on
open, set aside when damaged.

MLflow creates a new sqlite store by running its ~50 alembic migrations in place. Sixteen
ingesters doing that at once into one file, or one that dies (full disk, kill) half way,
leave a file every later open fails on ("duplicate column name: step", "table
_alembic_tmp_metrics already exists"). Here the schema is built in a temporary file, under a
lock, and renamed into place: the store path holds a complete store or nothing. The schema
is migrated once per machine and copied after that (results/store/empty_store.py).
"""
from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from results.store import empty_store, locks

REBUILD_HINT = "its records are intact: rebuild it from them with `python -m results rebuild-store`"


class StoreDamaged(Exception):
    """The sqlite file exists but is not a complete MLflow store."""


def db_path(uri: str) -> Path | None:
    """The sqlite file of a `sqlite:///` tracking URI, else None."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def lock_file(db: Path) -> Path:
    return db.with_name(f".{db.name}.lock")


def damage(db: Path) -> str:
    """Why the file at `db` is not a complete MLflow store, or "" when it looks complete (the
    schema version recorded and no migration left half done)."""
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
        try:
            tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            version = (con.execute("SELECT version_num FROM alembic_version").fetchall()
                       if "alembic_version" in tables else [])
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        return f"not a readable sqlite database ({e})"
    leftovers = sorted(t for t in tables if t.startswith("_alembic_tmp"))
    if leftovers:
        return f"a schema migration was left half done ({leftovers[0]} exists)"
    if not version or "runs" not in tables:
        return "its schema was never completed (no schema version recorded)"
    head = _head(db)
    if version[0][0] != head:  # a creation stopped between migrations, or a store from another MLflow
        return (f"its schema stops at revision {version[0][0]}, not this MLflow's {head} (a store from an older "
                f"MLflow is brought up to date with `mlflow db upgrade sqlite:///{db}`)")
    return ""


def _head(db: Path) -> str:
    """The schema revision this MLflow's migrations end at."""
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config
    return ScriptDirectory.from_config(_get_alembic_config(f"sqlite:///{db}")).get_current_head()


def ensure(db: Path) -> None:
    """Create the store at `db` if there is none (whole, via a temporary file); raise
    StoreDamaged when the file there is half-made."""
    if not db.exists():
        with locks.held(lock_file(db), "create"):
            if not db.exists():  # another process may have made it while we waited
                _create(db)
    why = damage(db)
    if why:
        raise StoreDamaged(f"MLflow store {db} is damaged: {why}; {REBUILD_HINT}")


def check_writable(db: Path) -> None:
    """A writer's check before it starts: a read-only store (a read-only mount, a folder that
    is not ours) is named as such, rather than by sqlite's "unable to open database file"."""
    folder = db.parent if db.parent.exists() else next(p for p in db.parents if p.exists())
    for p in (db, folder):
        if p.exists() and not os.access(p, os.W_OK):
            raise PermissionError(f"MLflow store {db} is read-only here ({p} is not writable); the records are "
                                  "kept: ingest where the store is writable, or point MLFLOW_TRACKING_URI at a "
                                  "tracking server")


def _create(db: Path) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    db.parent.mkdir(parents=True, exist_ok=True)
    # left by a creator that died (the file, and sqlite's -journal/-wal/-shm beside it); we hold the lock
    for stale in db.parent.glob(f".{db.name}.*.tmp*"):
        stale.unlink(missing_ok=True)
    tmp = db.with_name(f".{db.name}.{os.getpid()}.tmp")
    try:
        copied = empty_store.copy_to(tmp, damage)
        # on an empty file MLflow runs its migrations; on the copy it only adds the Default experiment
        store = SqlAlchemyStore(f"sqlite:///{tmp}", (db.parent / "mlartifacts").resolve().as_uri())
        store.engine.dispose()  # every connection closed before the file moves
        if not copied:
            empty_store.keep(tmp)
        os.replace(tmp, db)
    finally:
        for leftover in (tmp, *(tmp.with_name(tmp.name + x) for x in ("-journal", "-wal", "-shm"))):
            leftover.unlink(missing_ok=True)


def set_aside(db: Path) -> list[Path]:
    """Move a store (the sqlite file and its artifact folder) out of the way under a
    `.damaged-<UTC time>` name, nothing deleted; returns the new paths."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    moved = []
    for p in (db, db.parent / "mlartifacts"):
        if p.exists():
            dest = p.with_name(f"{p.name}.damaged-{stamp}")
            os.replace(p, dest)
            moved.append(dest)
    return moved
