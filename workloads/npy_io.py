"""Strict `.npy` reading straight into a caller's buffer (no temporary array, no extra copy).

Used by the PyTorch loaders: the header is checked against the expected shape and dtype, and
a short read is reported as truncation, each naming the file (harness/errors.DataError).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.errors import DataError


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


def read_npy_into(path: Path, out: np.ndarray) -> None:
    """Fill `out` (C-contiguous) with the array stored in `path`; shape and dtype must match."""
    try:
        f = open(path, "rb", buffering=0)
    except OSError as e:
        raise DataError(f"cannot open data file {path}: {e.strerror}") from None
    with f:
        shape, dtype = read_header(f, path)
        if tuple(shape) != out.shape or dtype != out.dtype:
            raise DataError(f"wrong array in {path}: expected {out.dtype} {out.shape}, found {dtype} {tuple(shape)}")
        got = f.readinto(memoryview(out).cast("B"))
        if got != out.nbytes:
            raise DataError(f"truncated data file {path}: {got} of {out.nbytes} payload bytes")
