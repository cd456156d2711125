"""`python -m results ingest` (make ingest), `summary [--sweep NAME]`, `reindex`,
`rebuild-store` (a damaged sqlite store set aside and rebuilt from the records) and
`migrate --to URI [--from URI]` (one store copied into another, run for run, idempotent)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from results.record import paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="results")
    p.add_argument("cmd", choices=["ingest", "summary", "reindex", "rebuild-store", "migrate"])
    p.add_argument("--results", default=str(paths.results_root()),
                   help="results directory holding runs/ (default: HARNESS_RESULTS or ./results)")
    p.add_argument("--sweep", default="demo", help="summary: a sweep id (NAME@STAMP) or a name (its newest run)")
    p.add_argument("--force", action="store_true", help="rebuild-store: rebuild a store that is not damaged too")
    p.add_argument("--to", default="", help="migrate: the destination store URI (a tracking server, a database)")
    p.add_argument("--from", dest="src", default="", help="migrate: the source store URI (default: this results "
                                                           "directory's store)")
    args = p.parse_args(argv)
    root = Path(args.results)
    problem = paths.results_root_problem(root)
    if problem:
        print(f"results: error: {problem}", file=sys.stderr)
        return 2
    if args.cmd == "summary":
        from results.analysis.sweep_summary import print_sweep_summary
        print_sweep_summary(root / "runs", args.sweep)
        return 0
    import logging

    from results.store.tracking import default_tracking_uri
    uri = default_tracking_uri(root)
    # every store error reaches the user as our one line; MLflow's and psycopg's own logged traceback of
    # it (a full database disk, an unreachable server) would bury that line. After mlflow's import,
    # which sets its loggers' levels.
    import mlflow  # noqa: F401
    for name in ("mlflow", "psycopg"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        if args.cmd == "reindex":
            from results.store import frames as store
            df = store.reindex(uri, store.index_path(uri))
            print(f"run index rebuilt from {uri}: {len(df)} runs")
            return 0
        if args.cmd == "migrate":
            if not args.to:
                print("results: error: migrate needs --to URI (e.g. http://HOST:5000 or "
                      "postgresql+psycopg://USER:PASS@HOST:PORT/DB)", file=sys.stderr)
                return 2
            from results.store.migrate import migrate
            src = args.src or uri
            try:
                got = migrate(src, args.to, root)
            except Exception as e:  # noqa: BLE001 - one line, exit 2; neither store is changed by a failed connect
                print(f"results: error: cannot migrate {src} -> {args.to}: "
                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
                return 2
            print(f"{src} -> {args.to}: {got['copied']} copied, {got['present']} already there, "
                  f"{got['skipped']} half-written in the source (their records re-ingest)")
            return 0
        if args.cmd == "rebuild-store":
            from results.store.rebuild import rebuild_store
            rebuild_store(root, uri, force=args.force)
        return _ingest(root, uri)
    except Exception as e:  # noqa: BLE001 - one line, exit 2; records are untouched
        from results.store.ingest import StoreFull
        from results.store.sqlite_store import StoreDamaged
        plain = isinstance(e, (StoreDamaged, StoreFull, PermissionError)) or args.cmd != "ingest"  # these name the store
        what = "" if plain else f"cannot ingest into MLflow store {uri}: "
        print(f"results: error: {what}{str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2


def _ingest(root: Path, uri: str) -> int:
    """Every record (runs, then collectives benchmarks) into the store; exit 1 when some
    record could not go in (each named on its own line), 0 otherwise."""
    from results.record.comm import SUBDIR
    from results.store.ingest import ingest_all
    res = ingest_all(root / "runs", uri)
    for k, v in ingest_all(root / SUBDIR, uri).items():
        res[k] += v
    print(f"{uri}: {len(res['added'])} added, {len(res['present'])} already present, "
          f"{len(res['in progress'])} still running, {len(res['broken'])} malformed, "
          f"{len(res['failed'])} rejected by the store")
    for b in res["broken"]:
        print(f"  skipped: malformed record {b}", file=sys.stderr)
    for b in res["failed"]:
        print(f"  record not ingested: {b}", file=sys.stderr)
    return 1 if res["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
