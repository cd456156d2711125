"""A new sqlite store is a copy of this machine's empty store (results/store/empty_store.py):
migrated once per MLflow version, copied after that, each copy with its own Default
experiment; a bad template or an unwritable cache falls back to MLflow's migrations."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import mlflow.store.db.utils
import pytest

from results.store import empty_store, sqlite_store


def _experiments(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT experiment_id, name, artifact_location FROM experiments").fetchall()
    finally:
        con.close()


def _default(db: Path) -> list[tuple]:
    return [(0, "Default", (db.parent / "mlartifacts").resolve().as_uri() + "/0")]


def test_the_second_store_is_a_copy_with_its_own_default_experiment(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    first = tmp_path / "a" / "mlflow.db"
    sqlite_store.ensure(first)
    assert sqlite_store.damage(first) == "" and _experiments(first) == _default(first)
    template = empty_store.template()
    assert template.parent == tmp_path / "cache" and sqlite_store.damage(template) == ""
    assert _experiments(template) == []  # no row naming the first store's folder

    def no_migrations(engine):
        raise AssertionError("the schema was migrated again")
    monkeypatch.setattr(mlflow.store.db.utils, "_initialize_tables", no_migrations)
    second = tmp_path / "b" / "mlflow.db"
    sqlite_store.ensure(second)
    assert sqlite_store.damage(second) == "" and _experiments(second) == _default(second)
    client = mlflow.MlflowClient(f"sqlite:///{second}")
    run = client.create_run(client.create_experiment("w")).info.run_id
    client.log_metric(run, "step_ms", 1.5)
    assert client.get_run(run).data.metrics == {"step_ms": 1.5}
    assert _experiments(first) == _default(first)  # the first store untouched by the copy


@pytest.mark.parametrize("bad", ["garbage", "other revision"])
def test_a_bad_template_is_ignored_and_made_again(tmp_path, monkeypatch, bad):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    template = empty_store.template()
    if bad == "garbage":
        template.parent.mkdir(parents=True)
        template.write_bytes(b"not a store" * 100)
    else:
        sqlite_store.ensure(tmp_path / "a" / "mlflow.db")
        con = sqlite3.connect(template)
        with con:
            con.execute("UPDATE alembic_version SET version_num = 'abc123'")
        con.close()
    assert sqlite_store.damage(template) != ""
    db = tmp_path / "b" / "mlflow.db"
    sqlite_store.ensure(db)
    assert sqlite_store.damage(db) == "" and _experiments(db) == _default(db)
    assert sqlite_store.damage(template) == "" and _experiments(template) == []


def test_a_template_that_fails_to_copy_only_costs_the_migrations(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    sqlite_store.ensure(tmp_path / "a" / "mlflow.db")

    def broken(src, dest):
        dest.write_bytes(b"half a copy")
        raise sqlite3.DatabaseError("database disk image is malformed")
    monkeypatch.setattr(empty_store, "_backup", broken)
    db = tmp_path / "b" / "mlflow.db"
    sqlite_store.ensure(db)
    assert sqlite_store.damage(db) == "" and _experiments(db) == _default(db)


def test_an_unwritable_cache_only_costs_the_migrations(tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path / "cache"))
    db = tmp_path / "a" / "mlflow.db"
    sqlite_store.ensure(db)
    assert sqlite_store.damage(db) == "" and _experiments(db) == _default(db)
    assert not list(tmp_path.glob("a/.mlflow.db.*.tmp*")) and (tmp_path / "cache").is_file()
