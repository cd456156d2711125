"""MLLOG lines into the run folder through mlperf_logging.mllog (never hand-formatted).

Each run gets its own logging.Logger with one file handler, so runs in one process never mix
and nothing is echoed to stdout.
"""
from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

from mlperf_logging.mllog import constants as K  # noqa: F401  (re-exported for callers)
from mlperf_logging.mllog.mllog import MLLogger

_ids = itertools.count()


class MLLog:
    def __init__(self, path: Path):
        self._logger = logging.getLogger(f"harness.mllog.{next(_ids)}")
        self._logger.propagate = False
        self._logger.setLevel(logging.INFO)
        # delay: the file appears with the first line, so a run that logs none (an unsupported
        # configuration) leaves no empty mlperf.log for the checker to fail on
        self._handler = logging.FileHandler(path, delay=True)
        self._logger.addHandler(self._handler)
        # stack offset 1: the caller of event/start/end is named in each line's metadata
        self._ml = MLLogger(logger=self._logger, default_stack_offset=1)

    def event(self, key: str, value: Any = None, **metadata: Any) -> None:
        self._ml.event(key=key, value=value, metadata=metadata or None, stack_offset=2)

    def start(self, key: str, value: Any = None, **metadata: Any) -> None:
        self._ml.start(key=key, value=value, metadata=metadata or None, stack_offset=2)

    def end(self, key: str, value: Any = None, **metadata: Any) -> None:
        self._ml.end(key=key, value=value, metadata=metadata or None, stack_offset=2)

    def close(self) -> None:
        self._logger.removeHandler(self._handler)
        self._handler.close()


class NullMLLog:
    """Non-zero ranks log nothing (MLPerf: rank 0 only)."""

    def event(self, *a, **k) -> None: ...
    def start(self, *a, **k) -> None: ...
    def end(self, *a, **k) -> None: ...
    def close(self) -> None: ...
