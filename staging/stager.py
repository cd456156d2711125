"""Stage a dataset from a global directory to node-local storage; every source file is read
once across the job (see layout.py for who needs what).

Algorithm, per orthogonal group of S ranks that all need the same files F:
  1. Each member checks its local copy of F against the manifest (size + crc32); the union of
     what any member lacks is staged, so a rerun after an interruption stages only that.
  2. Those files are dealt round-robin to the S members. Each member cuts its files into
     pieces of <= chunk bytes and packs pieces into rounds of <= chunk bytes (each piece at an
     ALIGN-aligned offset, so O_DIRECT can read straight into the buffer).
  3. Per round: each member reads its pieces, then one MPI Allgatherv exchanges them. Memory
     per collective is bounded by S x chunk. Every member knows every member's plan (it is a
     function of the manifest), so no metadata travels.
  4. A member that lacks a file writes its pieces to `<file>.part` (crc32 computed on the way),
     checks size and checksum, and renames it into place.
Errors (missing source file, checksum mismatch, disk full) are collected, never raised inside
the collective loop: every rank takes part in every round, then all ranks agree on the first
error. Files already verified are never deleted.
"""
from __future__ import annotations

import mmap
import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from staging.direct_io import ALIGN, RangeReader, align_up
from staging.layout import Layout
from workloads.manifest import MANIFEST, checksum, read_manifest

DEFAULT_CHUNK = 16 << 20  # bytes per member per round (NVIDIA: ~1 GiB per collective in total)


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
    """Writes arriving pieces of the files this rank lacks; pieces of a file arrive in order."""

    def __init__(self, dest: Path, wanted: set[str], meta: dict):
        self.dest, self.wanted, self.meta = dest, wanted, meta
        self.open: dict[str, tuple[int, int]] = {}  # name -> (fd, crc so far)
        self.errors: list[str] = []
        self.failed: set[str] = set()
        self.written = self.files = 0

    def put(self, p: Piece, data: memoryview) -> None:
        if p.name not in self.wanted or p.name in self.failed:
            return
        final = self.dest / p.name
        try:
            if p.offset == 0:
                final.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(f"{final}.part", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                self.open[p.name] = (fd, 0)
            fd, crc = self.open[p.name]
            os.pwrite(fd, data, p.offset)
            self.open[p.name] = (fd, zlib.crc32(data, crc))
            self.written += p.length
            if p.offset + p.length >= self.meta[p.name]["bytes"]:
                self._close(p.name, final)
        except OSError as e:
            self._drop(p.name, final, f"cannot write {final}: {e.strerror}")

    def _close(self, name: str, final: Path) -> None:
        fd, crc = self.open.pop(name)
        size = os.fstat(fd).st_size
        os.close(fd)
        want = self.meta[name]
        if size != want["bytes"] or f"crc32:{crc:08x}" != want["checksum"]:
            self._drop(name, final, f"checksum mismatch for {name}: staged {size} bytes crc32:{crc:08x}, "
                                    f"manifest says {want['bytes']} bytes {want['checksum']}")
            return
        os.replace(f"{final}.part", final)
        self.files += 1

    def _drop(self, name: str, final: Path, msg: str) -> None:
        if name in self.open:
            os.close(self.open.pop(name)[0])
        Path(f"{final}.part").unlink(missing_ok=True)  # never a verified file: only our partial copy
        self.failed.add(name)
        self.errors.append(msg)


def instance_dir(local_root: str | Path, lay: Layout) -> Path:
    """<local_root>/instance<k>; `{node}` in local_root is replaced by the node name."""
    return Path(str(local_root).replace("{node}", lay.node)) / f"instance{lay.instance}"


def stage(lay: Layout, source: Path, local_root: str | Path, chunk: int = DEFAULT_CHUNK,
          direct: str = "auto") -> tuple[Path, Report]:
    """Collective over lay.world. Returns (this instance's staged copy, this rank's report);
    raises BadInput/DataError on every rank alike if any rank failed."""
    from mpi4py import MPI

    from harness.errors import BadInput, DataError

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
    rep = Report(files_needed=len(mine))
    for n in mine:  # temporaries an interrupted staging left behind (never a verified file)
        Path(f"{dest / n}.part").unlink(missing_ok=True)
    lacking = [n for n in mine if not _valid(dest / n, meta[n])]
    rep.files_verified_present = len(mine) - len(lacking)
    todo = sorted(set().union(*lay.orth.allgather(lacking)))  # step 1: union over the group
    S, s = lay.orth.size, lay.orth.rank
    sizes = {n: meta[n]["bytes"] for n in todo}
    plans = [plan_rounds(todo[m::S], sizes, chunk) for m in range(S)]  # step 2
    n_rounds = max((len(p) for p in plans), default=0)
    rep.rounds = n_rounds

    reader = RangeReader(direct)
    writer = _Writer(dest, set(lacking), meta)
    read_errors: list[str] = []
    send = mmap.mmap(-1, max(chunk, ALIGN))  # page-aligned: valid O_DIRECT target
    recv = bytearray(S * chunk)
    send_mv, recv_mv = memoryview(send), memoryview(recv)
    for r in range(n_rounds):  # step 3
        pieces = [p[r] if r < len(p) else [] for p in plans]
        for p in pieces[s]:
            try:
                got = reader.read(str(source / p.name), p.offset, p.length, send_mv[p.slot:])
                if got != p.length:
                    read_errors.append(f"source file {source / p.name} is shorter than the manifest says "
                                       f"({p.offset + got} < {meta[p.name]['bytes']} bytes)")
                rep.bytes_read += got
            except OSError as e:
                read_errors.append(f"cannot read source file {source / p.name}: {e.strerror}")
        counts = [_round_bytes(pc) for pc in pieces]
        displs = [sum(counts[:m]) for m in range(S)]
        lay.orth.Allgatherv([send_mv[:counts[s]], counts[s], MPI.BYTE], [recv_mv, (counts, displs), MPI.BYTE])
        for m in range(S):  # step 4
            for p in pieces[m]:
                start = displs[m] + p.slot
                writer.put(p, recv_mv[start:start + p.length])
    reader.close()
    rep.read_mode, rep.read_fallback, rep.opened = reader.mode, reader.fallback_reason, reader.opened
    rep.files_staged, rep.bytes_written = writer.files, writer.written
    _agree(lay, read_errors + writer.errors, DataError)
    if lay.node_rank == 0:  # the staged copy is a dataset in its own right: loaders use its manifest
        (dest / MANIFEST).write_bytes((source / MANIFEST).read_bytes())
    lay.world.Barrier()
    rep.seconds = time.perf_counter() - t0
    return dest, rep


def _agree(lay: Layout, errors: list[str], exc: type) -> None:
    """Collective: if any rank has an error, every rank raises the first one (rank order)."""
    every = lay.world.allgather(errors[:1])
    first = next((e[0] for e in every if e), None)
    if first:
        raise exc(first)
