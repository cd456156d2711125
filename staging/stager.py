"""Stage a dataset from a global directory to node-local storage; every source file is read
once across the job (see layout.py for who needs what).

Algorithm, per orthogonal group of S ranks that all need the same files F:
  1. Each member checks its local copy of F against the manifest (size + crc32); the union of
     what any member lacks is staged, so a rerun after an interruption stages only that.
  2. Those files are dealt round-robin to the S members. Each member cuts its files into
     pieces of <= chunk bytes and packs pieces into rounds of <= chunk bytes (each piece at an
     ALIGN-aligned offset, so O_DIRECT can read straight into the buffer).
  3. Per round: each member reads its pieces, then one MPI Allgatherv exchanges them (skipped
     when S = 1). Memory is bounded by NBUF x (S + 1) x chunk. Every member knows every
     member's plan (it is a function of the manifest), so no metadata travels.
  4. A member that lacks a file writes its pieces to `<file>.part` and computes their crc32,
     in two threads that overlap the next rounds' reads (NBUF rounds in flight), then checks
     size and checksum and renames the file into place.
Errors (missing source file, checksum mismatch, disk full) are collected, never raised inside
the collective loop: every rank takes part in every round, then all ranks agree on the first
error. Files already verified are never deleted.
"""
from __future__ import annotations

import mmap
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from staging.direct_io import ALIGN, RangeReader, align_up, direct_refused
from staging import local_copy
from staging.local_copy import LocalCopier
from staging.layout import Layout
from workloads.manifest import MANIFEST, checksum, crc32, mismatch, read_manifest, short_source

DEFAULT_CHUNK = 16 << 20  # bytes per member per round (NVIDIA: ~1 GiB per collective in total)
NBUF = 3  # rounds in flight: one being read and exchanged, two being checksummed and written


@dataclass
class Piece:
    name: str
    offset: int
    length: int
    slot: int = 0  # byte offset inside the round buffer (ALIGN-aligned)


@dataclass
class Report:
    files_needed: int = 0
    files_staged: int = 0           # files this rank wrote
    files_verified_present: int = 0  # already there and valid (resume)
    bytes_read: int = 0             # from the global directory, by this rank
    bytes_written: int = 0
    rounds: int = 0
    seconds: float = 0.0
    read_mode: str = ""
    read_fallback: str = ""
    threads: int = 0                # copy workers of the kernel-copy path (0: the exchange path ran)
    opened: list = field(default_factory=list)


def files_for(names: list[str], node_rank: int, node_ranks: int) -> list[str]:
    """The files the p-th instance rank on a node writes: every P-th, from a fixed order."""
    return names[node_rank::node_ranks]


def plan_rounds(files: list[str], sizes: dict[str, int], chunk: int) -> list[list[Piece]]:
    """Cut files into pieces of <= chunk bytes and pack them into rounds of <= chunk bytes."""
    rounds: list[list[Piece]] = [[]]
    used = 0
    for name in files:
        size = sizes[name]
        for off in range(0, max(size, 1), chunk):
            p = Piece(name, off, min(chunk, size - off))
            slot = align_up(used)
            if rounds[-1] and slot + p.length > chunk:
                rounds.append([])
                slot = 0
            p.slot = slot
            rounds[-1].append(p)
            used = slot + p.length
    return rounds if rounds[0] else []


def _round_bytes(pieces: list[Piece]) -> int:
    return pieces[-1].slot + pieces[-1].length if pieces else 0


def _valid(path: Path, meta: dict) -> bool:
    return path.is_file() and path.stat().st_size == meta["bytes"] and checksum(path) == meta["checksum"]


class _Writer:
    """Writes the pieces of the files this rank lacks, behind the collective loop: one thread
    computes each file's crc32 in piece order while another pwrites the same bytes to
    `<file>.part`, so reading round r+1 overlaps checksumming and writing round r. Once both
    are past a file's last piece, the write thread checks size and crc against the manifest
    and renames it into place. A round's buffer slot is released when both are done with it."""

    def __init__(self, dest: Path, wanted: set[str], meta: dict, slots: threading.Semaphore):
        self.dest, self.wanted, self.meta, self.slots = dest, wanted, meta, slots
        self.crc: dict[str, int] = {}                # crc thread only: name -> crc32 so far
        self.open: dict[str, int] = {}               # write thread only: name -> fd of its .part
        self.errors: list[str] = []                  # write thread only (read after close)
        self.failed: set[str] = set()
        self.written = self.files = 0
        self.crash: BaseException | None = None
        self._crc_q: queue.Queue = queue.Queue()
        self._write_q: queue.Queue = queue.Queue()
        self._crc_done: queue.Queue = queue.Queue()  # one token per round whose checksums are final
        self._threads = [threading.Thread(target=self._crc_loop, daemon=True),
                         threading.Thread(target=self._write_loop, daemon=True)]
        for t in self._threads:
            t.start()

    def submit(self, pieces: list[tuple[Piece, memoryview]]) -> None:
        """One round's pieces with their bytes (views into the round's buffer slot)."""
        mine = [(p, data) for p, data in pieces if p.name in self.wanted]
        self._crc_q.put(mine)
        self._write_q.put(mine)

    def close(self) -> None:
        """Finish every submitted round; re-raise a crash of either thread."""
        self._crc_q.put(None)
        self._write_q.put(None)
        for t in self._threads:
            t.join()
        for fd in self.open.values():  # files whose last piece never came (an aborted loop)
            os.close(fd)
        if self.crash is not None:
            raise self.crash

    def _crc_loop(self) -> None:
        for pieces in iter(self._crc_q.get, None):
            try:
                for p, data in pieces:  # the checksum releases the GIL while it runs
                    self.crc[p.name] = crc32(data, self.crc.get(p.name, 0) if p.offset else 0)
            except BaseException as e:  # noqa: BLE001 - re-raised by close()
                self.crash = self.crash or e
            finally:
                self._crc_done.put(True)

    def _write_loop(self) -> None:
        for pieces in iter(self._write_q.get, None):
            try:
                ends = [p.name for p, data in pieces if self._write(p, data)]
                self._crc_done.get()  # this round's checksums are final
                for name in ends:
                    self._close(name)
            except BaseException as e:  # noqa: BLE001 - re-raised by close()
                self.crash = self.crash or e
            finally:
                self.slots.release()

    def _write(self, p: Piece, data: memoryview) -> bool:
        """pwrite one piece; True when it was its file's last."""
        if p.name in self.failed:
            return False
        final = self.dest / p.name
        try:
            if p.offset == 0:
                final.parent.mkdir(parents=True, exist_ok=True)
                self.open[p.name] = os.open(f"{final}.part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.pwrite(self.open[p.name], data, p.offset)
        except OSError as e:
            self._drop(p.name, f"cannot write {final}: {e.strerror}")
            return False
        self.written += p.length
        return p.offset + p.length >= self.meta[p.name]["bytes"]

    def _close(self, name: str) -> None:
        final = self.dest / name
        fd = self.open.pop(name)
        size = os.fstat(fd).st_size
        os.close(fd)
        want, crc = self.meta[name], self.crc.pop(name, 0)
        problem = mismatch(name, size, crc, want)
        if problem:
            self._drop(name, problem)
            return
        os.replace(f"{final}.part", final)
        self.files += 1

    def _drop(self, name: str, msg: str) -> None:
        if name in self.open:
            os.close(self.open.pop(name))
        Path(f"{self.dest / name}.part").unlink(missing_ok=True)  # never a verified file: only our partial copy
        self.failed.add(name)
        self.errors.append(msg)


def instance_dir(local_root: str | Path, lay: Layout) -> Path:
    """<local_root>/instance<k>; `{node}` in local_root is replaced by the node name."""
    return Path(str(local_root).replace("{node}", lay.node)) / f"instance{lay.instance}"


def stage(lay: Layout, source: Path, local_root: str | Path, chunk: int = DEFAULT_CHUNK,
          direct: str = "auto") -> tuple[Path, Report]:
    """Collective over lay.world. Returns (this instance's staged copy, this rank's report);
    raises BadInput/DataError on every rank alike if any rank failed."""
    from workloads.errors import BadInput, DataError

    dest = instance_dir(local_root, lay)

    t0 = time.perf_counter()
    if chunk % ALIGN:
        raise BadInput(f"chunk must be a multiple of {ALIGN} bytes; got {chunk}")
    problem = ""
    try:
        meta = read_manifest(source)["files"]
    except (OSError, ValueError) as e:
        meta, problem = {}, f"cannot read {source / MANIFEST}: {e}"
    try:
        dest.mkdir(parents=True, exist_ok=True)
        probe = dest / f".probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        problem = problem or f"staging directory {dest} is not writable: {e.strerror}"
    _agree(lay, [problem] if problem else [], BadInput)

    names = sorted(meta)
    mine = files_for(names, lay.node_rank, lay.node_ranks)
    on_host = _ranks_on_host(lay)  # collective: before any branch a rank could take alone
    rep = Report(files_needed=len(mine))
    for n in mine:  # temporaries an interrupted staging left behind (never a verified file)
        Path(f"{dest / n}.part").unlink(missing_ok=True)
    lacking = [n for n in mine if not _valid(dest / n, meta[n])]
    rep.files_verified_present = len(mine) - len(lacking)
    _agree(lay, _space_problem(lay, dest, sum(meta[n]["bytes"] for n in lacking), len(lacking)), BadInput)
    todo = sorted(set().union(*lay.orth.allgather(lacking)))  # step 1: union over the group
    if lay.orth.size == 1 and _page_cache_reads(direct, source, todo, rep):
        errors = _copy_local(source, dest, todo, meta, rep, local_copy.node_threads(on_host))
    else:
        errors = _exchange(lay, source, dest, todo, set(lacking), meta, chunk, direct, rep)
    _agree(lay, errors, DataError)
    if lay.node_rank == 0:  # the staged copy is a dataset in its own right: loaders use its manifest
        (dest / MANIFEST).write_bytes((source / MANIFEST).read_bytes())
    lay.world.Barrier()
    rep.seconds = time.perf_counter() - t0
    return dest, rep


def _ranks_on_host(lay: Layout) -> int:
    """Ranks of the whole job sharing this host's cores (every instance's: MPI's shared-memory
    split, so HARNESS_NODE's pretend nodes on one host count together). Collective."""
    from mpi4py import MPI
    host = lay.world.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return host.size
    finally:
        host.Free()


def _page_cache_reads(direct: str, source: Path, todo: list[str], rep: Report) -> bool:
    """Whether reads go through the page cache ('off', or 'auto' where O_DIRECT is refused)."""
    if direct == "off":
        rep.read_mode = "buffered"
        return True
    if direct == "on" or not todo:
        return False
    reason = direct_refused(str(source / todo[0]))
    if reason:
        rep.read_mode, rep.read_fallback = "buffered", reason
    return bool(reason)


def _copy_local(source: Path, dest: Path, todo: list[str], meta: dict, rep: Report, threads: int) -> list[str]:
    """S = 1 with page-cache reads: kernel copies, each verified and renamed by the worker
    that made it, `threads` workers (local_copy.py)."""
    copier = LocalCopier(source, dest, meta, threads)
    copier.run(todo)
    rep.opened, rep.bytes_read, rep.bytes_written, rep.files_staged = copier.opened, copier.bytes, copier.bytes, copier.files
    rep.threads = threads
    return copier.errors


def _exchange(lay: Layout, source: Path, dest: Path, todo: list[str], lacking: set[str], meta: dict,
              chunk: int, direct: str, rep: Report) -> list[str]:
    """Steps 2-4: read this member's share into round buffers, Allgatherv, write what we lack."""
    from mpi4py import MPI

    S, s = lay.orth.size, lay.orth.rank
    sizes = {n: meta[n]["bytes"] for n in todo}
    plans = [plan_rounds(todo[m::S], sizes, chunk) for m in range(S)]  # step 2
    n_rounds = max((len(p) for p in plans), default=0)
    rep.rounds = n_rounds
    reader = RangeReader(direct)
    read_errors: list[str] = []
    # NBUF round buffers: round r is read (and exchanged) into slot r % NBUF while the writer
    # threads checksum and write earlier rounds. mmap: page-aligned, a valid O_DIRECT target.
    # With S = 1 the exchange is a copy to oneself, so it is skipped.
    slots = threading.Semaphore(NBUF)
    sends = [memoryview(mmap.mmap(-1, max(chunk, ALIGN))) for _ in range(NBUF)]
    recvs = [memoryview(bytearray(S * chunk)) for _ in range(NBUF)] if S > 1 else sends
    writer = _Writer(dest, lacking, meta, slots)
    try:
        for r in range(n_rounds):  # step 3
            slots.acquire()  # the slot of round r - NBUF is written and free again
            send_mv, recv_mv = sends[r % NBUF], recvs[r % NBUF]
            pieces = [p[r] if r < len(p) else [] for p in plans]
            for p in pieces[s]:
                try:
                    got = reader.read(str(source / p.name), p.offset, p.length, send_mv[p.slot:])
                    if got != p.length:
                        read_errors.append(short_source(source / p.name, p.offset + got, meta[p.name]["bytes"]))
                    rep.bytes_read += got
                except OSError as e:
                    read_errors.append(f"cannot read source file {source / p.name}: {e.strerror}")
            counts = [_round_bytes(pc) for pc in pieces]
            displs = [sum(counts[:m]) for m in range(S)]
            if S > 1:
                lay.orth.Allgatherv([send_mv[:counts[s]], counts[s], MPI.BYTE], [recv_mv, (counts, displs), MPI.BYTE])
            writer.submit([(p, recv_mv[displs[m] + p.slot:displs[m] + p.slot + p.length])  # step 4
                           for m in range(S) for p in pieces[m]])
    finally:
        writer.close()
        reader.close()
    rep.read_mode, rep.read_fallback, rep.opened = reader.mode, reader.fallback_reason, reader.opened
    rep.files_staged, rep.bytes_written = writer.files, writer.written
    return read_errors + writer.errors


def _space_problem(lay: Layout, dest: Path, need: int, files: int) -> list[str]:
    """Collective: does every node-local disk hold what its ranks are about to write (all
    instances on one node that share a filesystem summed)? Checked before any byte is copied,
    so a disk too small fails at once instead of filling up to 100%."""
    disk = (lay.node, os.stat(dest).st_dev)
    every = lay.world.allgather((disk, need, files))
    need_here = sum(b for d, b, _ in every if d == disk)
    files_here = sum(f for d, _, f in every if d == disk)
    free = shutil.disk_usage(dest).free
    if need_here <= free:
        return []
    return [f"node-local disk of {dest} ({lay.node}) has {free / 1e6:.1f} MB free; staging needs {need_here / 1e6:.1f} "
            f"MB more for {files_here} files; nothing was copied (free space or choose another LOCAL_ROOT)"]


def _agree(lay: Layout, errors: list[str], exc: type) -> None:
    """Collective: if any rank has an error, every rank raises the first one (rank order)."""
    every = lay.world.allgather(errors[:1])
    first = next((e[0] for e in every if e), None)
    if first:
        raise exc(first)
