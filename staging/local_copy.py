"""Staging when a rank is the only one that needs its files (S = 1) and reads go through the
page cache: no exchange is needed, so each file is copied in the kernel (copy_file_range, as
`cp` does; sendfile where the two filesystems refuse it) and a second thread verifies the
staged copy against the manifest (workloads.manifest.file_crc32 of the `.part` file) and
renames it into place, overlapping the next file's copy. Memory traffic per byte: the kernel's copy plus one
read for the checksum, against read + exchange + write + checksum through a user buffer.

Each source file is still opened and read exactly once; what is verified is the local copy
itself, so a bad write is caught too.
"""
from __future__ import annotations

import errno
import os
import queue
import threading
from pathlib import Path

from workloads.manifest import file_crc32, mismatch, short_source

KERNEL_COPY_REFUSED = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


class LocalCopier:
    def __init__(self, source: Path, dest: Path, meta: dict):
        self.source, self.dest, self.meta = source, dest, meta
        self.opened: list[str] = []       # source files opened, in order (the read count)
        self.read_errors: list[str] = []  # main thread
        self.errors: list[str] = []       # verify thread (read after close)
        self.bytes = self.files = 0
        self.crash: BaseException | None = None
        self._copy = os.copy_file_range
        self._dirs: set[Path] = set()
        self._q: queue.Queue = queue.Queue(maxsize=64)
        self._thread = threading.Thread(target=self._verify_loop, daemon=True)
        self._thread.start()

    def copy(self, name: str) -> None:
        """Copy one file to `<dest>/<name>.part` and queue it for verification."""
        src, part = self.source / name, Path(f"{self.dest / name}.part")
        want = self.meta[name]["bytes"]
        try:
            fd_in = os.open(src, os.O_RDONLY)
        except OSError as e:
            self.read_errors.append(f"cannot read source file {src}: {e.strerror}")
            return
        self.opened.append(str(src))
        try:
            if part.parent not in self._dirs:  # one mkdir per directory, not per file
                part.parent.mkdir(parents=True, exist_ok=True)
                self._dirs.add(part.parent)
            fd_out = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        except OSError as e:
            os.close(fd_in)
            self.read_errors.append(f"cannot write {part}: {e.strerror}")
            return
        try:
            done = self._copy_range(fd_in, fd_out, want)
        except OSError as e:
            done = -1
            self.read_errors.append(f"cannot copy {src} to {part}: {e.strerror}")
        finally:
            os.close(fd_in)
            os.close(fd_out)
        if done != want:
            if done >= 0:
                self.read_errors.append(short_source(src, done, want))
            part.unlink(missing_ok=True)
            return
        self.bytes += done
        self._q.put(name)

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

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()
        if self.crash is not None:
            raise self.crash

    def _verify_loop(self) -> None:
        for name in iter(self._q.get, None):
            try:
                self._verify(name)
            except BaseException as e:  # noqa: BLE001 - re-raised by close()
                self.crash = self.crash or e

    def _verify(self, name: str) -> None:
        part = Path(f"{self.dest / name}.part")
        size, crc = file_crc32(part)  # releases the GIL: overlaps the next copy
        problem = mismatch(name, size, crc, self.meta[name])
        if problem:
            part.unlink(missing_ok=True)
            self.errors.append(problem)
            return
        os.replace(part, self.dest / name)
        self.files += 1


def _sendfile(fd_in: int, fd_out: int, count: int, offset_in: int, offset_out: int) -> int:
    """copy_file_range's signature over sendfile (which writes at fd_out's file position)."""
    os.lseek(fd_out, offset_out, os.SEEK_SET)
    return os.sendfile(fd_out, fd_in, offset_in, count)
