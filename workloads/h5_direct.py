"""Positioned reads of contiguous, uncompressed HDF5 datasets straight into a caller's buffers.

Why: opening a file with h5py, looking its datasets up and closing it again cost more than
reading the bytes (DeepCAM tiny, ~0.9 MB per sample: ~40% of the loader's time, with h5py's
global lock serialising every thread). For a contiguous dataset with no filters, HDF5 stores
the array's bytes in one piece at a fixed file offset (h5py: `dsid.get_offset()`), so the bytes
can be read with a plain scatter read.

Safety: the layout is learned with h5py from one file (a `Layout`: the datasets' offsets and
the file's every other byte, its metadata). Every file written by the same code with the same
shapes is then byte-identical outside the arrays (checked: no timestamps in h5py's default object
headers), so each later file is read whole with one `os.preadv` - its arrays into the caller's
buffers, the rest into a scratch buffer - and accepted only when its size and its metadata
bytes equal the template's. Anything else (another layout, chunked or compressed data, a
truncated or corrupt file) returns False, and the caller reads that file with h5py, which also
names what is wrong. This is the .npy header check of workloads/npy_io.py, for HDF5.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Layout:
    file_size: int
    # file order: (offset, nbytes, index of the dataset in `names` or -1 for metadata bytes)
    pieces: tuple[tuple[int, int, int], ...]
    meta: bytes                   # the template file's metadata bytes, in file order


def learn(path: str | Path, names: Sequence[str], shapes: Sequence[tuple[int, ...]],
          dtypes: Sequence[np.dtype]) -> Layout | None:
    """The layout of `path` when every named dataset is contiguous, unfiltered, allocated and of
    the expected shape and (native) dtype; None otherwise (read such files with h5py)."""
    import h5py
    spans = []
    with h5py.File(path, "r") as f:
        for k, (name, shape, dtype) in enumerate(zip(names, shapes, dtypes)):
            ds = f.get(name)
            if not isinstance(ds, h5py.Dataset) or ds.shape != tuple(shape) or ds.dtype != np.dtype(dtype):
                return None
            if ds.chunks is not None or ds.id.get_create_plist().get_nfilters() or ds.external:
                return None
            offset, nbytes = ds.id.get_offset(), ds.id.get_storage_size()
            if offset is None or nbytes != int(np.prod(shape)) * np.dtype(dtype).itemsize:
                return None  # not yet allocated (all fill value) or not stored as one piece
            spans.append((offset, nbytes, k))
    size = os.path.getsize(path)
    pieces, pos = [], 0
    for offset, nbytes, k in sorted(spans):
        if offset < pos or offset + nbytes > size:
            return None  # overlapping or past the end: not a layout we can trust
        if offset > pos:
            pieces.append((pos, offset - pos, -1))
        pieces.append((offset, nbytes, k))
        pos = offset + nbytes
    if pos < size:
        pieces.append((pos, size - pos, -1))
    with open(path, "rb") as f:
        raw = f.read()
    meta = b"".join(raw[o:o + n] for o, n, k in pieces if k < 0)
    return Layout(size, tuple(pieces), meta)


def read_into(path: str, layout: Layout, outs: Sequence[np.ndarray]) -> bool:
    """Fill outs[k] (C-contiguous, the learned shape and dtype) with dataset k of `path` by one
    positioned scatter read of the whole file. False when the file is not laid out as the
    template (outs then hold garbage: read the file with h5py). OSError (missing file...) escapes.
    Releases the GIL while reading, so the rank's threads read several files at once."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if os.fstat(fd).st_size != layout.file_size:
            return False
        meta = bytearray(len(layout.meta))
        mv, pos, bufs = memoryview(meta), 0, []
        for _, nbytes, k in layout.pieces:
            if k < 0:
                bufs.append(mv[pos:pos + nbytes])
                pos += nbytes
            else:
                bufs.append(memoryview(outs[k]).cast("B"))
        got = os.preadv(fd, bufs, 0)
    finally:
        os.close(fd)
    return got == layout.file_size and meta == layout.meta
