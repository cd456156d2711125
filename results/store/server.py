"""`python -m results.store.server` (make tracking-server): a shared MLflow tracking server for many
writers (Slurm array tasks, concurrent ingests). The sqlite backend and the artifact root live
under one directory, which should be on a filesystem the server's host owns; clients reach it
over HTTP, so no job ever opens the sqlite file itself. `--backend postgres` starts the harness's
own PostgreSQL (results/store/postgres.py: Debian's package, a cluster of its own) and serves from
it, as MLflow advises for many writers; `--backend postgresql+psycopg://...` uses another one.

Jobs log to it with MLFLOW_TRACKING_URI=http://HOST:PORT (the site file's tracking_uri).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from results.record.paths import REPO_ROOT



def command(root: Path, host: str, port: int, backend: str = "", workers: int = 4) -> list[str]:
    root = root.resolve()
    return [sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", backend or f"sqlite:///{root / 'mlflow.db'}",
            "--artifacts-destination", str(root / "artifacts"),
            "--host", host, "--port", str(port), "--workers", str(workers)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="results.store.server", description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=REPO_ROOT / "results" / "tracking",
                   help="sqlite file and artifact root (default: results/tracking)")
    p.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to serve other nodes")
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--backend", default="", help="backend store URI, or `postgres` for the harness's own "
                                                 "PostgreSQL (default: sqlite under --dir)")
    p.add_argument("--workers", type=int, default=4)
    args = p.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.backend == "postgres":  # the harness's own PostgreSQL, started (and installed) if needed
        from results.store import postgres
        try:
            args.backend = postgres.up()
        except (postgres.PostgresSetupError, OSError) as e:
            print(f"tracking server: {e}", file=sys.stderr)
            return 2
    cmd = command(args.dir, args.host, args.port, args.backend, args.workers)
    print(f"tracking server on http://{args.host}:{args.port}; point jobs at it with "
          f"MLFLOW_TRACKING_URI=http://{args.host}:{args.port}", file=sys.stderr, flush=True)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    raise SystemExit(main())
