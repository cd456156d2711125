"""DeepCAM loaders. The PyTorch path reads the HDF5 files (as the reference); the DALI path reads
NVIDIA's numpy conversion of the same samples with fn.readers.numpy. Both yield the samples as
stored, float32 N,H,W,C, plus int64 labels; the per-channel min-max with stats.h5 runs on the
device after the copy (DeepCAM.preprocess)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from workloads.errors import DataError
from workloads import dali_pipeline, h5_direct, parallel_fill
from workloads.batch_stream import batch_stream
from workloads.deepcam.spec import DeepCAMSize
from workloads.manifest import split_files


def h5_files(root: Path, split: str) -> list[Path]:
    return split_files(root, split, "data-", ".h5")


def npy_files(root: Path, split: str) -> tuple[list[Path], list[Path]]:
    """NVIDIA's numpy conversion read by the DALI path: (data, label) files of each sample,
    indexed like h5_files."""
    npy = root / "npy" / split
    names = [p.name[len("data-"):-len(".h5")] for p in h5_files(root, split)]
    return [npy / f"data-{n}.npy" for n in names], [npy / f"label-{n}.npy" for n in names]


def stats(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """(minval, 1 / (maxval - minval)) per channel, float32."""
    import h5py
    try:
        with h5py.File(root / "stats.h5", "r") as f:
            lo, hi = f["climate/minval"][...], f["climate/maxval"][...]
    except (OSError, KeyError) as e:
        raise DataError(f"unreadable stats file {root / 'stats.h5'}: {e}") from None
    return lo.astype(np.float32), (1.0 / (hi - lo)).astype(np.float32)


class _H5Batches(torch.utils.data.Dataset):
    """Indexed by a whole batch of sample indices: fills one preallocated batch buffer with the
    rank's threads (workloads/parallel_fill.py), each slot read by one positioned read of its
    file (workloads/h5_direct.py; h5py for any file laid out otherwise). No arithmetic on the
    samples here: min-max normalisation in the reader threads held this path to 0.62 of raw
    read (DeepCAM tiny, 2 threads); it runs on the device (DeepCAM.preprocess)."""

    NAMES = ("climate/data", "climate/labels_0")

    def __init__(self, root: Path, split: str, size: DeepCAMSize, threads: int):
        self.files = [str(p) for p in h5_files(root, split)]  # strings once: pathlib per file costs
        self.size = size
        self.threads = threads
        self.layout: h5_direct.Layout | None = None
        self.learned = False

    def __len__(self) -> int:
        return len(self.files)

    def _learn(self, path: str) -> None:
        """The positioned-read layout, from the first file read; none if that file is not
        contiguous and uncompressed (or can't be read: h5py then names the problem)."""
        s = self.size
        try:
            self.layout = h5_direct.learn(path, self.NAMES, (s.input_shape, (s.height, s.width)),
                                          (np.float32, np.int32))
        except (OSError, KeyError):
            self.layout = None
        self.learned = True

    def _read_h5py(self, path: str, x: np.ndarray, y: np.ndarray) -> None:
        import h5py
        s = self.size
        try:
            with h5py.File(path, "r") as f:
                d, lab = f[self.NAMES[0]], f[self.NAMES[1]]
                if d.shape != s.input_shape or lab.shape != (s.height, s.width):
                    raise DataError(f"wrong array in {path}: expected data {s.input_shape} and labels "
                                    f"{(s.height, s.width)}, found {d.shape} and {lab.shape}")
                d.read_direct(x)       # straight into the batch buffer
                lab.read_direct(y)
        except FileNotFoundError:
            raise DataError(f"cannot open data file {path}: missing") from None
        except (OSError, KeyError) as e:
            raise DataError(f"unreadable HDF5 file {path}: {str(e).splitlines()[0]}") from None

    def __getitem__(self, idx: Sequence[int]):
        s = self.size
        x = np.empty((len(idx), *s.input_shape), np.float32)
        y = np.empty((len(idx), s.height, s.width), np.int32)       # labels as stored
        labels = np.empty((len(idx), s.height, s.width), np.int64)  # as the loss takes them
        if not self.learned and len(idx):
            self._learn(self.files[idx[0]])
        layout = self.layout

        def read_slot(j: int) -> None:
            path = self.files[idx[j]]
            try:
                fast = layout is not None and h5_direct.read_into(path, layout, (x[j], y[j]))
            except FileNotFoundError:
                raise DataError(f"cannot open data file {path}: missing") from None
            except OSError:
                fast = False  # h5py reads it again and names the problem
            if not fast:
                self._read_h5py(path, x[j], y[j])
            labels[j] = y[j]  # int32 -> int64 by numpy in this thread (see below)

        parallel_fill.fill(len(idx), read_slot, self.threads)
        # No torch op in here: each starts torch's intra-op threads, which then spin on the
        # cores the next batch's readers need (torch's int32 -> int64 copy of the labels after
        # the fill took the loader from 181 to 309 us per sample, DeepCAM tiny)
        return torch.from_numpy(x), torch.from_numpy(labels)


def torch_loader(root: Path, split: str, size: DeepCAMSize, batches: Iterable[Sequence[int]],
                 threads: int | None = None):
    """threads: readers per batch; None = the rank's threads."""
    return batch_stream(_H5Batches(root, split, size, threads or parallel_fill.rank_threads()), batches)


def dali_loader(root: Path, split: str, size: DeepCAMSize, batches: Sequence[Sequence[int]],
                device_id: int | None):
    """NVIDIA's dali-numpy pipeline: data and label readers over the same file sequence,
    .gpu() when there is a GPU, labels cast to int64; the samples as stored, as torch_loader's
    (normalised by DeepCAM.preprocess on the device, for both paths alike)."""
    from nvidia.dali import fn, types

    seq = [i for b in batches for i in b]
    if not seq:
        return iter(())
    npy_data, npy_labels = npy_files(root, split)
    xs, ys = [str(npy_data[i]) for i in seq], [str(npy_labels[i]) for i in seq]

    def define():
        x = dali_pipeline.read_files(xs, name="data")
        y = dali_pipeline.read_files(ys)
        if device_id is not None:
            x, y = x.gpu(), y.gpu()
        return x, fn.cast(y, dtype=types.INT64)

    return dali_pipeline.iterate(define, batches, device_id, ["x", "y"],
                                 f"{split} data under {root / 'npy' / split}", (xs, ys))
