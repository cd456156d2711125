"""Results: the run-record schema, ingest into MLflow, load_runs() frames and statistics.

Never imports torch, harness or workloads (tests/test_boundaries.py checks it), so the CLI
summaries and the portal compute everything the same way from the same frames. mlflow is
imported lazily so that the harness can use results.record.schema/stats without paying for it.
"""


def load_runs(*args, **kwargs):
    """pandas DataFrame of the runs in the MLflow store; see results.store.frames.load_runs."""
    from results.store.frames import load_runs as _load_runs
    return _load_runs(*args, **kwargs)


def sweep_table(*args, **kwargs):
    """The store's sweeps (sweep, runs, configs, newest), newest first; see results.store.frames.sweep_table."""
    from results.store.frames import sweep_table as _sweep_table
    return _sweep_table(*args, **kwargs)
