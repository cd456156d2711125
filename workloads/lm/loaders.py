"""LM loaders: sample i is window i of the shards (shard i // SHARD_WINDOWS). Both paths yield
identical int64 (inputs, targets) = (window[:, :-1], window[:, 1:])."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from workloads.errors import DataError
from workloads import dali_pipeline
from workloads.batch_stream import batch_stream
from workloads.lm.markov import SHARD_WINDOWS
from workloads.lm.spec import LMSize
from workloads.manifest import split_files


def shard_files(root: Path, split: str) -> list[Path]:
    return split_files(root, split, "shard-", ".npy")


def _open_shard(path: Path, window: int) -> np.ndarray:
    try:
        arr = np.load(path, mmap_mode="r")
    except FileNotFoundError:
        raise DataError(f"cannot open data file {path}: missing") from None
    except (ValueError, OSError) as e:
        raise DataError(f"corrupt token shard {path}: {e}") from None
    if arr.dtype != np.uint16 or arr.ndim != 1 or arr.size % window:
        raise DataError(f"wrong array in {path}: expected uint16 tokens in windows of {window}, "
                        f"found {arr.dtype} {arr.shape}")
    return arr


class _WindowReader(torch.utils.data.Dataset):
    def __init__(self, files: list[Path], size: LMSize):
        self.files, self.window = files, size.seq_len + 1
        self.shards: dict[int, np.ndarray] = {}  # memory-mapped once, lazily

    def __len__(self) -> int:
        return len(self.files) * SHARD_WINDOWS

    def _shard(self, s: int) -> np.ndarray:
        if s not in self.shards:
            self.shards[s] = _open_shard(self.files[s], self.window)
        return self.shards[s]

    def __getitem__(self, idx: Sequence[int]):
        buf = torch.empty((len(idx), self.window), dtype=torch.int64)
        out = buf.numpy()
        for j, i in enumerate(idx):
            shard = self._shard(i // SHARD_WINDOWS)
            w = i % SHARD_WINDOWS
            if (w + 1) * self.window > shard.size:
                raise DataError(f"truncated data file {self.files[i // SHARD_WINDOWS]}: no window {w}")
            out[j] = shard[w * self.window:(w + 1) * self.window]
        return buf[:, :-1], buf[:, 1:]


def n_windows(root: Path, split: str, size: LMSize) -> int:
    files = shard_files(root, split)
    last = _open_shard(files[-1], size.seq_len + 1)
    return (len(files) - 1) * SHARD_WINDOWS + last.size // (size.seq_len + 1)


def torch_loader(root: Path, split: str, size: LMSize, batches: Iterable[Sequence[int]]):
    return batch_stream(_WindowReader(shard_files(root, split), size), batches)


def dali_loader(root: Path, split: str, size: LMSize, batches: Sequence[Sequence[int]], device_id: int | None):
    """fn.readers.numpy reads each window straight from its shard via a region of interest
    (roi_start from an external source, in lockstep with the file sequence)."""
    from nvidia.dali import fn, types

    files = shard_files(root, split)
    window = size.seq_len + 1
    seq = [i for b in batches for i in b]
    if not seq:
        return iter(())
    paths = [str(files[i // SHARD_WINDOWS]) for i in seq]
    starts = np.array([(i % SHARD_WINDOWS) * window for i in seq], np.int32)

    def define():
        roi = fn.external_source(source=lambda info: starts[info.idx_in_epoch % len(starts)][None],
                                 batch=False, dtype=types.INT32)
        x = fn.readers.numpy(files=paths, roi_start=roi, roi_shape=[window], random_shuffle=False,
                             pad_last_batch=True, name="data")
        if device_id is not None:
            x = x.gpu()
        return fn.cast(x, dtype=types.INT64)

    windows = dali_pipeline.iterate(define, batches, device_id, ["w"], f"{split} shards under {root}")
    return ((w[:, :-1], w[:, 1:]) for (w,) in windows)
