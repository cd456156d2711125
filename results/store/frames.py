"""Read side: pandas frames from the MLflow store for the CLI summaries and the portal.

MLflow is the store of record, but a full `search_runs` grows with the run count (every param,
metric and tag of every run). So ingest also keeps a run index: one row per run, exactly the
columns load_runs() returns, in a sqlite file beside the records (results/run_index.sqlite).
load_runs() reads the index when it has been built for that tracking URI, otherwise it searches
MLflow once and builds it. `python -m results reindex` (or the portal's "Re-read MLflow") rebuilds
it from MLflow, e.g. after runs were logged from other machines straight to a tracking server.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pandas as pd

from results.record import paths
from results.record import schema
from results.store.sqlite_store import db_path
from results.store.tracking import COMPLETE_TAG, EXPERIMENT, default_tracking_uri, client as _client

INDEX = "run_index.sqlite"
# MLflow tag -> our column
_TAGS = {"run_id": "run_id", "variant": "variant", "workload": "workload", "size": "size", "device": "device",
         "status": "status", "status_reason": "reason", "sweep": "sweep", "git_sha": "git_sha", "host": "host",
         "slurm_job_id": "slurm_job_id", "slurm_array_job_id": "slurm_array_job_id",
         "slurm_array_task_id": "slurm_array_task_id", "scheduler": "scheduler", "job_id": "job_id",
         "array_task_id": "array_task_id", "toggles_on": "toggles_on", "record_dir": "record_dir",
         "roofline_device": "roofline_device", "roofline_dtype": "roofline_dtype"}
COLUMNS = ["mlflow_run_id", "mlflow_status", "started", *_TAGS.values()]


def row(mlflow_run_id: str, mlflow_status: str, start_ms: int, tags: dict, params: dict, metrics: dict) -> dict:
    """One run as load_runs() shows it: our tags, latest metric values, then params under their
    config names (mode, seed, toggles.x ...) unless a tag already gave the column."""
    out = {"mlflow_run_id": mlflow_run_id, "mlflow_status": mlflow_status, "started": start_ms}
    out.update({col: tags[k] for k, col in _TAGS.items() if k in tags})
    out.update(metrics)
    out.update({k: v for k, v in params.items() if k not in out})
    return out


def _frame(rows: list[dict]) -> pd.DataFrame:
    if not rows:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.DataFrame(rows)
    df["started"] = pd.to_datetime(df["started"], unit="ms", utc=True)
    df["repeat"] = pd.to_numeric(df.get("repeat"), errors="coerce").fillna(0).astype(int)
    return df.sort_values("started").reset_index(drop=True)


# -- the index -------------------------------------------------------------------------------------
def index_path(tracking_uri: str) -> Path:
    """Beside the sqlite file for a sqlite store; under HARNESS_RESULTS (or results/) for a
    tracking server, where only the reader builds it (sqlite files and network filesystems
    don't mix, so jobs on other nodes never write it)."""
    if tracking_uri.startswith("sqlite:///"):
        return Path(tracking_uri[len("sqlite:///"):]).parent / INDEX
    return paths.results_root() / INDEX


_CONNECTIONS: dict[tuple[Path, int], sqlite3.Connection] = {}


def _db(path: Path) -> sqlite3.Connection:
    """One connection per index file per thread (sqlite connections must stay in their thread;
    Streamlit runs each page in its own), reused across the many runs one ingest writes."""
    key = (path, threading.get_ident())
    if key not in _CONNECTIONS or not path.exists():
        _CONNECTIONS[key] = _connect(path)
    return _CONNECTIONS[key]


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, timeout=60)  # many ingesters: wait for the writer lock, don't fail
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("CREATE TABLE IF NOT EXISTS runs (uri TEXT, run_id TEXT, row TEXT, PRIMARY KEY (uri, run_id))")
    con.execute("CREATE TABLE IF NOT EXISTS built (uri TEXT PRIMARY KEY, at REAL)")
    return con


def index_upsert(path: Path, uri: str, r: dict) -> None:
    with _db(path) as con:
        con.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?)", (uri, r["run_id"], json.dumps(r, default=str)))


def mark_built(path: Path, uri: str) -> None:
    """The index holds every run of `uri` (it was built from MLflow, or began with the store)."""
    import time
    with _db(path) as con:
        con.execute("INSERT OR REPLACE INTO built VALUES (?, ?)", (uri, time.time()))


def forget(path: Path, uri: str) -> None:
    """Drop the index of `uri` (its store was set aside): the next reader or ingest starts afresh."""
    if path.exists():
        with _db(path) as con:
            con.execute("DELETE FROM runs WHERE uri = ?", (uri,))
            con.execute("DELETE FROM built WHERE uri = ?", (uri,))


def index_read(path: Path, uri: str) -> pd.DataFrame | None:
    """The indexed runs of `uri`, or None when the index was never built for it."""
    con = _built_db(path, uri)
    if con is None:
        return None
    with con:
        rows = [json.loads(r) for (r,) in con.execute("SELECT row FROM runs WHERE uri = ?", (uri,))]
    return _frame(rows)


def index_run_ids(path: Path, uri: str) -> set[str] | None:
    """run_ids of the complete runs of `uri` in the index, or None when it was never built."""
    con = _built_db(path, uri)
    if con is None:
        return None
    with con:
        return {r for (r,) in con.execute("SELECT run_id FROM runs WHERE uri = ?", (uri,))}


def _built_db(path: Path, uri: str) -> sqlite3.Connection | None:
    """The index connection when the index was built for `uri`, else None."""
    if not path.exists():
        return None
    con = _db(path)
    return con if con.execute("SELECT 1 FROM built WHERE uri = ?", (uri,)).fetchone() else None


def index_key(tracking_uri: str) -> str:
    """What the index files a store's runs under. A sqlite store: its URI (ingest keeps that index
    current; rebuild-store forgets it). A server or database: its URI and its experiment's id and
    creation time, so a store dropped and made again at the same address (a database recreated,
    a server moved to a fresh backend) is never read through the old one's index."""
    if db_path(tracking_uri) is not None:
        return tracking_uri
    exp = _client(tracking_uri).get_experiment_by_name(EXPERIMENT)
    return tracking_uri if exp is None else f"{tracking_uri}#{exp.experiment_id}@{exp.creation_time}"


def reindex(tracking_uri: str, path: Path, experiment: str = EXPERIMENT) -> pd.DataFrame:
    """Rebuild the index for `tracking_uri` from a full MLflow search."""
    df_rows = _search(tracking_uri, experiment)
    key = index_key(tracking_uri)
    with _db(path) as con:
        con.execute("DELETE FROM runs WHERE uri = ?", (key,))
        con.executemany("INSERT OR REPLACE INTO runs VALUES (?, ?, ?)",
                        [(key, r["run_id"], json.dumps(r, default=str)) for r in df_rows])
    mark_built(path, key)
    return _frame(df_rows)


def _search(tracking_uri: str, experiment: str) -> list[dict]:
    db = db_path(tracking_uri)
    if db is not None and not db.exists():  # readers never create a store
        return []
    client = _client(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    out, token = [], None
    while True:  # paged: MLflow returns at most 50,000 runs per call
        page = client.search_runs([exp.experiment_id], f"tags.kind = 'run' and tags.{COMPLETE_TAG} = '1'",
                                  max_results=10_000, page_token=token)
        out += [row(r.info.run_id, r.info.status, r.info.start_time, r.data.tags, r.data.params, r.data.metrics)
                for r in page]
        token = page.token
        if not token:
            return out


def load_runs(tracking_uri: str | None = None, experiment: str = EXPERIMENT, use_index: bool = True) -> pd.DataFrame:
    """One row per run: identity, toggles (`toggles.x`), status, and summary metrics
    (`median_step_s`, `samples_per_s`, `quality`, ...). Empty frame when there are no runs.
    Without a URI: the project's store (MLFLOW_TRACKING_URI, else the one under HARNESS_RESULTS),
    as mlflow.search_runs() uses the default tracking URI."""
    if tracking_uri is None:
        tracking_uri = default_tracking_uri(paths.results_root())
    db = db_path(tracking_uri)
    if db is not None and not db.exists():  # a reader never creates a store, nor an index beside none
        return _frame([])
    if not use_index or experiment != EXPERIMENT:
        return _frame(_search(tracking_uri, experiment))
    path = index_path(tracking_uri)
    df = index_read(path, index_key(tracking_uri))
    return df if df is not None else reindex(tracking_uri, path, experiment)


def step_samples(record_dir: str, phase: str = "steady") -> list[float]:
    """Raw step times (s) of one run, read from its record (the source of truth)."""
    return [m["step_s"] for m in schema.read_metrics(Path(record_dir))
            if m.get("kind") == "step" and m.get("phase") == phase]
