"""Cross-process locks for writers of the MLflow store (ingest, store creation, rebuild).

POSIX record locks (fcntl.lockf) on one byte per key of a shared lock file, so that any number
of keys (one per record, one per sweep) need one file, not one file each. They work between
processes on one host and, on NFSv4 or Lustre mounted with `flock`, between hosts. A lock dies
with its process, so a killed ingester never leaves a record locked.

POSIX semantics to respect: locks belong to the process (threads of one process are not kept
apart), and closing *any* descriptor of the file drops all of the process's locks on it, so each
lock file is opened once per process and never closed.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from pathlib import Path

SLOTS = 1 << 24  # byte offsets keys hash to; a collision only makes two keys wait for each other

_FDS: dict[Path, int] = {}


def _fd(path: Path) -> int:
    path = Path(path).resolve()
    if path not in _FDS:
        path.parent.mkdir(parents=True, exist_ok=True)
        _FDS[path] = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    return _FDS[path]


def slot(key: str) -> int:
    digest = hashlib.sha1(key.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % SLOTS


@contextlib.contextmanager
def held(path: Path, key: str):
    """Hold the exclusive lock on `key` among all processes that lock through `path`; blocks
    until it is free."""
    fd, at = _fd(path), slot(key)
    fcntl.lockf(fd, fcntl.LOCK_EX, 1, at)
    try:
        yield
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, at)
