"""Where things live: the repository root, the results folder, the data and the per-machine
cache. The one place that knows (harness/ and portal/ import it; results/ sits below both)."""
from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # results/record/paths.py -> the repository


def results_root() -> Path:
    """Records (runs/) and the default MLflow store: HARNESS_RESULTS, else ./results."""
    return Path(os.environ.get("HARNESS_RESULTS", REPO_ROOT / "results"))


def results_root_problem(root: Path | None = None) -> str | None:
    """Why the results folder cannot hold records (a file where the folder should be), or None."""
    root = Path(root) if root is not None else results_root()
    for p in (root, *root.parents):
        if p.exists():
            if not p.is_dir():
                where = "HARNESS_RESULTS" if "HARNESS_RESULTS" in os.environ else "the results folder"
                return f"{where} {root} is not a folder ({p} is a file); point it at a folder"
            return None
    return None


def cache_root() -> Path:
    """What is measured or built once per machine (device peaks, an empty MLflow store):
    HARNESS_CACHE, else ~/.cache/mlperf-harness."""
    return Path(os.environ.get("HARNESS_CACHE", Path.home() / ".cache" / "mlperf-harness"))


def data_root() -> Path:
    """Generated datasets: HARNESS_DATA, else ./data."""
    return Path(os.environ.get("HARNESS_DATA", REPO_ROOT / "data"))
