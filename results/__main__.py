"""`python -m results ingest` (make ingest) and `python -m results summary [--sweep NAME]`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from results import paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="results")
    p.add_argument("cmd", choices=["ingest", "summary", "reindex"])
    p.add_argument("--results", default=str(paths.results_root()),
                   help="results directory holding runs/ (default: HARNESS_RESULTS or ./results)")
    p.add_argument("--sweep", default="demo")
    args = p.parse_args(argv)
    root = Path(args.results)
    if args.cmd == "summary":
        from results.report import print_sweep_summary
        print_sweep_summary(root / "runs", args.sweep)
        return 0
    from results.ingest import ingest_all
    from results.tracking import default_tracking_uri
    uri = default_tracking_uri(root)
    if args.cmd == "reindex":
        from results import store
        df = store.reindex(uri, store.index_path(uri))
        print(f"run index rebuilt from {uri}: {len(df)} runs")
        return 0
    try:
        res = ingest_all(root / "runs", uri)
        from results.collectives import SUBDIR  # collectives benchmark records, beside the runs
        for k, v in ingest_all(root / SUBDIR, uri).items():
            res[k] += v
    except Exception as e:  # noqa: BLE001 - one line, exit 2; records are untouched
        print(f"results: error: cannot ingest into MLflow store {uri}: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"{uri}: {len(res['added'])} added, {len(res['present'])} already present, "
          f"{len(res['in progress'])} still running, {len(res['broken'])} unreadable")
    for b in res["broken"]:
        print(f"  unreadable record {b}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
