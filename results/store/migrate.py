"""`python -m results migrate --to URI [--from URI]`: copy one MLflow store into another, run for
run (the embedded sqlite store into a tracking server on PostgreSQL, say), through MLflow's
client APIs on both sides. Idempotent: a run is known by its `run_id` tag (the record's id, as
ingest knows it), so a second migrate, or one stopped halfway and run again, copies only what
is missing; a run half-written by a stopped migrate (no completion tag) is replaced, as ingest
replaces one.

Per run: its tags (the sweep parent mapped to the destination's parent of the same sweep),
parameters, every metric's whole history, its status and times, and its artifacts (the record
folder). Sweep parents are made by the destination's own rule (results/store/ingest.sweep_parent).
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from results.store import ingest
from results.store import locks
from results.store import tracking

PAGE = 1000  # runs per search page (MLflow's largest page for search_runs is 50,000)


def _runs(client, exp_id: str, filter_string: str = ""):
    token = None
    while True:
        page = client.search_runs([exp_id], filter_string=filter_string, max_results=PAGE, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


def migrate(src_uri: str, dst_uri: str, lock_root: Path) -> dict[str, int]:
    """Copy every harness run of `src_uri` missing from `dst_uri`: counts copied, present, skipped."""
    src, dst = tracking.client(src_uri), tracking.client(dst_uri)
    src_exp = src.get_experiment_by_name(tracking.EXPERIMENT)
    out = {"copied": 0, "present": 0, "skipped": 0}
    if src_exp is None:
        return out
    dst_exp = ingest.experiment_id(dst)
    parents: dict[str, str] = {}  # source parent run id -> its sweep name
    for run in _runs(src, src_exp.experiment_id, "tags.kind = 'sweep'"):
        parents[run.info.run_id] = run.data.tags.get("sweep", "")
    lock = ingest.lock_path(dst_uri, lock_root)
    for run in _runs(src, src_exp.experiment_id):
        tags = dict(run.data.tags)
        rid = tags.get("run_id")
        if tags.get("kind") == "sweep" or not rid:
            continue
        if tags.get(tracking.COMPLETE_TAG) != "1":  # half-written in the source: its record will re-ingest
            out["skipped"] += 1
            continue
        with locks.held(lock, f"run\0{rid}"):  # the lock ingest takes for this record: one writer of it
            if ingest.find_run(dst, dst_exp, rid) is not None:  # complete there (half-written ones are cleared)
                out["present"] += 1
                continue
            _copy(src, dst, dst_exp, run, tags, parents, lock)
        out["copied"] += 1
    return out


def _copy(src, dst, dst_exp: str, run, tags: dict, parents: dict, lock: Path) -> None:
    from mlflow.entities import Metric, Param, RunTag
    copied_tags = {k: v for k, v in tags.items() if not k.startswith("mlflow.") and k != tracking.COMPLETE_TAG}
    parent = tags.get("mlflow.parentRunId")
    if parent in parents and parents[parent]:
        copied_tags["mlflow.parentRunId"] = ingest.sweep_parent(dst, dst_exp, parents[parent], lock)
    new = dst.create_run(dst_exp, start_time=run.info.start_time, tags={**copied_tags, tracking.COMPLETE_TAG: "0"},
                         run_name=run.info.run_name)
    nid = new.info.run_id
    with tempfile.TemporaryDirectory() as tmp:
        if src.list_artifacts(run.info.run_id):
            local = src.download_artifacts(run.info.run_id, "", tmp)
            dst.log_artifacts(nid, local)
    metrics = [Metric(m.key, m.value, m.timestamp, m.step)
               for key in run.data.metrics for m in src.get_metric_history(run.info.run_id, key)]
    params = [Param(k, v) for k, v in run.data.params.items()]
    dst.set_terminated(nid, run.info.status, end_time=run.info.end_time)
    chunks = [metrics[i:i + ingest.BATCH] for i in range(0, len(metrics), ingest.BATCH)] or [[]]
    for chunk in chunks[:-1]:
        dst.log_batch(nid, metrics=chunk)
    dst.log_batch(nid, metrics=chunks[-1], params=params, tags=[RunTag(tracking.COMPLETE_TAG, "1")])
