"""Sample order, the two loader paths, and bad data files named in one line."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.run import data
from harness.config import registry
from harness.config.errors import DataError
from tests.conftest import harness, run_dirs, tiny_dataset


@pytest.fixture(scope="module")
def tiny_root(data_root) -> Path:
    return tiny_dataset(data_root, "cosmoflow")


def test_epoch_batches_shard_disjointly_and_cover():
    shards = [data.epoch_batches(100, 8, seed=3, epoch=0, rank=r, world=4) for r in range(4)]
    flat = [i for s in shards for b in s for i in b]
    assert len(flat) == len(set(flat)) == 3 * 32  # 3 full global batches of 4 x 8
    assert all(len(b) == 8 for s in shards for b in s)
    assert data.epoch_batches(100, 8, 3, 0) == data.epoch_batches(100, 8, 3, 0)
    assert data.epoch_batches(100, 8, 3, 0) != data.epoch_batches(100, 8, 3, 1)
    val = data.epoch_batches(10, 4, 0, 0, shuffle=False, drop_last=False)
    assert val == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    val2 = [data.epoch_batches(11, 4, 0, 0, rank=r, world=2, shuffle=False, drop_last=False) for r in range(2)]
    assert sorted(i for s in val2 for b in s for i in b) == list(range(11))  # each sample once, no padding


def test_ranks_split_the_same_global_batches():
    """Step k trains on the same samples at 1, 2 or 4 ranks with the same global batch, so DDP
    reproduces the one-rank loss curve."""
    one = data.epoch_batches(100, 16, seed=7, epoch=2)
    for world in (2, 4):
        parts = [data.epoch_batches(100, 16 // world, seed=7, epoch=2, rank=r, world=world) for r in range(world)]
        assert [sum((p[k] for p in parts), []) for k in range(len(one))] == one


def test_train_plan_spans_epochs():
    plan, per_epoch = data.train_plan(20, 8, seed=1, total_steps=5)
    assert per_epoch == 2 and len(plan) == 5
    assert plan[:2] == data.epoch_batches(20, 8, 1, 0) and plan[2:4] == data.epoch_batches(20, 8, 1, 1)


def test_torch_and_dali_loaders_yield_identical_samples(tiny_root):
    wl = registry.get("cosmoflow")
    size = wl.sizes["tiny"]
    batches = data.epoch_batches(len(wl.files(tiny_root, "val")), 8, 0, 0, shuffle=True, drop_last=False)[:5]
    batches.append([3, 1])  # a partial last batch
    got_t = list(wl.torch_loader(tiny_root, "val", size, batches))
    got_d = list(wl.dali_loader(tiny_root, "val", size, batches, device_id=None))
    assert len(got_t) == len(got_d) == len(batches)
    for (xt, yt), (xd, yd), idx in zip(got_t, got_d, batches):
        assert xt.shape == (len(idx), 32, 32, 32, 4) and xt.dtype == torch.int16
        assert torch.equal(xd, xt) and torch.equal(yd, yt)  # bitwise: same bytes either way
        raw = np.load(tiny_root / "val" / f"data-{idx[0]:06d}.npy")
        assert torch.equal(xt[0], torch.from_numpy(raw))


@pytest.mark.parametrize("threads", [2, 3])
def test_batches_read_by_several_threads_equal_one_thread(tiny_root, threads):
    from workloads.cosmoflow.loaders import torch_loader
    size = registry.get("cosmoflow").sizes["tiny"]
    batches = [[7, 2, 9, 0, 5, 1, 3, 8], [4, 6, 10], [11]]
    one = list(torch_loader(tiny_root, "val", size, batches, threads=1))
    many = list(torch_loader(tiny_root, "val", size, batches, threads=threads))
    for (x1, y1), (xn, yn) in zip(one, many, strict=True):
        assert torch.equal(x1, xn) and torch.equal(y1, yn)


def test_parallel_fill_attempts_every_slot_and_raises_the_lowest_failure():
    """Slots 2 and 4 fail, 4 first (slot 2 is slow): the error is slot 2's whichever thread
    took it, raised only after every slot (the slow one included) has been read."""
    import time

    from workloads import parallel_fill
    done = []

    def read_slot(j: int) -> None:
        if j == 2:
            time.sleep(0.2)
        done.append(j)
        if j in (2, 4):
            raise DataError(f"bad file in slot {j}")

    for threads in (1, 2, 3):
        done.clear()
        with pytest.raises(DataError, match="slot 2$"):
            parallel_fill.fill(6, read_slot, threads)
        assert sorted(done) == list(range(6))


def _copy_dataset(src: Path, dst: Path) -> Path:
    import shutil
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("damage, fragment", [
    (lambda p: p.write_bytes(p.read_bytes()[:1000]), "truncated data file"),
    (lambda p: np.save(p, np.zeros((32, 32, 32, 4), np.float32)), "wrong array in"),
    (lambda p: p.write_bytes(b"not a numpy file at all" * 10), "corrupt .npy file"),
    (lambda p: p.unlink(), "cannot open data file"),
])
def test_bad_files_are_named(tiny_root, tmp_path, damage, fragment):
    root = _copy_dataset(tiny_root, tmp_path / "ds")
    victim = root / "train" / "data-000005.npy"
    wl = registry.get("cosmoflow")
    files = wl.files(root, "train")  # listed before the damage, as a run lists them at init
    damage(victim)
    loader = wl.torch_loader(root, "train", wl.sizes["tiny"], [[4, 5, 6]])
    with pytest.raises(DataError) as e:
        list(loader)
    assert fragment in str(e.value) and "data-000005.npy" in str(e.value)
    assert victim in files  # the loader was handed a listed file that went bad after listing


@pytest.mark.parametrize("damage, fragment", [
    (lambda p: p.write_bytes(p.read_bytes()[:1000]), "Failed to read file"),
    (lambda p: p.write_bytes(b"not a numpy file at all" * 10), "not a numpy file"),
    (lambda p: p.unlink(), "Could not open file"),
    (lambda p: np.save(p, np.zeros((32, 32, 31, 4), np.int16)),
     "expected int16 (32, 32, 32, 4) (as the other files), found int16 (32, 32, 31, 4)"),
])
def test_bad_files_are_named_on_the_dali_path(tiny_root, tmp_path, damage, fragment):
    """DALI opens files as its readers reach them: a bad file in a later batch is a one-line
    DataError naming it, not DALI's multi-line RuntimeError."""
    root = _copy_dataset(tiny_root, tmp_path / "ds")
    wl = registry.get("cosmoflow")
    damage(root / "train" / "data-000013.npy")
    with pytest.raises(DataError) as e:
        list(wl.dali_loader(root, "train", wl.sizes["tiny"], [[0, 1, 2], [4, 5, 6], [12, 13, 14]], None))
    msg = str(e.value)
    assert fragment in msg and "data-000013.npy" in msg and "\n" not in msg


@pytest.mark.parametrize("dali", [False, True])
def test_run_with_corrupt_file_fails_with_reason_and_exit_2(env, tiny_root, tmp_path, dali):
    root = _copy_dataset(tiny_root, tmp_path / "ds")
    for p in (root / "train").glob("data-*.npy"):
        p.write_bytes(p.read_bytes()[:200])
    p = harness(env, "run", "cosmoflow", "--no-ingest", "--set", f"data_dir={root}", "--set", "steps=2",
                "--set", f"toggles.dali={str(dali).lower()}")
    assert p.returncode == 2
    why = "Failed to read file" if dali else "truncated data file"
    last = p.stderr.strip().splitlines()[-1]
    assert why in last and str(root / "train") in last
    (d,) = run_dirs(env)
    st = json.loads((d / "status.json").read_text())
    assert st["status"] == "failed" and why in st["reason"]
