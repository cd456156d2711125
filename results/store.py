"""Read side: pandas frames from the MLflow store for the CLI summaries and the portal."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from results import schema
from results.ingest import EXPERIMENT, _client

# MLflow column -> our column
_RENAME = {"tags.run_id": "run_id", "run_id": "mlflow_run_id", "status": "mlflow_status", "tags.variant": "variant",
           "tags.workload": "workload", "tags.size": "size", "tags.device": "device",
           "tags.status": "status", "tags.status_reason": "reason", "tags.sweep": "sweep",
           "tags.git_sha": "git_sha", "tags.host": "host", "tags.slurm_job_id": "slurm_job_id",
           "tags.toggles_on": "toggles_on", "tags.record_dir": "record_dir", "params.repeat": "repeat",
           "start_time": "started"}


def load_runs(tracking_uri: str, experiment: str = EXPERIMENT) -> pd.DataFrame:
    """One row per run: identity, toggles (`toggles.x`), status, and summary metrics
    (`median_step_s`, `samples_per_s`, `quality`, ...). Empty frame when there are no runs."""
    import mlflow

    client = _client(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return pd.DataFrame(columns=list(_RENAME.values()))
    mlflow.set_tracking_uri(tracking_uri)
    df = mlflow.search_runs(experiment_ids=[exp.experiment_id], filter_string="tags.kind = 'run' and tags.ingest_complete = '1'",
                            max_results=100_000)
    if df.empty:
        return pd.DataFrame(columns=list(_RENAME.values()))
    df = df.rename(columns=_RENAME)
    df = df.rename(columns={c: c[len("metrics."):] for c in df.columns if c.startswith("metrics.")})
    # params keep their config names (mode, steps, seed, toggles.x ...) unless a tag already has it
    df = df.rename(columns={c: c[len("params."):] for c in df.columns
                            if c.startswith("params.") and c[len("params."):] not in df.columns})
    df["repeat"] = pd.to_numeric(df.get("repeat"), errors="coerce").fillna(0).astype(int)
    keep = [c for c in df.columns if not c.startswith(("tags.", "params."))]
    return df[keep].sort_values("started").reset_index(drop=True)


def step_samples(record_dir: str, phase: str = "steady") -> list[float]:
    """Raw step times (s) of one run, read from its record (the source of truth)."""
    return [m["step_s"] for m in schema.read_metrics(Path(record_dir))
            if m.get("kind") == "step" and m.get("phase") == phase]
