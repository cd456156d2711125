"""The run index (results/store/frames.py) shows exactly what a full MLflow search shows."""
from __future__ import annotations

import random

import pandas as pd

from results.store.benchmark import write_record
from results.store import frames as store
from results.store.ingest import ingest_all


def test_index_kept_by_ingest_equals_a_full_mlflow_search(tmp_path):
    rng = random.Random(0)
    for r in range(3):
        for c in ("baseline", "+channels_last", "+amp"):
            write_record(tmp_path / "runs", "idx@0001", c, r, rng)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    path = store.index_path(uri)
    ingest_all(tmp_path / "runs", uri)
    store.reindex(uri, path)  # built once from MLflow ...
    write_record(tmp_path / "runs", "idx@0002", "baseline", 0, rng)
    ingest_all(tmp_path / "runs", uri)  # ... then kept current by ingest alone
    indexed = store.load_runs(uri)
    searched = store.load_runs(uri, use_index=False)
    assert len(indexed) == 10 and set(indexed.columns) == set(searched.columns)
    cols = sorted(searched.columns)
    a = indexed[cols].sort_values("run_id").reset_index(drop=True).astype(str)
    b = searched[cols].sort_values("run_id").reset_index(drop=True).astype(str)
    pd.testing.assert_frame_equal(a, b)


def test_a_store_without_an_index_builds_it_on_first_read(tmp_path):
    rng = random.Random(1)
    write_record(tmp_path / "runs", "idx@0003", "baseline", 0, rng)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ingest_all(tmp_path / "runs", uri)
    store.index_path(uri).unlink()
    assert len(store.load_runs(uri)) == 1 and store.index_path(uri).exists()


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert set(a.columns) == set(b.columns)
    cols = sorted(a.columns)
    pd.testing.assert_frame_equal(a[cols].sort_values("run_id").reset_index(drop=True).astype(str),
                                  b[cols].sort_values("run_id").reset_index(drop=True).astype(str))


def test_one_sweep_is_read_alone_and_equals_the_whole_frame_filtered(tmp_path):
    """load_runs(sweeps=...) reads the index by its sweep column; sweep_table() counts without
    loading a run; both agree with the whole frame and with a full MLflow search of a store the
    bulk writer made (so the scale benchmark's stores hold what ingest writes)."""
    from results.store import bulk
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert bulk.write(uri, 300, progress=False) == 300
    table = store.sweep_table(uri)
    assert list(table["runs"]) == [100, 100, 100] and list(table["configs"]) == [10, 10, 10]
    assert table["newest"].is_monotonic_decreasing
    everything = store.load_runs(uri)
    _same(everything, store.load_runs(uri, use_index=False))
    for s in table["sweep"]:
        one = store.load_runs(uri, sweeps=[s])
        assert len(one) == 100
        _same(one, everything[everything["sweep"] == s])
        _same(one, store.load_runs(uri, use_index=False, sweeps=[s]))
    assert store.load_runs(uri, sweeps=["no-such@sweep"]).empty


def test_an_index_of_the_older_layout_is_rebuilt_from_mlflow(tmp_path):
    import sqlite3
    rng = random.Random(2)
    for r in range(2):
        write_record(tmp_path / "runs", "old@0001", "baseline", r, rng)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ingest_all(tmp_path / "runs", uri)
    path = store.index_path(uri)
    store._CONNECTIONS.clear()
    path.unlink()
    con = sqlite3.connect(path)  # layout 1: one JSON row per run, no sweep column, a stale row in it
    con.execute("CREATE TABLE runs (uri TEXT, run_id TEXT, row TEXT, PRIMARY KEY (uri, run_id))")
    con.execute("CREATE TABLE built (uri TEXT PRIMARY KEY, at REAL)")
    con.execute("INSERT INTO runs VALUES (?, 'ghost', '{\"run_id\": \"ghost\"}')", (uri,))
    con.execute("INSERT INTO built VALUES (?, 0)", (uri,))
    con.commit()
    con.close()
    _same(store.load_runs(uri), store.load_runs(uri, use_index=False))
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == store.INDEX_VERSION
