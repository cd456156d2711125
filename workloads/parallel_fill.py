"""Fill a batch's slots with several threads: the calling thread and T-1 helper threads take
slots from one shared counter until none are left, each reading straight into its own slot.

Why: a loader's reads from the page cache are memory copies done by the kernel, and one core's
copy bandwidth is the limit of a single-threaded loader. os.readv releases the GIL, so T
threads copy in parallel (what DALI's reader threads do). Measured on the 2-core CPU machine
(CosmoFlow tiny, 256 KiB samples, each loader pass paired with a raw read pass; make perf,
loader_throughput): one thread 0.82-0.84 of plain sequential reads, two threads 1.12-1.14, and
plain reads with two threads 1.36 (what two threads could reach).

Why not concurrent.futures: its submit/Future/wait round trip cost 75 us per batch here (12% of
a 600 us CosmoFlow tiny batch); a bare lock as the done signal costs 24 us. Slots are taken
dynamically, so a helper that wakes late simply reads fewer of them.

The helpers are per process (started again after a fork), daemon, and shared by every loader,
so building a loader per evaluation starts no threads. They never wait on anything but their
job queue, so a caller waiting on them cannot deadlock.
"""
from __future__ import annotations

import _thread
import os
import queue
import threading
from typing import Callable

_jobs: queue.SimpleQueue = queue.SimpleQueue()
_helpers = 0
_pid = os.getpid()
_start_lock = threading.Lock()


def rank_threads() -> int:
    """The cores the harness gave this rank: torch's intra-op thread count."""
    import torch
    return max(1, torch.get_num_threads())


def _helper() -> None:
    while True:
        work, done = _jobs.get()
        try:
            work()
        finally:
            done.release()


def _ensure_helpers(k: int) -> None:
    global _jobs, _helpers, _pid
    with _start_lock:
        if _pid != os.getpid():  # a forked child has none of its parent's threads
            _jobs, _helpers, _pid = queue.SimpleQueue(), 0, os.getpid()
        while _helpers < k:
            threading.Thread(target=_helper, daemon=True, name="batch-read").start()
            _helpers += 1


def fill(n: int, read_slot: Callable[[int], None], threads: int) -> None:
    """read_slot(j) for every j in range(n), on `threads` threads (this one included). Returns
    when every slot is done. Every slot is attempted even after a failure, and the error of the
    lowest failing slot is raised, so the file reported does not depend on thread timing."""
    slots = iter(range(n))  # next() on it is atomic under the GIL: each slot is taken once
    errors: list[tuple[int, BaseException]] = []

    def work() -> None:
        for j in slots:
            try:
                read_slot(j)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller below
                errors.append((j, e))

    helpers = max(1, min(threads, n)) - 1
    if helpers:
        _ensure_helpers(helpers)
    done = []
    for _ in range(helpers):
        lock = _thread.allocate_lock()
        lock.acquire()  # released by the helper when its share is done
        _jobs.put((work, lock))
        done.append(lock)
    work()
    for lock in done:
        lock.acquire()  # no thread may still write into the batch once we return or raise
    if errors:
        raise min(errors, key=lambda e: e[0])[1]
