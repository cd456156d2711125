"""The MLflow connection: which store, which experiment, a quiet client. Shared by ingest
(writer) and store (reader), so neither imports the other for it."""
from __future__ import annotations

import os
from pathlib import Path

EXPERIMENT = "mlperf-harness"
COMPLETE_TAG = "ingest_complete"  # "1" once every batch of a run is in; "0" while it is written


def default_tracking_uri(results_root: Path) -> str:
    """MLFLOW_TRACKING_URI if set, else the embedded sqlite store next to the records."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    return uri or f"sqlite:///{Path(results_root).resolve() / 'mlflow.db'}"


def client(uri: str):
    """An MlflowClient for `uri`. A sqlite store that does not exist yet is created whole
    (results/store/sqlite_store.py); one found half-made raises sqlite_store.StoreDamaged."""
    import logging

    from mlflow.tracking import MlflowClient

    from results.store import sqlite_store
    logging.getLogger("mlflow").setLevel(logging.WARNING)  # no alembic chatter in CLI output
    db = sqlite_store.db_path(uri)
    if db is not None:
        sqlite_store.ensure(db)
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run" line per run
    return MlflowClient(tracking_uri=uri)
