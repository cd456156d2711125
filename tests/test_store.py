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
