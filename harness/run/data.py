"""Datasets and loaders. The only module that reads `toggles.dali`.

One sample order serves both loader paths: the harness computes the index batches (a seeded
permutation per epoch, sharded by rank, as DistributedSampler does) and hands them to either
the workload's PyTorch loader or its DALI pipeline, so both yield identical samples.
On a GPU a background thread prefetches batches so that loading overlaps compute; on a CPU
loading runs inline (see prefetch_depth).
"""
from __future__ import annotations

import fcntl
import queue
import shutil
import threading
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from harness.config.run_config import RunConfig
from harness.config.errors import DataError
from results.record import paths
from workloads.manifest import MANIFEST

PREFETCH_DEPTH = 2  # batches queued ahead of the training step, when prefetching


def unsupported_reason(cfg: RunConfig) -> str | None:
    """Why the DALI path this configuration asks for can't run here, or None. A missing DALI is
    an `unsupported` record, never a silent fall-back to the PyTorch loader."""
    if not cfg.toggles.dali:
        return None
    try:
        import nvidia.dali  # noqa: F401
    except ImportError as e:
        return f"dali: nvidia-dali is not importable here ({e}); pip install nvidia-dali-cuda120"
    return None


def dataset_root(cfg: RunConfig, base: Path | None = None) -> Path:
    """cfg.data_dir, else <base>/<workload>/<size>-d<data_seed>-v<generator version> with
    base = HARNESS_DATA or ./data."""
    if cfg.data_dir:
        return Path(cfg.data_dir)
    from harness.config import registry
    base = Path(base or paths.data_root())
    return base / cfg.workload / f"{cfg.size}-d{cfg.data_seed}-v{registry.get(cfg.workload).data_version}"


def ensure_dataset(workload, size, root: Path, seed: int) -> None:
    """Generate the synthetic dataset once (under a lock; atomic rename), unless an explicit
    data_dir already holds one. Generation time is data preparation, not part of any run."""
    if (root / MANIFEST).exists():
        return
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # e.g. HARNESS_DATA names a file
        raise DataError(f"cannot make the dataset folder {root.parent}: {e.strerror} (the data root is "
                        f"HARNESS_DATA, else ./data)") from None
    with open(root.parent / f".{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (root / MANIFEST).exists():
            return
        if root.exists():
            raise DataError(f"{root} exists but has no {MANIFEST}: not a dataset written by this harness")
        tmp = root.with_name(root.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            workload.write_dataset(tmp, size, seed)
            tmp.rename(root)
        except BaseException:  # a failed or interrupted generation leaves no .partial folder behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise


def epoch_batches(n: int, batch: int, seed: int, epoch: int, rank: int = 0, world: int = 1,
                  shuffle: bool = True, drop_last: bool = True,
                  shares: Sequence[int] | None = None) -> list[list[int]]:
    """Index batches of one epoch for one rank, from a permutation seeded by (seed, epoch).

    Training (drop_last): the permutation is cut into global batches of batch x world and rank r
    takes slice r of each, so step k trains on the same global batch at any rank count (DDP
    with the same global batch reproduces the one-rank loss curve). `shares` (uneven data
    parallel, parallel.batch_split): rank r takes shares[r] samples of each global batch of
    sum(shares), the slices in rank order, so the union is still the one-rank batch. Evaluation (drop_last
    False): rank r takes every world-th sample, no padding, so each sample is counted once."""
    order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
    if not drop_last:
        shard = order[rank::world].tolist()
        return [shard[i:i + batch] for i in range(0, len(shard), batch)]
    if shares is None:
        shares = [batch] * world
    g, lo = sum(shares), sum(shares[:rank])
    return [order[i + lo:i + lo + shares[rank]].tolist() for i in range(0, n - g + 1, g)]


def train_plan(n: int, batch: int, seed: int, total_steps: int, rank: int = 0,
               world: int = 1, shares: Sequence[int] | None = None) -> tuple[list[list[int]], int]:
    """(batches for `total_steps` steps across epochs, steps per epoch)."""
    per_epoch = len(epoch_batches(n, batch, seed, 0, rank, world, shares=shares))
    if per_epoch == 0:
        raise DataError(f"dataset has {n} samples: fewer than one batch of {batch} per rank x {world}")
    plan: list[list[int]] = []
    epoch = 0
    while len(plan) < total_steps:
        plan += epoch_batches(n, batch, seed, epoch, rank, world, shares=shares)
        epoch += 1
    return plan[:total_steps], per_epoch


def make_loader(cfg: RunConfig, workload, size, root: Path, split: str,
                batches: Sequence[Sequence[int]], device_id: int | None) -> Iterator:
    """The workload's DALI pipeline when toggles.dali is on, else its PyTorch loader."""
    if cfg.toggles.dali:
        it = workload.dali_loader(root, split, size, batches, device_id if cfg.device == "cuda" else None)
    else:
        it = workload.torch_loader(root, split, size, batches)
    return Prefetcher(it, depth) if (depth := prefetch_depth(cfg)) else _Inline(it)


def prefetch_depth(cfg: RunConfig) -> int:
    """Measured on the 2-core CPU machine (make perf): a prefetch thread made DeepCAM tiny steps
    8-19% slower than loading inline, because its reads and normalisation take a core from
    torch's compute threads. On a GPU, loading overlaps device compute instead."""
    if cfg.prefetch >= 0:
        return cfg.prefetch
    return PREFETCH_DEPTH if cfg.device == "cuda" else 0


class _Inline:
    """Loads in the calling thread (no prefetch)."""

    def __init__(self, iterable: Iterable):
        self._it = iter(iterable)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._it)

    def close(self) -> None:
        pass


class Prefetcher:
    """Runs an iterable in a daemon thread, `depth` items ahead. Exceptions (e.g. DataError)
    are re-raised in the consumer at the point where the failing item would have arrived."""

    _END = object()

    def __init__(self, iterable: Iterable, depth: int):
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(iterable,), daemon=True, name="prefetch")
        self._t.start()

    def _run(self, iterable: Iterable) -> None:
        try:
            for item in iterable:
                if self._stop.is_set():
                    return
                self._q.put(item)
            self._q.put(self._END)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
            self._q.put(e)

    def __iter__(self) -> "Prefetcher":
        return self

    def __next__(self):
        item = self._q.get()
        if item is self._END:
            raise StopIteration
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass
