"""Device measurements cached per machine (~/.cache/mlperf-harness or HARNESS_CACHE): the
matmul peak (harness/measure/peak.py) and the memory bandwidth (harness/measure/membw.py) are measured once per
device and setting, not on every run."""
from __future__ import annotations

import json
from typing import Any, Callable

from results.record import schema
from results.record.paths import cache_root as cache_dir


def cached(file: str, key: str, measure: Callable[[], Any]) -> Any:
    """cache[key] from cache_dir()/file, measured (and stored) when absent."""
    path = cache_dir() / file
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        cache[key] = measure()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            schema.write_json(path, cache)
        except OSError:
            pass  # an unwritable cache only costs a re-measurement
    return cache[key]
