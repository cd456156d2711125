"""A real PostgreSQL for the shared tracking server (MLflow's guidance for many writers: a server on
a real database): Debian's `postgresql` package, its own cluster made with initdb and run with
pg_ctl on a port of its own, a role and a database for MLflow (needs root, as Slurm does).

    python -m results.store.postgres up       install if missing, initdb once, start, create role + db
    python -m results.store.postgres down     stop the cluster `up` started (pg_ctl, its own data dir)
    python -m results.store.postgres status   the URI when it is up

The cluster lives in /var/lib/harness-postgres/<port> (owned by the `postgres` user, which the
package creates: PostgreSQL refuses to run as root), listens on 127.0.0.1 (HOST=0.0.0.0 and a
password for other nodes), and is left alone by `down` when it is not ours. Clients reach it as
postgresql+psycopg://harness:harness@HOST:PORT/mlflow (SQLAlchemy's psycopg 3 driver).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BASE = Path("/var/lib/harness-postgres")
SOCKETS = Path("/run/harness-postgres")
USER, DB = "harness", "mlflow"
DEFAULT_PORT = 5433  # beside a system cluster on 5432


class PostgresSetupError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[postgres {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def bindir() -> Path | None:
    """Debian's versioned binaries (/usr/lib/postgresql/<major>/bin), the newest; None if absent."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: int(p.parent.parent.name)
                   if p.parent.parent.name.isdigit() else 0)
    return found[-1].parent if found else None


def uri(port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> str:
    return f"postgresql+psycopg://{USER}:{USER}@{host}:{port}/{DB}"


def _as_postgres(*cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    p = subprocess.run(["runuser", "-u", "postgres", "--", *cmd], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode:
        raise PostgresSetupError(f"{Path(cmd[0]).name} failed: {(p.stderr.strip() or p.stdout.strip())[-400:]}")
    return p


def install() -> Path:
    """The binaries, apt-installing Debian's postgresql once (root); its own service is not started."""
    if bindir() is None:
        if os.geteuid() != 0:
            raise PostgresSetupError("postgresql is not installed and installing it needs root "
                                     "(apt-get install postgresql)")
        _log("installing Debian's postgresql (apt)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        policy = Path("/usr/sbin/policy-rc.d")  # apt's postinst must not start the packaged cluster
        own_policy = not policy.exists()
        if own_policy:
            policy.write_text("#!/bin/sh\nexit 101\n")
            policy.chmod(0o755)
        try:
            for cmd in (["apt-get", "update", "-qq"],
                        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "postgresql"]):
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
                if p.returncode:
                    raise PostgresSetupError(f"{' '.join(cmd[:2])} failed: {p.stderr.strip()[-400:]}")
        finally:
            if own_policy:
                policy.unlink(missing_ok=True)
    found = bindir()
    if found is None:
        raise PostgresSetupError("postgresql installed but no /usr/lib/postgresql/*/bin/pg_ctl found")
    return found


def _data(port: int) -> Path:
    return BASE / str(port)


def is_up(port: int = DEFAULT_PORT) -> bool:
    b = bindir()
    if b is None or not (_data(port) / "postmaster.pid").exists():
        return False
    return subprocess.run([str(b / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port)],
                          timeout=10).returncode == 0


def up(port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> str:
    """Install, initdb once, start, create the role and database; the client URI."""
    if os.geteuid() != 0:
        raise PostgresSetupError("starting the harness's PostgreSQL needs root (runuser -u postgres)")
    b = install()
    data = _data(port)
    for d in (BASE, SOCKETS):
        d.mkdir(parents=True, exist_ok=True)
        shutil.chown(d, "postgres", "postgres")
    if not (data / "PG_VERSION").exists():
        data.mkdir(parents=True, exist_ok=True)
        shutil.chown(data, "postgres", "postgres")
        _log(f"initdb {data}")
        _as_postgres(str(b / "initdb"), "-D", str(data), "--username=postgres", "--auth-local=peer",
                     "--auth-host=scram-sha-256", "-E", "UTF8")
        with (data / "postgresql.conf").open("a") as f:  # ours: listen where asked, sockets out of /tmp
            f.write(f"\n# harness\nlisten_addresses = '{host}'\nport = {port}\n"
                    f"unix_socket_directories = '{SOCKETS}'\nmax_connections = 200\n")
        with (data / "pg_hba.conf").open("a") as f:
            f.write("host all all 0.0.0.0/0 scram-sha-256\n")
    if not is_up(port):
        _log(f"starting on {host}:{port}")
        _as_postgres(str(b / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), "-w", "-t", "60", "start",
                     timeout=90)
    psql = [str(b / "psql"), "-h", str(SOCKETS), "-p", str(port), "-U", "postgres", "-tAc"]
    if _as_postgres(*psql, f"SELECT 1 FROM pg_roles WHERE rolname='{USER}'").stdout.strip() != "1":
        _as_postgres(*psql, f"CREATE ROLE {USER} LOGIN PASSWORD '{USER}'")
    if _as_postgres(*psql, f"SELECT 1 FROM pg_database WHERE datname='{DB}'").stdout.strip() != "1":
        _as_postgres(*psql, f"CREATE DATABASE {DB} OWNER {USER}")
    return uri(port, "127.0.0.1" if host in ("0.0.0.0", "") else host)


def create_database(name: str, port: int = DEFAULT_PORT, location: Path | None = None) -> str:
    """A fresh database `name` owned by the harness role (dropped first if it exists): its URI.
    For tests and benchmarks that need a store of their own on the running cluster. With
    `location` (an empty folder, e.g. a small filesystem for a full-disk test) the database lives
    there, in a tablespace of its own (ts_<name>)."""
    if not name.replace("_", "").isalnum():
        raise PostgresSetupError(f"database name {name!r}: letters, digits and _ only")
    psql = _psql(port)
    drop_database(name, port)
    where = ""
    if location is not None:
        shutil.chown(location, "postgres", "postgres")
        _as_postgres(*psql, f"CREATE TABLESPACE ts_{name} LOCATION '{Path(location).resolve()}'")
        where = f" TABLESPACE ts_{name}"
    _as_postgres(*psql, f"CREATE DATABASE {name} OWNER {USER}{where}")
    return uri(port).rsplit("/", 1)[0] + f"/{name}"


def drop_database(name: str, port: int = DEFAULT_PORT) -> None:
    """Drop database `name` (its sessions ended) and its tablespace, if they exist."""
    psql = _psql(port)
    _as_postgres(*psql, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _as_postgres(*psql, f"DROP TABLESPACE IF EXISTS ts_{name}")


def _psql(port: int) -> list[str]:
    b = bindir()
    if b is None or not is_up(port):
        raise PostgresSetupError(f"no harness PostgreSQL on port {port}: run `make postgres-up`")
    return [str(b / "psql"), "-h", str(SOCKETS), "-p", str(port), "-U", "postgres", "-tAc"]


def down(port: int = DEFAULT_PORT) -> bool:
    """Stop the cluster `up` started (its data dir): True if one was running."""
    b = bindir()
    data = _data(port)
    if b is None or not (data / "postmaster.pid").exists():
        return False
    _as_postgres(str(b / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop", check=False, timeout=90)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="results.store.postgres", description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("up", "down", "status"))
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args(argv)
    try:
        if args.action == "up":
            print(up(args.port, args.host))
        elif args.action == "down":
            _log("stopped" if down(args.port) else "not running")
        else:
            print(uri(args.port) if is_up(args.port) else "down")
    except (PostgresSetupError, subprocess.TimeoutExpired, OSError) as e:
        print(f"postgres: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
