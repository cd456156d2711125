"""Reader settings the workloads' DALI pipelines share (USE_MMAP: the whole-file ones, CosmoFlow
and DeepCAM; the LM's region-of-interest reads of its shards keep DALI's default), tuned
with `make perf` (dali_tuning: every combination of threads 1/2/4, queue depth 1/2/4 and mmap
on/off, interleaved, against raw reads of the same files). On the 2-core CPU machine with
CosmoFlow tiny, plain reads (dont_use_mmap) beat mmap at every thread count and depth:
  2 threads, depth 2: 0.46 of raw read plain vs 0.41 mmap (make perf, 2 epochs per pass);
  0.66 vs 0.53 in a longer scratch run (4 epochs per pass, pipeline set-up amortised).
Threads 1-2 and depth 1-4 are within noise of each other here; threads follow the cores the
harness gives the rank. Module attributes so that the benchmark can vary them; the pipelines
read them when built.
"""
from __future__ import annotations

USE_MMAP = False     # mmap'ed reads fault in every page of a 256 KiB sample; plain reads don't
PREFETCH_DEPTH = 2   # batches DALI prepares ahead
THREADS = 0          # 0: as many as torch's intra-op threads (the cores the harness gave this rank)


def num_threads() -> int:
    from workloads.parallel_fill import rank_threads
    return THREADS or rank_threads()
