"""DeepCAM's HDF5 loader reads contiguous datasets with positioned reads (workloads/h5_direct.py):
the bytes equal h5py's own read, and every file laid out otherwise (compressed, chunked, with
other metadata, truncated, missing) is read by h5py or named in one line."""
from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from harness import registry
from harness.errors import DataError
from tests.conftest import tiny_dataset
from workloads import h5_direct
from workloads.deepcam.loaders import _H5Batches, stats

WL = registry.get("deepcam")
SIZE = WL.sizes["tiny"]
NAMES = ("climate/data", "climate/labels_0")
SHAPES = (SIZE.input_shape, (SIZE.height, SIZE.width))


@pytest.fixture(scope="module")
def root(data_root) -> Path:
    return tiny_dataset(data_root, "deepcam")


def _h5py_read(path: Path) -> tuple[np.ndarray, np.ndarray]:
    with h5py.File(path, "r") as f:
        return f[NAMES[0]][...], f[NAMES[1]][...]


def _expected_batch(root: Path, files: list[Path]) -> tuple[torch.Tensor, torch.Tensor]:
    """h5py's arrays, normalised as the reference's loader does: (x - min) / (max - min)."""
    lo, inv = stats(root)
    xs, ys = zip(*(_h5py_read(p) for p in files))
    x = (np.stack(xs) - lo) * inv
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(np.stack(ys)).long()


def test_positioned_read_equals_h5py(root):
    files = sorted((root / "train").glob("data-*.h5"))[:4]
    layout = h5_direct.learn(files[0], NAMES, SHAPES, (np.float32, np.int32))
    assert layout is not None and [k for _, _, k in layout.pieces].count(-1) >= 1
    for p in files:  # learned from the first file, used on the others
        x, y = np.empty(SHAPES[0], np.float32), np.empty(SHAPES[1], np.int32)
        assert h5_direct.read_into(str(p), layout, (x, y))
        hx, hy = _h5py_read(p)
        assert np.array_equal(x, hx) and np.array_equal(y, hy)


@pytest.mark.parametrize("threads", [1, 2])
def test_loader_batches_equal_h5py_normalised(root, threads):
    ds = _H5Batches(root, "train", SIZE, threads)
    idx = [5, 0, 17, 3, 9]
    x, y = ds[idx]
    assert ds.layout is not None  # the fast path was taken
    ex, ey = _expected_batch(root, [Path(ds.files[i]) for i in idx])
    assert torch.equal(x, ex) and torch.equal(y, ey)


def _rewrite(path: Path, **kw) -> None:
    """The same arrays written with other HDF5 settings (compression, chunks, an attribute)."""
    x, y = _h5py_read(path)
    attr = kw.pop("attr", None)
    with h5py.File(path, "w") as f:
        f.create_dataset(NAMES[0], data=x, **kw)
        f.create_dataset(NAMES[1], data=y)
        if attr:
            f.attrs["note"] = attr


@pytest.mark.parametrize("how", [
    {"compression": "gzip"}, {"chunks": (16, 16, 16)}, {"attr": "x" * 64}])
def test_files_laid_out_otherwise_are_read_by_h5py(root, tmp_path, how):
    copy = tmp_path / "ds"
    shutil.copytree(root, copy)
    files = sorted((copy / "train").glob("data-*.h5"))
    _rewrite(files[2], **how)
    layout = h5_direct.learn(files[0], NAMES, SHAPES, (np.float32, np.int32))
    x, y = np.empty(SHAPES[0], np.float32), np.empty(SHAPES[1], np.int32)
    assert not h5_direct.read_into(str(files[2]), layout, (x, y))  # refused, not misread
    if "attr" not in how:  # learned from such a file, there is no layout to use
        assert h5_direct.learn(files[2], NAMES, SHAPES, (np.float32, np.int32)) is None
    ds = _H5Batches(copy, "train", SIZE, 2)
    got = ds[[0, 2, 4]]
    want = _expected_batch(copy, [files[0], files[2], files[4]])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    first = _H5Batches(copy, "train", SIZE, 1)  # the layout learned from the odd file itself
    got = first[[2, 0]]
    want = _expected_batch(copy, [files[2], files[0]])
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("damage, fragment", [
    (lambda p: p.write_bytes(p.read_bytes()[:50_000]), "unreadable HDF5 file"),
    (lambda p: p.unlink(), "cannot open data file"),
    (lambda p: p.write_bytes(b"\0" * p.stat().st_size), "unreadable HDF5 file"),
])
def test_bad_files_are_named(root, tmp_path, damage, fragment):
    copy = tmp_path / "ds"
    shutil.copytree(root, copy)
    ds = _H5Batches(copy, "train", SIZE, 2)
    ds[[0]]  # layout learned from a good file
    victim = Path(ds.files[6])
    damage(victim)
    with pytest.raises(DataError, match=fragment) as e:
        ds[[1, 6, 7]]
    assert victim.name in str(e.value) and "\n" not in str(e.value)
