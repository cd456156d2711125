"""`mpiexec -n N python -m staging SOURCE LOCAL_ROOT --instance-size I`: stage a dataset for
N/I instances (one copy per instance under LOCAL_ROOT/instance<k>; `{node}` in LOCAL_ROOT is
replaced by the node name). Prints one JSON summary line on rank 0; `--report FILE` also
writes every rank's report (which source files it opened) for audits and tests.

Bad input (unwritable directory, missing or corrupt source file) is one line and exit 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m staging", description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path)
    p.add_argument("local_root")
    p.add_argument("--instance-size", type=int, default=0, help="ranks per instance (default: all ranks)")
    p.add_argument("--chunk-mb", type=float, default=16, help="MiB per rank per Allgather round")
    p.add_argument("--direct", default="auto", choices=("auto", "on", "off"), help="O_DIRECT reads")
    p.add_argument("--report", type=Path, help="write every rank's report here (JSON)")
    args = p.parse_args(argv)

    from mpi4py import MPI

    import staging
    from workloads.errors import BadInput
    from staging import layout, stager

    comm = MPI.COMM_WORLD
    try:
        lay = layout.build(comm, args.instance_size or comm.size)
        chunk = int(args.chunk_mb * (1 << 20)) // 4096 * 4096
        dest, rep = stager.stage(lay, args.source, args.local_root, chunk=chunk, direct=args.direct)
        summary = staging.summarize(lay, rep)
    except BadInput as e:
        if comm.rank == 0:
            print(f"staging: error: {e}", file=sys.stderr)
        return 2
    reports = comm.gather({"rank": comm.rank, "instance": lay.instance, "node": lay.node, "dest": str(dest),
                           **dataclasses.asdict(rep)}, root=0)
    if comm.rank == 0:
        print(json.dumps(summary))
        if args.report:
            args.report.write_text(json.dumps({"summary": summary, "ranks": reports}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
