"""A large store fast, for the scale benchmarks (`make perf` cell store_scale): N synthetic runs
written straight into an MLflow store's tables (sqlite or PostgreSQL) in large transactions.

What each run holds is what ingest writes for the same record (results/store/ingest.mlflow_content:
tags, params, summary metrics, per-step loss and step-time histories, latest values; plus the
completion tag, the record version, the sweep parent and the ingest time), so readers see a store
indistinguishable from an ingested one. Only the path differs: ingest makes ~10 requests per run
(1.6–15 runs/s measured), which would take hours for 100,000 runs; here rows go in 500 runs per
transaction. Records are not written to disk and runs have no artifacts.
"""
from __future__ import annotations

import random
import time
import uuid

from results.store import frames as store
from results.store.tracking import COMPLETE_TAG, INGESTED_AT

RUNS_PER_TX = 500
CONFIGS_PER_SWEEP, REPEATS = 10, 10  # 100 runs per sweep, as the portal benchmark's stores
STEPS = 10


def _rows(run_uuid: str, exp_id: int, art_root: str, tags: dict, metrics: list, params: list, status: str,
          start_ms: int, end_ms: int) -> dict[str, list[dict]]:
    latest: dict[str, object] = {}
    for m in sorted(metrics, key=lambda m: (m.step, m.timestamp)):
        latest[m.key] = m
    return {
        "runs": [{"run_uuid": run_uuid, "name": tags.get("mlflow.runName", ""), "source_type": "LOCAL",
                  "source_name": "", "entry_point_name": "", "user_id": "bulk", "status": status,
                  "start_time": start_ms, "end_time": end_ms, "source_version": "", "lifecycle_stage": "active",
                  "artifact_uri": f"{art_root}/{run_uuid}/artifacts", "experiment_id": exp_id}],
        "tags": [{"key": k, "value": v, "run_uuid": run_uuid} for k, v in tags.items()],
        "params": [{"key": p.key, "value": p.value, "run_uuid": run_uuid} for p in params],
        "metrics": [{"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step, "is_nan": False,
                     "run_uuid": run_uuid} for m in metrics],
        "latest_metrics": [{"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step,
                            "is_nan": False, "run_uuid": run_uuid} for m in latest.values()],
    }


def _run_uuid(i: int) -> str:
    """A 32-hex run id that sorts by creation (as UUIDv7 does): the tables' run_uuid indexes then
    grow at their end. MLflow's own (uuid4) land at random pages, which is what makes a multi-GB
    bulk insert crawl; readers never depend on the order."""
    return f"{int(time.time() * 1000):012x}{i:010x}{uuid.uuid4().hex[:10]}"


def write(uri: str, n_runs: int, seed: int = 0, progress: bool = True) -> int:
    """Add n_runs synthetic runs (n_runs / 100 sweeps of 10 configurations x 10 repeats) to the
    store at `uri`, creating it (and its experiment) if needed; keeps a sqlite store's run index as
    ingest does. Returns the runs written."""
    import sqlalchemy as sa
    from mlflow.entities import Metric
    from mlflow.store.tracking.dbmodels import models

    from results.record import schema
    from results.record.toggles import TOGGLES
    from results.store import ingest
    from results.store.benchmark import synthetic_record
    from results.store.tracking import client as mlflow_client

    client = mlflow_client(uri)
    exp_id = ingest.experiment_id(client)
    art_root = client.get_experiment(exp_id).artifact_location.rstrip("/")
    engine = sa.create_engine(uri)
    if uri.startswith("sqlite"):
        # sqlite's default 2 MB page cache thrashes on a store of a few GB (measured: one 500-run
        # commit into a 0.9 GB store ran for over 8 minutes); 1 GB keeps the indexes' pages in memory
        sa.event.listen(engine, "connect", lambda con, _: con.execute("PRAGMA cache_size = -1000000"))
    tables = {t: models.Base.metadata.tables[t] for t in ("runs", "tags", "params", "metrics", "latest_metrics")}
    keep_index = uri.startswith("sqlite:///")
    index_file = store.index_path(uri)
    rng = random.Random(seed)
    configs = (["baseline"] + [f"+{t.name}" for t in TOGGLES] + [f"+x{i}" for i in range(1, CONFIGS_PER_SWEEP)])
    configs = configs[:CONFIGS_PER_SWEEP]
    base = time.time() - 2 * n_runs - 3600  # one run a second, the last over an hour ago: sweeps ordered in time
    plan = [(s, r, c) for s in range(max(1, n_runs // (CONFIGS_PER_SWEEP * REPEATS)))
            for r in range(REPEATS) for c in configs][:n_runs]
    tag = uuid.uuid4().hex[:8]  # sweeps of this call, distinct from any earlier call's

    batches = range(0, len(plan), RUNS_PER_TX)
    if progress:
        from rich.console import Console
        from rich.progress import track
        batches = track(batches, description=f"writing {len(plan)} runs", console=Console(stderr=True))
    parents: dict[str, str] = {}
    for b in batches:
        rows: dict[str, list[dict]] = {t: [] for t in tables}
        index_rows = []
        for i, (s, r, c) in enumerate(plan[b:b + RUNS_PER_TX], start=b):
            # a sweep id of the real shape (results/record/sweep_ids.py): NAME@UTC-STAMP-HEX
            sweep = f"bulk-{s:05d}@{time.strftime('%Y%m%dT%H%M%S', time.gmtime(base + s * 100))}-{tag}"
            if sweep not in parents:  # the sweep's parent run, as ingest.sweep_parent makes it
                parents[sweep] = _run_uuid(s * 1000)
                ptags = {"kind": "sweep", "sweep": sweep, "sweep_key": ingest.sweep_key(sweep),
                         "mlflow.runName": f"sweep {sweep}"}
                ms = int((base + s * 100) * 1000)
                for t, v in _rows(parents[sweep], exp_id, art_root, ptags, [], [], "FINISHED", ms, ms).items():
                    rows[t] += v
            rec = synthetic_record(sweep, c, r, rng, STEPS, started=base + i)
            tags, metrics, params = ingest.mlflow_content(rec)
            st = rec["status"]
            # as if ingested when it ended: a store with a history, not 100,000 runs ingested this minute
            metrics.append(Metric(INGESTED_AT, st["ended"], int(st["ended"] * 1000), 0))
            tags.update({COMPLETE_TAG: "1", "record_version": str(schema.RECORD_VERSION),
                         "mlflow.parentRunId": parents[sweep]})
            rid = _run_uuid(i)
            for t, v in _rows(rid, exp_id, art_root, tags, metrics, params, "FINISHED", int(st["started"] * 1000),
                              int(st["ended"] * 1000)).items():
                rows[t] += v
            if keep_index:
                index_rows.append(ingest.index_row(rid, rec, tags, metrics, params))
        with engine.begin() as con:  # runs first: the other tables reference them
            for t in ("runs", "tags", "params", "metrics", "latest_metrics"):
                con.execute(tables[t].insert(), rows[t])
        if keep_index:
            store.index_upsert_many(index_file, uri, index_rows)
    engine.dispose()
    return len(plan)
