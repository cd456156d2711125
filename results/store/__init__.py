"""Floor 2: the MLflow store: connection (tracking), the embedded sqlite store, locks, ingest,
frames read back (frames.py), rebuild, the shared server, the ingest benchmark."""
