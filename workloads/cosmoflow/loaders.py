"""CosmoFlow loaders. Both read the generator's files in the order the harness gives (index
batches) and yield bitwise-identical raw int16 N,D,H,W,C batches plus float32 targets; log1p
runs on the device after the copy (CosmoFlow.preprocess), as NVIDIA's implementation does."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from workloads import dali_pipeline, parallel_fill
from workloads.batch_stream import batch_stream
from workloads.cosmoflow.spec import CosmoFlowSize
from workloads.manifest import split_files
from workloads.npy_io import read_npy_into


def data_files(root: Path, split: str) -> list[Path]:
    return split_files(root, split, "data-", ".npy")


def label_file(p: Path) -> Path:
    """The targets file beside a sample file."""
    return p.with_name("label-" + p.name[len("data-"):])


class _BatchReader(torch.utils.data.Dataset):
    """Indexed by a whole batch of sample indices: reads every file straight into one
    preallocated (pinned, when a GPU will take it) int16 batch buffer: no temporaries, no collate.
    The rank's threads read the batch's slots in parallel (workloads/parallel_fill.py)."""

    def __init__(self, files: list[Path], size: CosmoFlowSize, threads: int):
        # plain strings, computed once: pathlib per file costs as much as reading 100 KiB here
        self.files = [str(p) for p in files]
        self.labels = [str(label_file(p)) for p in files]
        self.size = size
        self.pin = torch.cuda.is_available()
        self.threads = threads

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, idx: Sequence[int]):
        x, y = self._buffers(len(idx))
        xn, yn = x.numpy(), y.numpy()

        def read_slot(j: int) -> None:
            read_npy_into(self.files[idx[j]], xn[j])
            read_npy_into(self.labels[idx[j]], yn[j])

        parallel_fill.fill(len(idx), read_slot, self.threads)
        return x, y

    def _buffers(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x_shape, y_shape = (n, *self.size.input_shape), (n, self.size.n_targets)
        if self.pin:  # torch's own pinned blocks, so that async copies are tracked by its host allocator
            return (torch.empty(x_shape, dtype=torch.int16, pin_memory=True),
                    torch.empty(y_shape, dtype=torch.float32, pin_memory=True))
        # numpy's allocator hands a freed 2 MiB block back without new page faults; a fresh
        # torch.empty made allocating and filling a CosmoFlow tiny batch 231 vs 180 us here
        return torch.from_numpy(np.empty(x_shape, np.int16)), torch.from_numpy(np.empty(y_shape, np.float32))


def torch_loader(root: Path, split: str, size: CosmoFlowSize, batches: Iterable[Sequence[int]],
                 threads: int | None = None):
    """threads: readers per batch; None = the rank's threads."""
    return batch_stream(_BatchReader(data_files(root, split), size, threads or parallel_fill.rank_threads()),
                        batches)


def dali_loader(root: Path, split: str, size: CosmoFlowSize, batches: Sequence[Sequence[int]],
                device_id: int | None):
    """fn.readers.numpy over the exact file sequence of `batches`; CPU-only pipeline when
    device_id is None."""
    files = data_files(root, split)
    seq = [files[i] for b in batches for i in b]
    if not seq:
        return iter(())

    xs, ys = [str(p) for p in seq], [str(label_file(p)) for p in seq]

    def define():
        x = dali_pipeline.read_files(xs, name="data")
        y = dali_pipeline.read_files(ys)
        if device_id is not None:  # GPU: hand over device tensors; preprocess runs there
            x, y = x.gpu(), y.gpu()
        return x, y

    return dali_pipeline.iterate(define, batches, device_id, ["x", "y"], f"{split} data under {root}", (xs, ys))
