"""`python -m results rebuild-store`: the records are the truth, so a damaged sqlite store is
set aside (renamed, nothing deleted) and a new one is filled from them by the next ingest. A
tracking server's or database's store is its administrator's and is never set aside: every record
is ingested into it again (only the runs missing from it, or half-written there, are written) and
the reader's run index of it is dropped, to be rebuilt by a full search on the next read."""
from __future__ import annotations

from pathlib import Path

from results.store import locks
from results.store import sqlite_store
from results.store import frames as store


class NotDamaged(Exception):
    pass


def rebuild_store(root: Path, uri: str, force: bool = False) -> list[Path]:
    """Set the store aside (when damaged, or always with force) and forget its run index; the
    caller then ingests every record into a fresh store. Returns where the old files went."""
    db = sqlite_store.db_path(uri)
    if db is None:
        store.forget(store.index_path(uri), store.index_key(uri))
        print(f"MLflow store {uri.split('@')[-1]}: a server or database, not set aside; every record under {root} "
              "ingested into it again (only missing or half-written runs are written) and its run index rebuilt")
        return []
    with locks.held(sqlite_store.lock_file(db), "create"):  # no store is made while we move this one
        why = sqlite_store.damage(db) if db.exists() else "there is none"
        if not why and not force:
            raise NotDamaged(f"MLflow store {db} is not damaged; pass --force to rebuild it from the records anyway")
        moved = sqlite_store.set_aside(db)
    store.forget(store.index_path(uri), uri)
    print(f"MLflow store {db}: {why or 'rebuilt on request'}; "
          + (f"set aside as {', '.join(str(m) for m in moved)}; " if moved else "")
          + f"rebuilding it from the records under {root}")
    return moved
