"""The measurement loop of `python -m harness comm` (see harness/comm/bench.py for what is
measured and how): process groups, one record per (collective, backend, dtype), statuses."""
from __future__ import annotations

import os
import sys

import torch

from harness.comm import bench as comm_bench
from harness.measure import envinfo
from harness.comm import cases
from harness.parallel import dist as dist_mod
from harness.comm.record import CommRecord
from harness.config.errors import Killed
from harness.measure.timing import now
from results.record import comm as comm_record
from results.record import schema
from results.record.paths import results_root


class _Groups:
    """The backends this job can run, their groups, and why the others cannot run here."""

    def __init__(self, opts: comm_bench.Options, info: dist_mod.DistInfo):
        import torch.distributed as td
        self.info = info
        self.alive = now()  # when the last call completed (the watchdog reads it)
        self.comm = self.nccl = None
        self.why = {"gloo": "", "mpi": "", "nccl": ""}
        if "mpi" in opts.backends:
            if info.mpi:
                from mpi4py import MPI
                self.comm = MPI.COMM_WORLD
            else:
                self.why["mpi"] = (f"not started by an MPI launcher (ranks came from {info.launcher}), so MPI's "
                                   "COMM_WORLD would hold this rank alone; run under mpiexec to compare MPI")
        if "nccl" in opts.backends:
            if torch.cuda.is_available():
                torch.cuda.set_device(info.local_rank)
                self.nccl = td.new_group(backend="nccl")
            else:
                self.why["nccl"] = "NCCL needs CUDA GPUs and torch sees none on this machine"

    def device(self, backend: str, via: str = "direct") -> torch.device:
        """Where the buffers live: the GPU for NCCL, and for the host relay wherever the job's
        accelerator is (a GPU if there is one; on a CPU-only machine, host memory)."""
        gpu = backend == "nccl" or (via == "host" and torch.cuda.is_available())
        return torch.device("cuda", self.info.local_rank) if gpu else torch.device("cpu")

    def barrier(self, backend: str) -> None:
        import torch.distributed as td
        if backend == "mpi":
            self.comm.Barrier()
        else:
            td.barrier()


def _measure(g: _Groups, backend: str, collective: str, dtype: str, nbytes: int,
             opts: comm_bench.Options) -> dict:
    """One size of one collective on one backend, every mode: the record's row."""
    import torch.distributed as td
    n, rank = g.info.world, g.info.rank
    elem = cases.DTYPES[dtype].itemsize
    count = cases.elements(collective, nbytes, elem, n)
    row = {"bytes": count * elem, "count": count, "requested_bytes": nbytes, "wrong": 0}
    if count == 0:
        return {**row, "bytes": nbytes, "skipped": f"below one {dtype} element per rank"}
    for mode in cases.modes(backend, collective):
        case = cases.make(backend, collective, count, dtype, mode, rank, n, g.device(backend, opts.via),
                          group=g.nccl if backend == "nccl" else None, comm=g.comm, via=opts.via)
        case.init()
        g.barrier(backend)
        for _ in range(opts.warmup):
            case.run()
            g.alive = now()
        times = []
        for _ in range(opts.iters):
            t0 = now()
            case.run()  # returns when the collective is complete on this rank
            times.append(now() - t0)
            g.alive = now()  # the watchdog's heartbeat
        every: list = [None] * n
        td.all_gather_object(every, times)  # control plane (gloo), outside the timing
        row.update(comm_record.size_row(collective, count * elem, n, mode, every))
        if opts.check:
            case.init()
            case.run()
            g.alive = now()
            wrong = torch.tensor([case.wrong()], dtype=torch.int64)
            td.all_reduce(wrong)
            row[f"wrong_{mode}"] = int(wrong)
            row["wrong"] += int(wrong)
    return row


def main(opts: comm_bench.Options, ingest: bool = True) -> int:
    """Checks that need the launcher and the machine (UsageError, one line), then the benchmark."""
    from harness.config.run_config import UsageError
    info = dist_mod.from_env()
    if info.world < 2:
        raise UsageError("collectives need 2 or more ranks: run under mpiexec -n N, srun or torchrun "
                         "(make comm RANKS=N)")
    if "nccl" in opts.backends and opts.explicit_backends and not torch.cuda.is_available():
        raise UsageError("backend nccl needs CUDA GPUs and torch sees none here; valid here: gloo, mpi")
    from harness.parallel import cpu_quota as rank_cpu
    from harness.config.errors import BadInput, Unsupported
    try:  # HARNESS_RANK_CPU: links measured between ranks held as the planner's check holds them
        quota = rank_cpu.apply(info.rank, info.world)
    except (BadInput, Unsupported) as e:
        raise UsageError(str(e)) from None
    try:
        return run(opts, info, ingest, rank_cpu.record(info.world) if quota else None)
    finally:
        if quota:
            quota.release()


def run(opts: comm_bench.Options, info: dist_mod.DistInfo, ingest: bool, constraint: dict | None = None) -> int:
    import torch.distributed as td

    from harness.run.runner import ingest_quietly, signals_raise_killed
    threads = dist_mod.cpu_threads()
    if threads:
        torch.set_num_threads(threads)
    root = results_root()
    dist_mod.init(info, "cpu")  # gloo: the gloo backend and the control plane of every backend
    g = _Groups(opts, info)
    ids: list = [comm_bench.bench_id()]
    td.broadcast_object_list(ids, src=0)
    env, ceiling = {}, {}
    if info.is_main:  # the other ranks wait in a gloo barrier (blocking, not spinning)
        from harness.measure import membw
        ceiling = membw.ceilings(torch.get_num_threads())
        if g.nccl is not None:  # NCCL's ceiling is the GPUs' link: its datasheet figure, and device memory copy
            ceiling.update(membw.gpu_ceilings())
        env = {**envinfo.capture(), "load_start": comm_bench.load_now(), "threads_per_rank": torch.get_num_threads()}
    td.barrier()
    nodes = dist_mod.node_count(info)
    cores = len(os.sched_getaffinity(0))  # cores on this node the ranks may use
    common = {**comm_bench.describe(opts), "ranks": info.world, "nodes": nodes, "bench": ids[0],
              "launcher": info.launcher}
    facts = {**ceiling, "cpu_cores": cores, "ranks_per_node": dist_mod.ranks_on_this_node(),
             **({"rank_cpu": constraint["cpus_per_rank"]} if constraint else {}),
             **{f"{k}_start": v for k, v in env.get("load_start", {}).items()}}
    open_recs: list[CommRecord] = []
    done: list[CommRecord] = []
    failed = 0
    sizes = comm_record.sizes(opts.min_bytes, opts.max_bytes, opts.factor)
    total = len(opts.dtypes) * len(opts.collectives) * len(sizes)
    watchdog = _watchdog(g, open_recs)
    with signals_raise_killed(), comm_bench.progress(info.is_main) as bar:
        task = bar.add_task("collectives", total=total)
        try:
            for dtype in opts.dtypes:
                for collective in opts.collectives:
                    active = {}  # backend -> its open record (None on ranks other than 0)
                    for backend in opts.backends:
                        cfg = {**common, "collective": collective, "backend": backend, "dtype": dtype,
                               "device": g.device(backend, opts.via).type,
                               "modes": list(cases.modes(backend, collective))}
                        rec = CommRecord(root, cfg, env, facts) if info.is_main else None
                        done += [rec] if rec else []
                        reason = g.why[backend] or cases.unsupported(backend, collective, dtype) or (
                            "the host relay carries gloo or MPI traffic between hosts; NCCL is a device library"
                            if opts.via == "host" and backend == "nccl" else "")
                        if reason:
                            _close(rec, open_recs, schema.UNSUPPORTED, reason)
                            continue
                        active[backend] = rec
                        open_recs += [rec] if rec else []
                    for nbytes in sizes:
                        bar.update(task, description=f"{collective} {dtype} {nbytes:,} B")
                        for backend in list(active):
                            row = _measure(g, backend, collective, dtype, nbytes, opts)
                            if active[backend]:
                                active[backend].log_size(row)
                            if row["wrong"]:  # wrong data is a failed record, not a fast one
                                failed += 1
                                _close(active.pop(backend), open_recs, schema.FAILED,
                                       f"wrong data: {row['wrong']} elements differ at {row['bytes']:,} B")
                        bar.advance(task)
                    for rec in active.values():
                        _close(rec, open_recs, schema.FINISHED, "", loadavg_1m_end=comm_bench.load_now().get("loadavg_1m"))
        except Killed as e:
            failed += 1
            for rec in list(open_recs):
                _close(rec, open_recs, schema.KILLED, str(e))
        except Exception as e:  # noqa: BLE001 - a dead peer, a timeout: the records say so
            failed += 1
            reason = f"{type(e).__name__}: {e}".splitlines()[0]
            if dist_mod.peer_lost(reason):
                reason = f"another rank died or hung: {reason}"
            for rec in list(open_recs):
                _close(rec, open_recs, schema.FAILED, reason)
            print(f"harness: comm failed: {reason}", file=sys.stderr)
        finally:
            watchdog.set()
            dist_mod.shutdown(finished=not failed)
    if info.is_main:
        _report(done, ceiling)
        for rec in done if ingest else ():
            problem = ingest_quietly(rec.dir, root)
            if problem:
                print(f"warning: MLflow store not updated ({problem}); the records are kept, run `make ingest`",
                      file=sys.stderr)
                break
    return 1 if failed else 0


def _close(rec: CommRecord | None, open_recs: list[CommRecord], status: str, reason: str, **facts) -> None:
    """Finish a record (rank 0; other ranks hold None) and drop it from the open ones."""
    if rec is None:
        return
    rec.info.update({k: v for k, v in facts.items() if v is not None})
    rec.finish(status, reason)
    if rec in open_recs:
        open_recs.remove(rec)


def _watchdog(g: _Groups, open_recs: list[CommRecord]):
    """MPI calls have no timeout: a rank that hangs (stopped, deadlocked) would block the others
    forever. When no call has completed for 1.5x the process group's timeout (gloo's own
    timeout fires first on gloo), rank 0 fails its open records and every rank exits."""
    import threading
    limit = 1.5 * float(os.environ.get("HARNESS_DIST_TIMEOUT", dist_mod.DEFAULT_TIMEOUT_S))

    stop = threading.Event()

    def watch():
        while not stop.wait(min(5.0, limit / 4)):
            if now() - g.alive > limit:
                for rec in list(open_recs):
                    rec.finish(schema.FAILED, f"another rank died or hung: no collective completed in {limit:.0f} s")
                print(f"harness: comm failed: no collective completed in {limit:.0f} s (a rank hung?)",
                      file=sys.stderr, flush=True)
                os._exit(1)  # the main thread is blocked inside the hung call
    threading.Thread(target=watch, daemon=True, name="comm-watchdog").start()
    return stop  # set() when the measurements are over


def _report(records: list[CommRecord], ceiling: dict) -> None:
    """busbw at the largest size, one line per collective, backends side by side."""
    if not records:
        return
    backends = list(dict.fromkeys(r.config["backend"] for r in records))
    print(f"busbw (GB/s) at the largest size, {records[0].config['ranks']} ranks; memory copy "
          f"{ceiling.get('copy_gb_per_s_rank', float('nan')):.2f} GB/s with a rank's {ceiling.get('copy_threads_rank')} "
          f"thread(s), {ceiling.get('copy_gb_per_s_all_cores', float('nan')):.2f} with all cores")
    print(f"  {'collective':<15}{'dtype':<10}" + "".join(f"{b:>12}" for b in backends))
    for key in dict.fromkeys((r.config["collective"], r.config["dtype"]) for r in records):
        cells = []
        for b in backends:
            r = next(x for x in records if (x.config["collective"], x.config["dtype"], x.config["backend"]) == (*key, b))
            bw = r.final.get("busbw_gb_per_s")
            cells.append(f"{bw:>12.3f}" if r.status == schema.FINISHED and bw is not None else f"{r.status:>12}")
        print(f"  {key[0]:<15}{key[1]:<10}" + "".join(cells))
    print(f"records: {records[0].dir.parent} ({len(records)}); portal: make portal, page Collectives")
