"""What the workloads' DALI loaders share: building and iterating a pipeline (`iterate`), the
whole-file numpy reader (`read_files`), and the reader settings.

The settings (USE_MMAP: the whole-file readers of CosmoFlow and DeepCAM; the LM's
region-of-interest reads of its shards keep DALI's default) were tuned with `make perf`
(dali_tuning: every combination of threads 1/2/4, queue depth 1/2/4 and mmap on/off,
interleaved, each pass paired with a raw read of the same files). On the 2-core CPU machine
with CosmoFlow tiny, plain reads (dont_use_mmap) beat mmap at every thread count and depth:
2 threads, depth 2 plain 0.50 of raw reads, the best setting (depth 4) 0.52, mmap 0.37-0.41.
Threads 1-2 and depth 1-4 are within noise of each other here; threads follow the cores the
harness gives the rank. Module attributes so that the benchmark can vary them; the pipelines
read them when built.
"""
from __future__ import annotations

from typing import Callable, Iterator, Sequence

from workloads.errors import DataError

USE_MMAP = False     # mmap'ed reads fault in every page of a 256 KiB sample; plain reads don't
PREFETCH_DEPTH = 2   # batches DALI prepares ahead
THREADS = 0          # 0: as many as torch's intra-op threads (the cores the harness gave this rank)


def num_threads() -> int:
    from workloads.parallel_fill import rank_threads
    return THREADS or rank_threads()


def read_files(files: list[str], name: str | None = None):
    """fn.readers.numpy over whole files in exactly this order (no reader-side shuffle, so the
    order matches the PyTorch path); the last batch padded, as LastBatchPolicy.PARTIAL needs."""
    from nvidia.dali import fn
    return fn.readers.numpy(files=files, name=name, random_shuffle=False, pad_last_batch=True,
                            dont_use_mmap=not USE_MMAP)


def iterate(define: Callable, batches: Sequence[Sequence[int]], device_id: int | None, names: list[str],
            where: str, files: Sequence[Sequence[str]] = ()) -> Iterator[tuple]:
    """Build the pipeline `define` describes (its epoch-defining reader named "data") with the
    shared settings, a batch per index batch, CPU-only when device_id is None; yield tuples of
    torch tensors in `names` order. Files the readers can't open are a DataError naming `where`;
    `files` (each reader's file sequence) lets an array of the wrong shape be named by its file,
    since DALI only says that a batch's shapes are not uniform."""
    from nvidia.dali import pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    pipe = pipeline_def(define, batch_size=max(len(b) for b in batches), num_threads=num_threads(),
                        device_id=device_id, prefetch_queue_depth=PREFETCH_DEPTH, exec_dynamic=True)()
    try:  # the iterator runs the pipeline for its first batch as it is made
        pipe.build()
        it = DALIGenericIterator([pipe], names, reader_name="data", last_batch_policy=LastBatchPolicy.PARTIAL,
                                 auto_reset=False)
    except RuntimeError as e:
        raise DataError(_problem(e, where, files)) from None
    return _batches(it, names, where, files)


def _batches(it, names: list[str], where: str, files: Sequence[Sequence[str]]) -> Iterator[tuple]:
    # Readers open files as they reach them, so a missing or corrupt file can surface mid-run
    try:
        for b in it:
            yield tuple(b[0][n] for n in names)
    except RuntimeError as e:
        raise DataError(_problem(e, where, files)) from None


def _problem(e: RuntimeError, where: str, files: Sequence[Sequence[str]]) -> str:
    reason = _reason(e)
    if "uniform shape" in reason:  # find the odd file by its .npy header (only on this error path)
        odd = next((msg for seq in files if (msg := odd_file(seq))), None)
        if odd:
            return odd
    return f"DALI could not read {where}: {reason}"


def odd_file(paths: Sequence[str]) -> str | None:
    """The first file whose array differs in shape or dtype from most of `paths`, in the words
    the PyTorch loaders use, or None when they all agree."""
    from collections import Counter

    from workloads.npy_io import read_header
    heads = {}
    for p in dict.fromkeys(paths):
        with open(p, "rb") as f:
            shape, dtype = read_header(f, p)
        heads[p] = (tuple(shape), str(dtype))
    (shape, dtype), _ = Counter(heads.values()).most_common(1)[0]
    for p, (s, d) in heads.items():
        if (s, d) != (shape, dtype):
            return f"wrong array in {p}: expected {dtype} {shape} (as the other files), found {d} {s}"
    return None


def _reason(e: RuntimeError) -> str:
    """The one line of a DALI error that says what went wrong (it names the file): the first
    after 'encountered:', without its 'Assert on "..." failed: ' prefix."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if "encountered:" in lines and lines.index("encountered:") + 1 < len(lines):
        line = lines[lines.index("encountered:") + 1]
        return line.split(" failed: ", 1)[1] if line.startswith("Assert on") and " failed: " in line else line
    return lines[0] if lines else type(e).__name__
