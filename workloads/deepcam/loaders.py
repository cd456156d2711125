"""DeepCAM loaders. The PyTorch path reads the HDF5 files (as the reference); the DALI path reads
NVIDIA's numpy conversion of the same samples with fn.readers.numpy. Both normalise each
channel to (x - min) / (max - min) with stats.h5 and yield float32 N,H,W,C plus int64 labels."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from workloads.errors import DataError
from workloads import dali_pipeline
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
    def __init__(self, root: Path, split: str, size: DeepCAMSize):
        self.files = h5_files(root, split)
        self.size = size
        self.lo, self.inv = stats(root)

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, idx: Sequence[int]):
        import h5py
        s = self.size
        x = np.empty((len(idx), *s.input_shape), np.float32)
        y = np.empty((len(idx), s.height, s.width), np.int32)
        for j, i in enumerate(idx):
            path = self.files[i]
            try:
                with h5py.File(path, "r") as f:
                    d, lab = f["climate/data"], f["climate/labels_0"]
                    if d.shape != s.input_shape or lab.shape != (s.height, s.width):
                        raise DataError(f"wrong array in {path}: expected data {s.input_shape} and labels "
                                        f"{(s.height, s.width)}, found {d.shape} and {lab.shape}")
                    d.read_direct(x[j])       # straight into the batch buffer
                    lab.read_direct(y[j])
            except FileNotFoundError:
                raise DataError(f"cannot open data file {path}: missing") from None
            except (OSError, KeyError) as e:
                raise DataError(f"unreadable HDF5 file {path}: {str(e).splitlines()[0]}") from None
        x -= self.lo       # per-channel min-max normalisation, in place
        x *= self.inv
        return torch.from_numpy(x), torch.from_numpy(y).long()


def torch_loader(root: Path, split: str, size: DeepCAMSize, batches: Iterable[Sequence[int]]):
    return batch_stream(_H5Batches(root, split, size), batches)


def dali_loader(root: Path, split: str, size: DeepCAMSize, batches: Sequence[Sequence[int]],
                device_id: int | None):
    """NVIDIA's dali-numpy pipeline: data and label readers over the same file sequence,
    .gpu() when there is a GPU, fn.normalize(mean=min, stddev=max-min), labels cast to int64."""
    from nvidia.dali import fn, types

    seq = [i for b in batches for i in b]
    if not seq:
        return iter(())
    npy_data, npy_labels = npy_files(root, split)
    lo, inv = stats(root)

    xs, ys = [str(npy_data[i]) for i in seq], [str(npy_labels[i]) for i in seq]

    def define():
        x = dali_pipeline.read_files(xs, name="data")
        y = dali_pipeline.read_files(ys)
        if device_id is not None:
            x, y = x.gpu(), y.gpu()
        x = fn.normalize(x, mean=lo.reshape(1, 1, -1), stddev=(1.0 / inv).reshape(1, 1, -1), axes=[0, 1])
        return x, fn.cast(y, dtype=types.INT64)

    return dali_pipeline.iterate(define, batches, device_id, ["x", "y"],
                                 f"{split} data under {root / 'npy' / split}", (xs, ys))
