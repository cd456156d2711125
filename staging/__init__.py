"""Node-local data staging with MPI (reads each source file once across the job).

The `mpi_staging` toggle is read here. Staging itself is not built yet, so a run asking for it
records `unsupported` with that reason rather than silently reading the global copy.
"""
from __future__ import annotations

NOT_BUILT = "mpi_staging: MPI data staging is not implemented yet in this harness version"


def unsupported_reason(cfg) -> str | None:
    """Why the staging this configuration asks for can't run here, or None."""
    return NOT_BUILT if cfg.toggles.mpi_staging else None
