"""Reading file ranges with O_DIRECT (page cache bypassed) where the filesystem allows it.

As NVIDIA's stager does (io_helpers/cpp/direct_io.cpp): the aligned bulk of a range is read
through an O_DIRECT descriptor into an aligned buffer, and the unaligned tail through a normal
descriptor. Filesystems without O_DIRECT (tmpfs, some FUSE mounts) refuse the open with EINVAL;
then every read is a normal buffered read and the reason is reported, never a failure.
"""
from __future__ import annotations

import errno
import os

ALIGN = 4096  # bytes: offsets, lengths and buffer addresses of O_DIRECT reads (>= logical block size)


def align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _refused(path: str) -> str:
    return f"O_DIRECT refused by the filesystem of {path} (EINVAL)"


def direct_refused(path: str) -> str:
    """Why O_DIRECT can't be used for `path`'s filesystem, or '' when it can."""
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        if e.errno == errno.EINVAL:
            return _refused(path)
    return ""  # other errors (a missing file) are reported by the read itself


class RangeReader:
    """Reads (path, offset, length) into a memoryview. `direct`: 'auto' (O_DIRECT when the
    filesystem supports it), 'on' (required: a refusal is an error) or 'off'."""

    def __init__(self, direct: str = "auto"):
        if direct not in ("auto", "on", "off"):
            raise ValueError(f"direct must be auto, on or off; got {direct!r}")
        self.direct = direct
        self.mode = "buffered" if direct == "off" else "direct"
        self.fallback_reason = ""
        self._path: str | None = None
        self._fds: tuple[int, int | None] = (-1, None)
        self.opened: list[str] = []  # every source file opened, in order (the read count)

    def _open(self, path: str) -> tuple[int, int | None]:
        if path == self._path:
            return self._fds
        self.close()
        plain = os.open(path, os.O_RDONLY)
        direct_fd = None
        if self.mode == "direct":
            try:
                direct_fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            except OSError as e:
                if e.errno != errno.EINVAL or self.direct == "on":
                    os.close(plain)
                    raise
                self.mode, self.fallback_reason = "buffered", _refused(path)
        self._path, self._fds = path, (plain, direct_fd)
        self.opened.append(path)
        return self._fds

    def read(self, path: str, offset: int, length: int, out: memoryview) -> int:
        """Read `length` bytes at `offset` into out[:length]; returns the bytes read (short only
        at end of file). With O_DIRECT, `offset` and `out` must be ALIGN-aligned."""
        plain, direct_fd = self._open(path)
        done = 0
        if direct_fd is not None:
            bulk = length - length % ALIGN
            while done < bulk:
                n = os.preadv(direct_fd, [out[done:bulk]], offset + done)
                if n == 0:
                    return done
                done += n
        while done < length:  # the unaligned tail (or everything, when buffered)
            n = os.preadv(plain, [out[done:length]], offset + done)
            if n == 0:
                break
            done += n
        return done

    def close(self) -> None:
        plain, direct_fd = self._fds
        for fd in (plain, direct_fd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self._path, self._fds = None, (-1, None)
