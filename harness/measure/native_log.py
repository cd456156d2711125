"""The profiler's own log lines kept out of the run's output.

torch.profiler's C++ side (libkineto, c10's allocator) writes straight to file descriptor 2:
"USDT:... profiler_start"/"profiler_stop" on every profiler session (kineto's logger observer,
not governed by KINETO_LOG_LEVEL) and "Memory block of unknown size was allocated before the
profiling started" when memory profiling starts mid-run, as the accounting's does by design. A
Python-level filter cannot see them, so around a profiled block fd 2 goes to a temporary file,
and afterwards every line but those is written back to the real stderr, in order."""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile

NOISE = ("USDT:", "Memory block of unknown size was allocated before the profiling started",
         "SyncActivityProfilerHandler")


@contextlib.contextmanager
def profiler_quiet():
    """Run a profiled block with the profiler's own log lines dropped and everything else
    written to stderr when the block ends (a block that raises still gets its lines back)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines(keepends=True)
                    if not any(n in ln for n in NOISE)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
