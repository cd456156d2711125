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
from results.store.tracking import COMPLETE_TAG, EXPERIMENT, INGESTED_AT, database_rows, default_tracking_uri, filter_value, client as _client

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


INDEX_VERSION = 2  # 2: sweep, started and variant as columns (one sweep read without decoding the rest)


def _connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, timeout=60, isolation_level=None)  # many ingesters: wait for the writer lock
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("BEGIN IMMEDIATE")  # one process at a time checks and (re)makes the schema
    try:
        if con.execute("PRAGMA user_version").fetchone()[0] != INDEX_VERSION:
            # an index of an older layout is a cache: dropped, and rebuilt from MLflow by the next reader
            con.execute("DROP TABLE IF EXISTS runs")
            con.execute("DROP TABLE IF EXISTS built")
            con.execute(f"PRAGMA user_version = {INDEX_VERSION}")
        con.execute("CREATE TABLE IF NOT EXISTS runs (uri TEXT, run_id TEXT, sweep TEXT, started INTEGER, "
                    "variant TEXT, row TEXT, PRIMARY KEY (uri, run_id))")
        con.execute("CREATE INDEX IF NOT EXISTS runs_by_sweep ON runs (uri, sweep)")
        # at: when the index was built or last brought up to date (local clock, s), for refresh()
        con.execute("CREATE TABLE IF NOT EXISTS built (uri TEXT PRIMARY KEY, at REAL)")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.isolation_level = ""  # back to implicit transactions: `with con:` commits each write
    return con


def _values(uri: str, r: dict) -> tuple:
    return (uri, r["run_id"], r.get("sweep") or "", int(r.get("started") or 0), r.get("variant") or "",
            json.dumps(r, default=str))


def index_upsert(path: Path, uri: str, r: dict) -> None:
    with _db(path) as con:
        con.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)", _values(uri, r))


def index_upsert_many(path: Path, uri: str, rows: list[dict]) -> None:
    with _db(path) as con:
        con.executemany("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)", [_values(uri, r) for r in rows])


def mark_built(path: Path, uri: str, at: float | None = None) -> None:
    """The index holds every run of `uri` (it was built from MLflow, or began with the store),
    as of `at` (now unless given)."""
    import time
    with _db(path) as con:
        con.execute("INSERT OR REPLACE INTO built VALUES (?, ?)", (uri, time.time() if at is None else at))


def built_at(path: Path, uri: str) -> float | None:
    """When the index of `uri` was built or last refreshed (s since the epoch), None if never."""
    if not path.exists():
        return None
    hit = _db(path).execute("SELECT at FROM built WHERE uri = ?", (uri,)).fetchone()
    return None if hit is None else hit[0]


def forget(path: Path, uri: str) -> None:
    """Drop the index of `uri` (its store was set aside): the next reader or ingest starts afresh."""
    if path.exists():
        with _db(path) as con:
            con.execute("DELETE FROM runs WHERE uri = ?", (uri,))
            con.execute("DELETE FROM built WHERE uri = ?", (uri,))


def index_read(path: Path, uri: str, sweeps: list[str] | None = None) -> pd.DataFrame | None:
    """The indexed runs of `uri` (only those of `sweeps` when given), or None when the index was
    never built for it."""
    con = _built_db(path, uri)
    if con is None:
        return None
    with con:
        if sweeps is None:
            cur = con.execute("SELECT row FROM runs WHERE uri = ?", (uri,))
        else:
            marks = ",".join("?" * len(sweeps))
            cur = con.execute(f"SELECT row FROM runs WHERE uri = ? AND sweep IN ({marks})", (uri, *sweeps))
        rows = [json.loads(r) for (r,) in cur]
    return _frame(rows)


def index_sweeps(path: Path, uri: str) -> pd.DataFrame | None:
    """One row per sweep of `uri`'s index: sweep, runs, configs (distinct variants), newest
    (start of its latest run, UTC); runs of no sweep are the row whose sweep is "". None when
    the index was never built."""
    con = _built_db(path, uri)
    if con is None:
        return None
    with con:
        rows = con.execute("SELECT sweep, COUNT(*), COUNT(DISTINCT variant), MAX(started) FROM runs "
                           "WHERE uri = ? GROUP BY sweep", (uri,)).fetchall()
    out = pd.DataFrame(rows, columns=["sweep", "runs", "configs", "newest"])
    out["newest"] = pd.to_datetime(out["newest"], unit="ms", utc=True)
    return out.sort_values("newest", ascending=False).reset_index(drop=True)


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
    rows = database_rows(tracking_uri, "SELECT experiment_id, creation_time FROM experiments WHERE name = %s AND "
                         "lifecycle_stage = 'active'", (EXPERIMENT,))
    if rows is not None:  # a database: the same two values, without starting MLflow's client
        return tracking_uri if not rows else f"{tracking_uri}#{rows[0][0]}@{rows[0][1]}"
    exp = _client(tracking_uri).get_experiment_by_name(EXPERIMENT)
    return tracking_uri if exp is None else f"{tracking_uri}#{exp.experiment_id}@{exp.creation_time}"


def reindex(tracking_uri: str, path: Path, experiment: str = EXPERIMENT) -> pd.DataFrame:
    """Rebuild the index for `tracking_uri` from a full MLflow search."""
    import time
    t0 = time.time()  # the search's start: a refresh later looks again at anything ingested during it
    df_rows = _search(tracking_uri, experiment)
    key = index_key(tracking_uri)
    with _db(path) as con:
        con.execute("DELETE FROM runs WHERE uri = ?", (key,))
        con.executemany("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)", [_values(key, r) for r in df_rows])
    mark_built(path, key, t0)
    return _frame(df_rows)


# A refresh looks back this far before the last one (s): the ingest time is the ingesting host's
# clock, and a run is searchable only once its last batch is in (clock skew, slow writers).
REFRESH_MARGIN_S = 120.0


def refresh(tracking_uri: str, path: Path) -> int:
    """Bring the index of a server or database store up to date with the runs ingested since it
    was built or last refreshed: one MLflow search on ingest's `ingested_at_s` metric, not a
    full one. (A sqlite store's index is written by ingest itself.) Returns the runs upserted;
    -1 when there is no index to refresh."""
    import time
    key = index_key(tracking_uri)
    at = built_at(path, key)
    if at is None:
        return -1
    t0 = time.time()
    since = at - REFRESH_MARGIN_S
    new = database_rows(tracking_uri, "SELECT COUNT(*) FROM latest_metrics m JOIN runs r ON r.run_uuid = m.run_uuid "
                        "WHERE m.key = %s AND m.value >= %s AND r.lifecycle_stage = 'active'", (INGESTED_AT, since))
    if new is not None and (not new or new[0][0] == 0):  # a database with nothing new: no MLflow search at all
        mark_built(path, key, t0)
        return 0
    rows = _search(tracking_uri, EXPERIMENT, f" and metrics.{INGESTED_AT} >= {since:.3f}")
    index_upsert_many(path, key, rows)
    mark_built(path, key, t0)
    return len(rows)


def _search(tracking_uri: str, experiment: str, extra: str = "") -> list[dict]:
    db = db_path(tracking_uri)
    if db is not None and not db.exists():  # readers never create a store
        return []
    client = _client(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    out, token = [], None
    while True:  # paged: MLflow returns at most 50,000 runs per call
        page = client.search_runs([exp.experiment_id], f"tags.kind = 'run' and tags.{COMPLETE_TAG} = '1'{extra}",
                                  max_results=10_000, page_token=token)
        out += [row(r.info.run_id, r.info.status, r.info.start_time, r.data.tags, r.data.params, r.data.metrics)
                for r in page]
        token = page.token
        if not token:
            return out


def _sweep_filter(sweeps: list[str]) -> list[str]:
    """MLflow filter clauses, one per sweep (its language has no IN over tags)."""
    return [f" and tags.sweep = {filter_value(s)}" for s in sweeps]


def _index(tracking_uri: str, experiment: str) -> tuple[Path, str] | None:
    """The run index's file and key for this store, built (or, for a server, refreshed) so that
    it holds every complete run; None when the index is not used (another experiment)."""
    if experiment != EXPERIMENT:
        return None
    path, key = index_path(tracking_uri), index_key(tracking_uri)
    if built_at(path, key) is None:
        reindex(tracking_uri, path, experiment)
    elif db_path(tracking_uri) is None:
        refresh(tracking_uri, path)
    return path, key


def load_runs(tracking_uri: str | None = None, experiment: str = EXPERIMENT, use_index: bool = True,
              sweeps: list[str] | None = None) -> pd.DataFrame:
    """One row per run: identity, toggles (`toggles.x`), status, and summary metrics
    (`median_step_s`, `samples_per_s`, `quality`, ...); only the runs of `sweeps` when given
    (read from the index by its sweep column: the other runs are never decoded). Empty frame
    when there are no runs. Without a URI: the project's store (MLFLOW_TRACKING_URI, else the
    one under HARNESS_RESULTS), as mlflow.search_runs() uses the default tracking URI."""
    if tracking_uri is None:
        tracking_uri = default_tracking_uri(paths.results_root())
    db = db_path(tracking_uri)
    if db is not None and not db.exists():  # a reader never creates a store, nor an index beside none
        return _frame([])
    found = _index(tracking_uri, experiment) if use_index else None
    if found is None:
        if sweeps is None:
            return _frame(_search(tracking_uri, experiment))
        return _frame([r for clause in _sweep_filter(sweeps) for r in _search(tracking_uri, experiment, clause)])
    return index_read(*found, sweeps)


def sweep_table(tracking_uri: str | None = None) -> pd.DataFrame:
    """One row per sweep in the store: sweep, runs, configs, newest (UTC), newest first (runs of
    no sweep: sweep ""); read from the run index without loading any run's row. Empty when there
    is no store."""
    if tracking_uri is None:
        tracking_uri = default_tracking_uri(paths.results_root())
    db = db_path(tracking_uri)
    empty = pd.DataFrame({"sweep": pd.Series(dtype=str), "runs": pd.Series(dtype=int),
                          "configs": pd.Series(dtype=int), "newest": pd.Series(dtype="datetime64[ns, UTC]")})
    if db is not None and not db.exists():
        return empty
    return index_sweeps(*_index(tracking_uri, EXPERIMENT))


def step_samples(record_dir: str, phase: str = "steady") -> list[float]:
    """Raw step times (s) of one run, read from its record (the source of truth)."""
    return [m["step_s"] for m in schema.read_metrics(Path(record_dir))
            if m.get("kind") == "step" and m.get("phase") == phase]
