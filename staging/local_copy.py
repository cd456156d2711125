"""Staging when a rank is the only one that needs its files (S = 1) and reads go through the
page cache: no exchange is needed, so each file is copied in the kernel (copy_file_range, as
`cp` does; sendfile where the two filesystems refuse it), then the staged copy is verified
against the manifest (workloads.manifest.file_crc32 of the `.part` file, read back while its
pages are still in the cache) and renamed into place. Memory traffic per byte: the kernel's
copy plus one read for the checksum, against read + exchange + write + checksum through a user
buffer.

`threads` workers each take the next file, copy it, verify it and rename it: the rank's share
of the node's cores. Why workers and not a copy thread beside a verify thread: with ISA-L's
CRC-32 the verification is a third of the copy's time, so a lone copy thread was the limit
(the kernel's copy is bound by one core's page-cache work, not by memory bandwidth). Measured
on the 2-core machine, CosmoFlow small (1,281 files, 1.34 GB), 1 rank, paired with `cp` (make
perf, staging_throughput, 2026-12-02): copy + verify threads 0.79 [0.74, 0.83] of `cp`, two
workers 1.25 [1.06, 2.20].

Each source file is still opened and read exactly once; what is verified is the local copy
itself, so a bad write is caught too.
"""
from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

from workloads.manifest import file_crc32, mismatch, short_source

KERNEL_COPY_REFUSED = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def node_threads(ranks_on_node: int) -> int:
    """This rank's share of the cores this process may run on (sched_getaffinity)."""
    return max(1, len(os.sched_getaffinity(0)) // max(1, ranks_on_node))


class LocalCopier:
    def __init__(self, source: Path, dest: Path, meta: dict, threads: int = 1):
        self.source, self.dest, self.meta = source, dest, meta
        self.threads = max(1, threads)
        self.opened: list[str] = []       # source files opened (the read count; order varies by thread)
        self.errors: list[str] = []       # one line per file that could not be staged
        self.bytes = self.files = 0
        self._copy = os.copy_file_range
        self._lock = threading.Lock()     # the file iterator, the counters, the directory set
        self._dirs: set[Path] = set()

    def run(self, names: list[str]) -> None:
        """Copy, verify and rename every file of `names` with `threads` workers (this thread
        one of them). Every file is attempted even after another failed; an unexpected
        exception in a worker is raised here once all have stopped."""
        files = iter(names)
        crash: list[BaseException] = []

        def work() -> None:
            buf = bytearray(1 << 20)  # this worker's read-back buffer (file_crc32: no mmap beside other workers)
            try:
                while True:
                    with self._lock:
                        name = next(files, None)
                    if name is None:
                        return
                    self._stage_one(name, buf)
            except BaseException as e:  # noqa: BLE001 - re-raised below, after every worker stopped
                crash.append(e)

        helpers = [threading.Thread(target=work, daemon=True, name="stage-copy") for _ in range(self.threads - 1)]
        for t in helpers:
            t.start()
        work()
        for t in helpers:
            t.join()
        if crash:
            raise crash[0]

    def _stage_one(self, name: str, buf: bytearray) -> None:
        done = self._copy_part(name)
        if done is None:
            return
        part = Path(f"{self.dest / name}.part")
        size, crc = file_crc32(part, buf)  # its pages were just written: read back from the cache
        problem = mismatch(name, size, crc, self.meta[name])
        if problem:
            part.unlink(missing_ok=True)
            self.errors.append(problem)
            return
        os.replace(part, self.dest / name)
        with self._lock:
            self.bytes += done
            self.files += 1

    def _copy_part(self, name: str) -> int | None:
        """Copy one file to `<dest>/<name>.part`: its size, or None (the error recorded)."""
        src, part = self.source / name, Path(f"{self.dest / name}.part")
        want = self.meta[name]["bytes"]
        try:
            fd_in = os.open(src, os.O_RDONLY)
        except OSError as e:
            self.errors.append(f"cannot read source file {src}: {e.strerror}")
            return None
        self.opened.append(str(src))
        try:
            with self._lock:  # one mkdir per directory, not per file (held: no worker opens before it)
                if part.parent not in self._dirs:
                    part.parent.mkdir(parents=True, exist_ok=True)
                    self._dirs.add(part.parent)
            fd_out = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            os.close(fd_in)
            self.errors.append(f"cannot write {part}: {e.strerror}")
            return None
        try:
            done = self._copy_range(fd_in, fd_out, want)
        except OSError as e:
            done = -1
            self.errors.append(f"cannot copy {src} to {part}: {e.strerror}")
        finally:
            os.close(fd_in)
            os.close(fd_out)
        if done != want:
            if done >= 0:
                self.errors.append(short_source(src, done, want))
            part.unlink(missing_ok=True)
            return None
        return done

    def _copy_range(self, fd_in: int, fd_out: int, size: int) -> int:
        done = 0
        while done < size:
            try:
                n = self._copy(fd_in, fd_out, size - done, done, done)
            except OSError as e:
                if self._copy is os.sendfile or e.errno not in KERNEL_COPY_REFUSED:
                    raise
                self._copy = _sendfile  # e.g. EXDEV across filesystems on newer kernels
                continue
            if n == 0:
                break
            done += n
        return done


def _sendfile(fd_in: int, fd_out: int, count: int, offset_in: int, offset_out: int) -> int:
    """copy_file_range's signature over sendfile (which writes at fd_out's file position)."""
    os.lseek(fd_out, offset_out, os.SEEK_SET)
    return os.sendfile(fd_out, fd_in, offset_in, count)
