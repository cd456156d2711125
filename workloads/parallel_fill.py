"""Fill a batch's slots with several threads: the calling thread reads the first contiguous
chunk of slots and a shared pool reads the others, each thread straight into its own slots.

Why: a loader's reads from the page cache are memory copies done by the kernel, and one core's
copy bandwidth is the limit of a single-threaded loader. os.readv releases the GIL, so T
threads copy in parallel (what DALI's reader threads do). Measured on the 2-core CPU machine
(CosmoFlow tiny, 256 KiB samples, each loader pass paired with a raw read pass): one thread
0.87 of raw sequential reads, two threads 1.01 (make perf, loader_throughput).

The pool is per process (re-made after a fork) and shared by every loader, so building a
loader per evaluation starts no threads. Its workers never wait on anything, so a caller
waiting on them cannot deadlock.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable

_lock = threading.Lock()
_pools: dict[int, tuple[int, ThreadPoolExecutor]] = {}  # workers -> (pid that made it, pool)


def rank_threads() -> int:
    """The cores the harness gave this rank: torch's intra-op thread count."""
    import torch
    return max(1, torch.get_num_threads())


def _pool(workers: int) -> ThreadPoolExecutor:
    with _lock:
        pid, pool = _pools.get(workers, (None, None))
        if pid != os.getpid():  # none yet, or inherited through fork (its threads don't exist here)
            pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="batch-read")
            _pools[workers] = (os.getpid(), pool)
        return pool


def fill(n: int, read_slots: Callable[[range], None], threads: int) -> None:
    """Call read_slots over contiguous chunks of range(n), `threads` at a time. Returns when
    every chunk is done. An error is re-raised only after all chunks have stopped writing, and
    the lowest chunk's error wins, so the reported file is the first bad one in slot order."""
    t = max(1, min(threads, n))
    if t == 1:
        read_slots(range(n))
        return
    chunks = [range(k * n // t, (k + 1) * n // t) for k in range(t)]
    pool = _pool(t - 1)
    futures = [pool.submit(read_slots, c) for c in chunks[1:]]
    try:
        read_slots(chunks[0])
    finally:
        wait(futures)  # no thread may still write into the batch once we return or raise
    for f in futures:
        f.result()
