"""DeepCAM's HDF5 loader reads contiguous datasets with positioned reads (workloads/h5_direct.py):
the bytes equal h5py's own read, and every file laid out otherwise (compressed, chunked, with
other metadata, truncated, missing) is read by h5py or named in one line. The reference's
min-max normalisation runs on the device (DeepCAM.preprocess), equal to the reference's numpy."""
from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from harness.config import registry
from harness.config.errors import DataError
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
    """h5py's arrays as stored (labels as the loss takes them)."""
    xs, ys = zip(*(_h5py_read(p) for p in files))
    return torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys)).long()


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
def test_loader_batches_equal_h5py_reads(root, threads):
    ds = _H5Batches(root, "train", SIZE, threads)
    idx = [5, 0, 17, 3, 9]
    x, y = ds[idx]
    assert ds.layout is not None  # the fast path was taken
    ex, ey = _expected_batch(root, [Path(ds.files[i]) for i in idx])
    assert torch.equal(x, ex) and torch.equal(y, ey)


@pytest.mark.parametrize("channels_last", [False, True])
def test_preprocess_normalises_as_the_reference_does(root, channels_last):
    """The reference's dataset: (x - minval) * (1 / (maxval - minval)) per channel with
    stats.h5, in float32 numpy; ours on the device after the copy, equal to the bit, and a
    channels_last batch stays channels_last (no layout copy added)."""
    from harness.config.run_config import RunConfig
    from harness.run.build import build
    ds = _H5Batches(root, "train", SIZE, 2)
    idx = [3, 11, 7]
    x, y = ds[idx]
    lo, inv = stats(root)
    raw = np.stack([_h5py_read(Path(ds.files[i]))[0] for i in idx])
    want = torch.from_numpy((raw - lo) * inv).permute(0, 3, 1, 2)  # as the model sees it: N,C,H,W
    assert not torch.equal(x.permute(0, 3, 1, 2), want)  # the loader leaves the samples as stored
    cfg = RunConfig(workload="deepcam").with_overrides([f"toggles.channels_last={str(channels_last).lower()}"])
    ts = build(cfg, WL, WL.build_model(SIZE), lambda m: WL.build_optimizer(m, SIZE, 2, 10), data_root=root)
    xp, _ = ts.prepare(x, y)
    assert torch.equal(xp, want)
    assert xp.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)
    assert torch.equal(WL.preprocess(WL.to_model_input(x), root), want)


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
