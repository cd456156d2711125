"""The PyTorch loader path's iterator: a map-style dataset indexed by whole index batches (the
harness's shuffled, rank-sharded plan), read in order in the calling thread.

This is what `DataLoader(dataset, sampler=batches, batch_size=None, num_workers=0)` does, minus
its per-batch fetcher, default_convert and profiler-range overhead: on the 2-core CPU machine
that overhead cost ~20% of the loader's bandwidth with 256 KiB CosmoFlow samples (make perf,
loader_throughput). Overlap with compute comes from the harness's prefetch thread
(harness/data.Prefetcher), not worker processes.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence


def batch_stream(dataset, batches: Iterable[Sequence[int]]) -> Iterator:
    for idx in batches:
        yield dataset[idx]
