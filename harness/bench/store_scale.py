"""The store at 100,000 runs (`make perf` cell store_scale; not a test): how the readers grow from
1,000 to 100,000 runs on the embedded sqlite store and on PostgreSQL.

Stores are written by results/store/bulk.py (ingest's own content per run, 100 runs per sweep)
and kept under results/perf/scale-<backend>-<n>/ (PostgreSQL: database harness_scale_<n> on the
harness cluster, `make postgres-up`), so a second `make perf` reuses them. A PostgreSQL store's
run index is the reader's: its first build (a full MLflow search, the mlflow#2730 case) is timed.
Each size is then read in fresh processes (portal/perf.py store_reads, REPEATS of them,
interleaved over sizes and backends so drift hits all alike): the sweep table, one sweep's
load_runs(), every run's load_runs(), and Overview's first render.
Targets: Overview's first render <= 3 s and load_runs() of one sweep <= 1 s, both backends, at 100k.
"""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results.record.paths import REPO_ROOT

SIZES = (1_000, 10_000, 100_000)
REPEATS = 3
TARGETS = {"overview_first_render_s": 3.0, "load_one_sweep_s": 1.0}


def _store(backend: str, n: int) -> tuple[str, Path, dict]:
    """(URI, results folder, build figures) of the n-run store, built once."""
    from results.store import bulk
    from results.store import frames
    root = REPO_ROOT / "results" / "perf" / f"scale-{backend}-{n}"
    done = root / "built.json"
    if backend == "sqlite":
        uri = f"sqlite:///{root / 'mlflow.db'}"
    else:
        from results.store import postgres
        uri = postgres.uri().rsplit("/", 1)[0] + f"/harness_scale_{n}"
    if done.exists() and _holds(uri):
        return uri, root, json.loads(done.read_text())
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    if backend == "postgres":
        from results.store import postgres
        postgres.create_database(f"harness_scale_{n}")
    t = time.perf_counter()
    bulk.write(uri, n)
    built = {"write_s": time.perf_counter() - t}
    if backend == "postgres":  # the reader's index: a full MLflow search, once
        import os
        os.environ["HARNESS_RESULTS"] = str(root)
        t = time.perf_counter()
        frames.reindex(uri, frames.index_path(uri))
        built["index_from_mlflow_s"] = time.perf_counter() - t
        os.environ.pop("HARNESS_RESULTS")
    done.write_text(json.dumps(built))
    return uri, root, built


def _holds(uri: str) -> bool:
    """The store at `uri` answers and has its experiment (a database dropped since is rebuilt)."""
    try:
        from results.store.tracking import EXPERIMENT, client
        return client(uri).get_experiment_by_name(EXPERIMENT) is not None
    except Exception:  # noqa: BLE001 - gone or unreachable: build it again
        return False


def _reads(uri: str, root: Path) -> dict:
    p = subprocess.run([sys.executable, "-m", "portal.perf", "store_reads", uri, str(root)], cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=1800)
    if p.returncode:
        raise RuntimeError(f"portal.perf store_reads failed: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def store_scale(sizes: tuple[int, ...] = SIZES, repeats: int = REPEATS) -> dict:
    from results.store import postgres
    backends = ["sqlite"] + (["postgres"] if postgres.is_up() else [])
    stores = {(b, n): _store(b, n) for b in backends for n in sizes}
    raw: dict[tuple[str, int], list[dict]] = {k: [] for k in stores}
    for _ in range(repeats):  # interleaved: every store once per round
        for k, (uri, root, _) in stores.items():
            raw[k].append(_reads(uri, root))
    out: dict = {"sizes": list(sizes), "repeats": repeats, "targets": TARGETS,
                 "postgres": "measured" if "postgres" in backends else "not up: `make postgres-up`"}
    for (b, n), rows in raw.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0] if k.endswith("_s")}
        out[f"{b}_{n}"] = {**{k: round(v, 3) for k, v in med.items()}, "build": stores[(b, n)][2],
                           "runs": rows[0]["all_runs"], "sweeps": rows[0]["sweeps"],
                           "one_sweep_runs": rows[0]["one_sweep_runs"],
                           "raw": {k: [round(r[k], 3) for r in rows] for k in med}}
    top = max(sizes)
    out["meets_targets"] = all(out[f"{b}_{top}"][k] <= v for b in backends for k, v in TARGETS.items())
    return out
