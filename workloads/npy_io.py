"""Strict `.npy` reading straight into a caller's buffer (no temporary array, no extra copy).

Fast path: every sample file of a split has the same header, so we compare the file's first
bytes with the header np.save writes for the expected shape/dtype, and read header and payload
with one scatter read (os.readv) directly into the batch slot. Only when the header differs do
we parse it (numpy's parser), which also yields a precise error: the file is named, and
wrong shape/dtype, corruption and truncation are told apart (workloads/errors.DataError).
"""
from __future__ import annotations

import functools
import io
import os
from pathlib import Path

import numpy as np

from workloads.errors import DataError


@functools.lru_cache(maxsize=64)
def expected_header(shape: tuple[int, ...], dtype_str: str) -> bytes:
    """The exact header bytes np.save writes (format 1.0) for a C-ordered array."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype_str)),
                                               "fortran_order": False, "shape": shape})
    return buf.getvalue()


def read_header(f, path: Path) -> tuple[tuple[int, ...], np.dtype]:
    try:
        major, _ = np.lib.format.read_magic(f)
        reader = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = reader(f)
    except (ValueError, OSError, EOFError) as e:
        raise DataError(f"corrupt .npy file {path}: {e}") from None
    if fortran:
        raise DataError(f"unexpected Fortran-ordered array in {path}")
    return shape, dtype


def read_npy_into(path: str | Path, out: np.ndarray) -> None:
    """Fill `out` (C-contiguous) with the array stored in `path`; shape and dtype must match."""
    hdr = expected_header(out.shape, out.dtype.str)
    payload = memoryview(out).cast("B")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise DataError(f"cannot open data file {path}: {e.strerror}") from None
    try:
        head = bytearray(len(hdr))
        got = os.readv(fd, [head, payload])
        if head == hdr:
            if got != len(hdr) + out.nbytes:
                raise DataError(f"truncated data file {path}: {max(got - len(hdr), 0)} of {out.nbytes} payload bytes")
            return
    finally:
        os.close(fd)
    _read_parsed(path, out)  # another header layout, or something wrong: parse to find out


def _read_parsed(path: str | Path, out: np.ndarray) -> None:
    with open(path, "rb", buffering=0) as f:
        shape, dtype = read_header(f, path)
        if tuple(shape) != out.shape or dtype != out.dtype:
            raise DataError(f"wrong array in {path}: expected {out.dtype} {out.shape}, found {dtype} {tuple(shape)}")
        got = f.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise DataError(f"truncated data file {path}: {got} of {out.nbytes} payload bytes")
