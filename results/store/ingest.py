"""Map run records into MLflow. Idempotent on run_id: a record already in the store is skipped.

params    = the flattened config (toggles.x keys)
metrics   = the summary figures, plus per-step `loss` and `step_time_ms` histories
tags      = workload, size, device, status + reason, git sha, host, Slurm job, run_id, variant
artifacts = the whole run folder

MLflow can always be rebuilt from results/runs/: the records are the source of truth.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results.record import comm as comm_record
from results.store import locks
from results.record import schema
from results.store import sqlite_store
from results.store import frames as store
from results.store.tracking import COMPLETE_TAG, EXPERIMENT, INGESTED_AT, filter_value, store_budget_s
from results.store.tracking import client as _client

BATCH = 900  # MLflow's log_batch takes at most 1000 metrics per call
RETRIES, BACKOFF_S = 8, 0.5  # waits 0.5, 1, 2, 4 ... s between attempts, within the store budget


_EXPERIMENTS: dict[str, str] = {}   # tracking URI -> experiment id, per process
_PARENTS: dict[tuple[str, str], str] = {}  # (tracking URI, sweep) -> parent run id, per process


def experiment_id(client, artifact_root: Path | None = None) -> str:
    if client.tracking_uri in _EXPERIMENTS:
        return _EXPERIMENTS[client.tracking_uri]
    _EXPERIMENTS[client.tracking_uri] = _experiment_id(client, artifact_root)
    return _EXPERIMENTS[client.tracking_uri]


def _experiment_id(client, artifact_root: Path | None) -> str:
    exp = client.get_experiment_by_name(EXPERIMENT)
    if exp is not None:
        return exp.experiment_id
    loc = None  # a tracking server: its own artifact root (proxied)
    if client.tracking_uri.startswith("sqlite:"):  # keep artifacts beside the db, not in ./mlruns
        db = Path(client.tracking_uri.split("sqlite:///", 1)[1])
        loc = (artifact_root or db.parent / "mlartifacts").resolve().as_uri()
    elif not client.tracking_uri.startswith(("http://", "https://", "databricks")):
        # a database URI (jobs writing straight into PostgreSQL): MLflow's default is ./mlruns under
        # whatever folder the job ran in; the results folder (shared by the jobs) instead
        from results.record import paths
        loc = (artifact_root or paths.results_root() / "mlartifacts").resolve().as_uri()
    try:
        exp_id = client.create_experiment(EXPERIMENT, artifact_location=loc)
    except Exception:  # noqa: BLE001 - another process created it first
        return client.get_experiment_by_name(EXPERIMENT).experiment_id
    if client.tracking_uri.startswith("sqlite:///"):  # a new store: its index is complete from birth
        store.mark_built(store.index_path(client.tracking_uri), client.tracking_uri)
    return exp_id


def find_run(client, exp_id: str, run_id: str):
    """The complete MLflow run of a record, or None. Runs of it left half-written (no
    completion tag) are deleted so that the record is ingested again in full: call this only
    holding the record's lock (record_lock), since then no live ingester is writing them."""
    hits = client.search_runs([exp_id], filter_string=f"tags.run_id = {filter_value(run_id)}", max_results=10)
    done = [h for h in hits if h.data.tags.get(COMPLETE_TAG) == "1"]
    for h in hits:
        if h not in done:
            client.delete_run(h.info.run_id)
    return done[0] if done else None


def lock_path(tracking_uri: str, records_root: Path) -> Path:
    """The lock file every ingester of these records into this store shares: beside a sqlite
    store, else beside the records (shared by all hosts that read them)."""
    db = sqlite_store.db_path(tracking_uri)
    return sqlite_store.lock_file(db) if db is not None else Path(records_root) / ".ingest.lock"


def sweep_parent(client, exp_id: str, sweep: str, lock: Path) -> str:
    """The MLflow run that groups a sweep instance's runs, created by the first ingester that
    needs it (under the sweep's lock, so exactly one is)."""
    key = (client.tracking_uri, sweep)
    if key not in _PARENTS:
        with locks.held(lock, f"sweep\0{sweep}"):
            _PARENTS[key] = _sweep_parent(client, exp_id, sweep)
    return _PARENTS[key]


def _sweep_parent(client, exp_id: str, sweep: str) -> str:
    # by a digest of the name: a sweep label may hold any character, quotes included
    hits = client.search_runs([exp_id], filter_string=f"tags.kind = 'sweep' and tags.sweep_key = '{sweep_key(sweep)}'",
                              max_results=100)
    if not hits and ("'" not in sweep or '"' not in sweep):  # a parent made before sweep_key existed
        hits = client.search_runs([exp_id], f"tags.kind = 'sweep' and tags.sweep = {filter_value(sweep)}",
                                  max_results=100)
    if hits:  # stores from before the lock may hold racing creators' parents: the oldest is the one
        return min(hits, key=lambda h: (h.info.start_time, h.info.run_id)).info.run_id
    run = client.create_run(exp_id, tags={"kind": "sweep", "sweep": visible(sweep), "sweep_key": sweep_key(sweep),
                                          "mlflow.runName": visible(f"sweep {sweep}")})
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def sweep_key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogateescape")).hexdigest()[:20]


def visible(text: str) -> str:
    """`text` as valid UTF-8 that MLflow can store: bytes that were not UTF-8 (a label from
    argv, read with surrogateescape) become backslash escapes (\\xff) rather than failing
    every ingest of the record."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that was never a byte
        return text.encode("utf-8", "backslashreplace").decode("ascii")


def _tags(rec: dict[str, Any]) -> dict[str, str]:
    """Tags of a record's MLflow run: what every record has (identity, status, machine), then
    a training run's config and scheduler ids, or a collectives record's own settings."""
    cfg, env, st = rec["config"], rec["env"], rec["status"]
    tags = {"run_id": cfg["run_id"], "device": cfg["device"], "sweep": cfg.get("sweep", ""),
            "status": st["status"], "status_reason": st.get("reason", "")[:4000],
            "git_sha": env.get("git_sha") or "", "host": env.get("hostname", ""),
            "cpu_model": env.get("cpu_model", ""), "gpu_name": env.get("gpu_name") or "",
            "record_dir": rec["dir"], "mlflow.runName": cfg["run_id"]}
    if cfg.get("kind") == comm_record.KIND:
        tags.update({k: cfg.get(k, "") for k in ("collective", "backend", "dtype", "ranks", "nodes", "bench",
                                                  "launcher")}, via=cfg.get("via", "direct"), kind=comm_record.KIND)
        return {k: visible(str(v)) for k, v in tags.items()}
    slurm = env.get("slurm", {})
    sched = env.get("scheduler", {})  # neutral keys (records from before them have none)
    tags.update({
        "variant": cfg["variant"], "workload": cfg["workload"], "size": cfg["size"],
        "slurm_job_id": slurm.get("SLURM_JOB_ID", ""),
        "slurm_array_job_id": slurm.get("SLURM_ARRAY_JOB_ID", ""),
        "slurm_array_task_id": slurm.get("SLURM_ARRAY_TASK_ID", ""),
        "slurm_nodelist": slurm.get("SLURM_JOB_NODELIST", ""),
        "scheduler": sched.get("name", ""), "job_id": sched.get("job_id", ""),
        "array_task_id": sched.get("array_task_id", ""), "kind": "run",
        "toggles_on": ",".join(k for k, v in cfg["toggles"].items() if v not in (False, "off")) or "baseline",
        # the roofline's device and dtype: with the roofline_* metrics they place the run on the
        # Roofline page without reading its record (results/analysis/roofline.run_points)
        "roofline_device": rec["summary"].get("roofline", {}).get("device_name", ""),
        "roofline_dtype": rec["summary"].get("roofline", {}).get("dtype", ""),
    })
    return {k: visible(str(v)) for k, v in tags.items()}


def _params(cfg: dict[str, Any]) -> dict[str, str]:
    return {visible(k): visible(str(v)) for k, v in schema.flatten(cfg).items()}


@dataclass
class Known:
    """What a bulk ingest learns up front instead of one MLflow search per record: the run_ids
    already in the store in full. A complete run is never removed, so this can only be short;
    a record not in it is looked up afresh under its lock."""
    complete: set[str]


class Transient(Exception):
    """The store could not be reached or was busy for every attempt."""


class StoreFull(Exception):
    """The store's disk is full: every further record would fail the same way, so the ingest
    stops at the first, naming it (the records stay; ingest again once there is space)."""


# how a full disk reads from each backend: PostgreSQL ("could not extend file ...: No space left on
# device", SQLSTATE 53100 disk_full), sqlite ("database or disk is full"), a server relaying either
FULL_MARKERS = ("no space left on device", "database or disk is full", "could not extend file", "disk full",
                "disk quota exceeded")


def store_full(e: BaseException) -> bool:
    return any(m in f"{e}".lower() for m in FULL_MARKERS)


TRANSIENT_MARKERS = ("database is locked", "database table is locked", "connection refused", "connectionerror",
                     "max retries exceeded", "connection reset", "connection aborted", "remotedisconnected",
                     "temporarily unavailable", "timed out", "timeout", "error code 429", "error code 502",
                     "error code 503", "error code 504", "bad gateway", "service unavailable",
                     "error code 500", "internal server error", "too many 500 error responses")


def transient(e: BaseException) -> bool:
    """Worth retrying: the store unreachable or busy (a tracking server restarting, sqlite's
    writer lock). Anything else (a value MLflow rejects, a record it cannot take) fails the same
    way every time, so it is not retried."""
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(e).__name__}: {e}".lower()
    return any(m in text for m in TRANSIENT_MARKERS)


def ingest_run(run_dir: Path, tracking_uri: str, client=None, attempts: int | None = None,
               known: Known | None = None) -> str:
    """Ingest one finished record; returns 'added', 'present' or 'in progress'. Safe with any
    number of concurrent ingesters: each record is looked up and written under its own lock,
    so it gets exactly one MLflow run. A store that is briefly unreachable or busy is retried
    with exponential backoff within the store budget (tracking.store_budget_s, 30 s unless set)
    and then raises Transient; any other error is raised at once. The record itself is never
    changed; a retry finishes or redoes a half-written run."""
    attempts = max(1, attempts or _env_attempts())  # at least one try, whatever the setting says
    t0 = time.monotonic()
    deadline = t0 + store_budget_s()
    attempt = 0
    while True:
        try:
            return _ingest_once(run_dir, tracking_uri, client, known)
        except (schema.RecordError, sqlite_store.StoreDamaged):
            raise
        except Exception as e:  # noqa: BLE001 - sorted into full, transient (retried) and the rest
            if store_full(e):  # checked first: a server relays it as a 500, which would read as transient
                raise StoreFull(f"MLflow store {_where(tracking_uri)} is out of disk space ({_full_line(e)}); "
                                "the records are kept: free space on the store's disk and ingest again") from None
            if not transient(e):
                raise
            attempt += 1
            # the last wait is cut to the time left, so the budget is used to its end (a full
            # doubling past the deadline used to give up at ~17 s of a 30 s budget)
            wait = min(BACKOFF_S * 2 ** (attempt - 1), deadline - time.monotonic())
            if attempt >= attempts or wait <= 0:
                raise Transient(f"{tracking_uri} unreachable or failing after {attempt} attempts in "
                                f"{time.monotonic() - t0:.0f} s: "
                                f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
            time.sleep(wait)


def _where(uri: str) -> str:
    """The store without its password."""
    import re
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", uri)


def _full_line(e: BaseException) -> str:
    """The line of the error that says the disk is full."""
    lines = [ln.strip() for ln in str(e).replace("\\n", "\n").splitlines() if ln.strip()]
    return next((ln for ln in lines if store_full(Exception(ln))), lines[0] if lines else type(e).__name__)[:300]


def _env_attempts() -> int:
    raw = os.environ.get("HARNESS_INGEST_ATTEMPTS", "")
    try:
        return int(raw) if raw else RETRIES
    except ValueError:
        raise ValueError(f"HARNESS_INGEST_ATTEMPTS must be an integer; got {raw!r}") from None


def _ingest_once(run_dir: Path, tracking_uri: str, client=None, known: Known | None = None) -> str:
    rec = schema.read_record(Path(run_dir), with_metrics=True)
    if schema.orphaned(rec["status"]):
        schema.finalize_orphan(run_dir, f"process {rec['status']['pid']} died before finishing its record")
        rec = schema.read_record(Path(run_dir), with_metrics=True)
    if rec["status"]["status"] == schema.RUNNING:
        return "in progress"
    comm = rec["config"].get("kind") == comm_record.KIND
    run_id = rec["config"]["run_id"]
    # collectives records are not in the run index, so `known` (built from it) cannot answer for them
    if known is not None and not comm and run_id in known.complete:
        return "present"
    client = client or _client(tracking_uri)
    exp_id = experiment_id(client)
    with locks.held(lock_path(tracking_uri, Path(run_dir).parent), f"run\0{run_id}"):
        if find_run(client, exp_id, run_id) is not None:  # afresh: another ingester may have just added it
            return "present"
        return _write(client, exp_id, rec, Path(run_dir), tracking_uri, comm)


def _write(client, exp_id: str, rec: dict, run_dir: Path, tracking_uri: str, comm: bool) -> str:
    """One MLflow run for the record; called holding the record's lock, after find_run."""
    st = rec["status"]
    start_ms = int(st["started"] * 1000)
    tags = {**_tags(rec), COMPLETE_TAG: "0"}  # "1" comes with the last batch
    if tags["sweep"]:
        tags["mlflow.parentRunId"] = sweep_parent(client, exp_id, rec["config"]["sweep"],
                                                  lock_path(tracking_uri, run_dir.parent))
    run = client.create_run(exp_id, start_time=start_ms, tags=tags)
    try:
        _fill(client, run, rec, run_dir, tracking_uri, comm, tags)
    except Exception as e:  # noqa: BLE001 - a permanent error leaves no half-written run behind
        if not transient(e):
            client.delete_run(run.info.run_id)
        raise
    return "added"


def mlflow_content(rec: dict) -> tuple[dict[str, str], list, list]:
    """What a record becomes in MLflow, apart from the run itself and the bookkeeping tags:
    (tags, metrics, params). Shared with the synthetic bulk writer (results/store/bulk.py), so a
    benchmark store holds exactly what ingest would write."""
    from mlflow.entities import Metric, Param

    start_ms = int(rec["status"]["started"] * 1000)
    # every figure of the summary (results/record/schema.summary_figures): no list to keep in step
    metrics = [Metric(k, v, start_ms, 0) for k, v in schema.summary_figures(rec["summary"]).items()]
    for row in rec["metrics"]:
        ts = start_ms + int(1000 * row.get("t", 0))
        if row["kind"] == "size":  # per-size figures as histories whose step is the size in bytes
            metrics += [Metric(k, float(v), ts, int(row["bytes"])) for k, v in row.items()
                        if k.startswith(comm_record.SIZE_FIGURES) and isinstance(v, (int, float))]
        elif row["kind"] == "step":
            if isinstance(row.get("loss"), (int, float)):  # a pipeline's non-loss stage has none
                metrics.append(Metric("loss", row["loss"], ts, row["step"]))
            metrics.append(Metric("step_time_ms", 1000 * row["step_s"], ts, row["step"]))
        else:
            metrics.append(Metric("eval_quality", row["quality"], ts, row["step"]))
    params = [Param(k, v[:6000]) for k, v in _params(rec["config"]).items()]
    return _tags(rec), metrics, params


def index_row(mlflow_run_id: str, rec: dict, tags: dict, metrics: list, params: list) -> dict:
    """The run index's row for a record written as `mlflow_run_id` (what a search would return)."""
    st = rec["status"]
    latest = {m.key: m.value for m in sorted(metrics, key=lambda m: (m.step, m.timestamp))}
    return store.row(mlflow_run_id, schema.MLFLOW_STATUS.get(st["status"], "FAILED"), int(st["started"] * 1000),
                     {**tags, COMPLETE_TAG: "1"}, {p.key: p.value for p in params}, latest)


def _fill(client, run, rec: dict, run_dir: Path, tracking_uri: str, comm: bool, tags: dict) -> None:
    from mlflow.entities import Metric, RunTag

    rid, st = run.info.run_id, rec["status"]
    _, metrics, params = mlflow_content(rec)
    # artifacts and the end state first, then everything else in as few batches as MLflow allows;
    # the completion tag rides in the last one, so a run without it is known to be half-written
    _log_record_folder(client, run, Path(run_dir))
    client.set_terminated(rid, schema.MLFLOW_STATUS.get(st["status"], "FAILED"),
                          end_time=int(st.get("ended", st["started"]) * 1000))
    now = time.time()
    metrics.append(Metric(INGESTED_AT, now, int(now * 1000), 0))
    chunks = [metrics[i:i + BATCH] for i in range(0, len(metrics), BATCH)]
    for chunk in chunks[:-1]:
        client.log_batch(rid, metrics=chunk)
    client.log_batch(rid, metrics=chunks[-1], params=params,
                     tags=[RunTag("record_version", str(schema.RECORD_VERSION)), RunTag(COMPLETE_TAG, "1")])
    if tracking_uri.startswith("sqlite:///") and not comm:  # keep the run index (results/store/frames.py) current
        store.index_upsert(store.index_path(tracking_uri), tracking_uri, index_row(rid, rec, tags, metrics, params))


def _log_record_folder(client, run, run_dir: Path) -> None:
    """The record folder as the run's artifacts. With a local artifact store on the same
    filesystem the files are hard-linked (records are immutable once finished, and a status
    rewrite replaces the file rather than editing it), else copied/uploaded by MLflow."""
    from urllib.parse import unquote, urlparse
    uri = run.info.artifact_uri
    if uri.startswith("file://") and all(f.is_file() for f in run_dir.iterdir()):
        dest = Path(unquote(urlparse(uri).path))
        try:
            dest.mkdir(parents=True, exist_ok=True)
            for f in run_dir.iterdir():
                if f.is_file():
                    os.link(f, dest / f.name)
            return
        except OSError:  # another filesystem, or no hard links here: fall back to copying
            pass
    client.log_artifacts(run.info.run_id, str(run_dir))


def known_runs(tracking_uri: str) -> Known | None:
    """For a sqlite store with a built run index: its complete run_ids. None elsewhere (a
    tracking server's index is the reader's, not kept by ingest): each record is then looked
    up on its own."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    done = store.index_run_ids(store.index_path(tracking_uri), tracking_uri)
    return None if done is None else Known(done)


def ingest_all(runs_root: Path, tracking_uri: str, client=None) -> dict[str, list[str]]:
    """Ingest every record under runs_root. A malformed record ("broken": unreadable, or not a
    record's shape, results/record/schema.read_record) or one the store
    rejects ("failed", one line each) stays out alone while the rest go in; a store that stays
    unreachable (Transient) or is damaged (StoreDamaged) stops the whole ingest."""
    db = sqlite_store.db_path(tracking_uri)
    if db is not None:
        sqlite_store.check_writable(db)
    client = client or _client(tracking_uri)
    experiment_id(client)
    known = known_runs(tracking_uri)
    out: dict[str, list[str]] = {"added": [], "present": [], "in progress": [], "broken": [], "failed": []}
    for d in schema.record_dirs(runs_root):
        try:
            out[ingest_run(d, tracking_uri, client, known=known)].append(d.name)
        except schema.RecordError as e:
            out["broken"].append(f"{d.name}: {e}")
        except (Transient, StoreFull, sqlite_store.StoreDamaged, PermissionError):
            raise
        except Exception as e:  # noqa: BLE001 - this record alone: MLflow rejected something in it
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            out["failed"].append(f"{d.name}: {type(e).__name__}: {first}")
    return out
