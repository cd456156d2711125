"""The MLflow connection: which store, which experiment, a quiet client. Shared by ingest
(writer) and store (reader), so neither imports the other for it."""
from __future__ import annotations

import os
from pathlib import Path

EXPERIMENT = "mlperf-harness"
COMPLETE_TAG = "ingest_complete"  # "1" once every batch of a run is in; "0" while it is written
# metric: when the run was ingested (s since the epoch, the ingesting host's clock); a reader of a
# server store refreshes its run index by it (results/store/frames.refresh)
INGESTED_AT = "ingested_at_s"
STORE_BUDGET_S = 30.0  # most seconds a run or an ingest spends on a store that is down or failing
HTTP_TIMEOUT_S = 10.0  # one HTTP request to a tracking server, at most (MLflow's default is 120 s)


def filter_value(value: str) -> str:
    """`value` as a quoted string in an MLflow filter. MLflow strips one pair of quotes and
    knows no escapes, so a value is quoted with the kind it does not contain."""
    for q in ("'", '"'):
        if q not in value:
            return f"{q}{value}{q}"
    raise ValueError(f"{value[:80]!r} holds both kinds of quote; MLflow's filter language cannot match it")


def store_budget_s() -> float:
    """HARNESS_STORE_BUDGET_S (seconds, > 0) or 30: the time bound on an unreachable store."""
    raw = os.environ.get("HARNESS_STORE_BUDGET_S", "")
    try:
        v = float(raw) if raw else STORE_BUDGET_S
    except ValueError:
        raise ValueError(f"HARNESS_STORE_BUDGET_S must be a number of seconds; got {raw!r}") from None
    if not v > 0:
        raise ValueError(f"HARNESS_STORE_BUDGET_S must be > 0 seconds; got {raw!r}")
    return v


def bound_http(uri: str) -> None:
    """Fold MLflow's own HTTP retries into ours (results/store/ingest.ingest_run retries within
    the store budget): left alone, MLflow retries a refused connection or a 5xx 7 times with
    backoff, each request waiting up to 120 s, which made one run wait ~8.5 minutes on a down
    server. Its retries go to 0 and a request's timeout to at most 10 s and the budget."""
    if not uri.startswith(("http://", "https://")):
        return
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    try:
        mine = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", HTTP_TIMEOUT_S))
    except ValueError:
        mine = HTTP_TIMEOUT_S
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, int(min(mine, HTTP_TIMEOUT_S, store_budget_s()))))


def _pg_connect(uri: str):
    """A psycopg connection to a PostgreSQL store, bounded by the store budget; ConnectionError
    naming it when it does not answer."""
    from sqlalchemy.engine import make_url
    u = make_url(uri)
    import psycopg
    try:
        return psycopg.connect(host=u.host or "127.0.0.1", port=u.port or 5432, user=u.username, password=u.password,
                               dbname=u.database, connect_timeout=max(1, int(min(store_budget_s(), HTTP_TIMEOUT_S))))
    except psycopg.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConnectionError(f"PostgreSQL store {u.host}:{u.port}/{u.database} unreachable: {first}") from None


def reachable_database(uri: str) -> None:
    """A PostgreSQL store must answer within the store budget: ConnectionError naming it, else
    MLflow's engine retries a refused connection for ~2 minutes with a traceback per try."""
    if uri.startswith("postgresql"):
        _pg_connect(uri).close()


def database_rows(uri: str, sql: str, params: tuple = ()) -> list[tuple] | None:
    """Rows of a read-only query on a PostgreSQL store's MLflow tables, or None for any other
    store. For the readers' cheap questions (which experiment, anything new since?) without
    starting MLflow's client (its import alone is ~2 s here); what the runs hold is still read
    through MLflow's API."""
    if not uri.startswith("postgresql"):
        return None
    import psycopg
    with _pg_connect(uri) as con:
        try:
            return con.execute(sql, params).fetchall()
        except psycopg.errors.UndefinedTable:  # a database MLflow has not set up yet: nothing in it
            return []


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
    log = logging.getLogger("mlflow")
    if log.level < logging.WARNING:  # no alembic chatter in CLI output (a caller may have asked for less)
        log.setLevel(logging.WARNING)
    bound_http(uri)
    reachable_database(uri)
    db = sqlite_store.db_path(uri)
    if db is not None:
        sqlite_store.ensure(db)
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # no "View run" line per run
    return MlflowClient(tracking_uri=uri)


def reader(uri: str):
    """A client for reading, or None where a sqlite store does not exist: a reader (a portal page,
    a summary) never creates a store, its folder or its lock file."""
    from results.store import sqlite_store
    db = sqlite_store.db_path(uri)
    if db is not None and not db.is_file():
        return None
    return client(uri)
