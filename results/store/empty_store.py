"""An empty MLflow sqlite store, made once per machine and MLflow version and copied for each
new store.

MLflow builds a new sqlite store by running its ~50 alembic migrations: 2.5 s on the 2-core
VM, paid by every first ingest into a new results folder (a demo's, each test's). Copying the
finished schema takes 0.1 s. The copy is kept without MLflow's Default experiment, whose row
names the artifact folder of the store it was made for; MLflow's own store adds it back, with
the new store's folder, when it opens a store that lacks it (SqlAlchemyStore's
`_initialize_store_state`). A template that is unreadable, at another schema revision or fails
to copy is ignored and made again; an unwritable cache only costs the migrations.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from results.record.paths import cache_root


def template() -> Path:
    import mlflow
    return cache_root() / f"mlflow-{mlflow.__version__}-empty.db"


def copy_to(dest: Path, damage) -> bool:
    """Fill the (new, empty) file `dest` with the template's schema; False when there is no
    usable template. `damage(path)` says why a file is not a complete store ("" when it is)."""
    src = template()
    if not src.is_file() or damage(src):
        return False
    try:
        _backup(src, dest)
    except (OSError, sqlite3.Error):  # e.g. a page of the template went bad after the check
        dest.unlink(missing_ok=True)
        return False  # an empty file again: MLflow migrates it
    return True


def keep(made: Path) -> None:
    """Save the freshly migrated store `made` as this machine's template, less its Default
    experiment (the only row a new store has that names its folder)."""
    dest = template()
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _backup(made, tmp)
        con = sqlite3.connect(tmp)
        try:
            with con:
                con.execute("DELETE FROM experiments WHERE experiment_id = 0")
        finally:
            con.close()
        os.replace(tmp, dest)  # whole or not at all: another process may be copying the old one
    except (OSError, sqlite3.Error):
        pass  # no template: the next new store runs the migrations again
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # the cache path is not a folder: nothing was written there
            pass


def _backup(src: Path, dest: Path) -> None:
    """sqlite's online backup: a consistent copy even while another process reads `src`."""
    a, b = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=60), sqlite3.connect(dest)
    try:
        a.backup(b)
    finally:
        a.close()
        b.close()
