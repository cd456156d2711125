"""Where things live: the repository root and the results folder. The one place that knows
(harness/ and portal/ import it; results/ sits below both)."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def results_root() -> Path:
    """Records (runs/) and the default MLflow store: HARNESS_RESULTS, else ./results."""
    return Path(os.environ.get("HARNESS_RESULTS", REPO_ROOT / "results"))


def data_root() -> Path:
    """Generated datasets: HARNESS_DATA, else ./data."""
    return Path(os.environ.get("HARNESS_DATA", REPO_ROOT / "data"))
