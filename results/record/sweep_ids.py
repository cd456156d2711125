"""Sweep ids, defined once: a run of sweep NAME is NAME@UTC-STAMP-PIDHEX (sorts by time, unique
across hosts). The harness makes them; `results summary` and `--rerun-failed` find a sweep's
newest run by its name, matching the whole shape (a sweep named `x@y` is not a run of `x`)."""
from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterable

INSTANCE = re.compile(r"(.+)@(\d{8}T\d{6}-[0-9a-f]+)")


def new_id(name: str) -> str:
    return f"{name}@{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}{secrets.token_hex(2)}"


def name_of(sweep_id: str) -> str | None:
    """The sweep name of a sweep id, or None when the text is not one."""
    m = INSTANCE.fullmatch(sweep_id)
    return m.group(1) if m else None


def latest(ids: Iterable, name: str) -> str | None:
    """The newest id among `ids` that is a run of sweep `name`."""
    mine = sorted(str(i) for i in ids if isinstance(i, str) and name_of(i) == name)
    return mine[-1] if mine else None


def resolve(ids: Iterable, name_or_id: str) -> str | None:
    """A sweep id as given, or the newest run of a sweep given by name."""
    ids = [i for i in ids if isinstance(i, str)]
    return name_or_id if name_or_id in ids else latest(ids, name_or_id)
