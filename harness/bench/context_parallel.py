"""Context parallel for `make perf` (not a test): LM long-tiny (seq_len 2048) at cp = 1, 2, 4
under mpiexec. Per degree: the activation bytes each rank's forward keeps per block
(harness/parallel/activations.py), the peak live tensor bytes per rank, the K/V all-gather and
reduce-scatter bytes per step beside the analytic volume (harness/parallel/context.py), and the
step time (plain runs: on this 2-core machine cp=4 runs 4 processes on 2 cores, so the times
say what the collectives and the oversubscription cost, not what cp buys on real devices).

With the all-gather method each rank keeps its seq_len/cp tokens' activations and the whole
sequence's K and V: per block ~ A/cp + 2*b*s*h*4 bytes (A: one rank's), so the fall is
slower than cp x; the ring method (not built) keeps one block of K/V at a time.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.bench.launch import run_recorded


def context_parallel_bench(size: str = "long-tiny", degrees: tuple[int, ...] = (1, 2, 4), steps: int = 6) -> dict:
    from harness.config import registry
    s = registry.get("lm").sizes[size]
    kv = s.batch_size * s.seq_len * s.d_model * 4  # one of K or V, whole sequence, fp32
    mib = 2 ** 20
    out: dict = {"workload": f"lm/{size}", "seq_len": s.seq_len, "global_batch": s.batch_size}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HARNESS_RESULTS": tmp}
        env.pop("MLFLOW_TRACKING_URI", None)
        base = None
        for cp in degrees:
            args = ["run", "lm", "--size", size, "--no-ingest", "--set", f"steps={steps}", "--set", "warmup_steps=2",
                    "--set", "profile_steps=0", "--set", "account=true"]
            if cp > 1:
                args += ["--set", f"parallel.cp={cp}"]
            summ = run_recorded(env, Path(tmp), cp, *args)["summary"]
            act = summ["mem_activation_bytes_per_block"]
            base = base or act
            row = {"activation_mib_per_block_per_rank": act / mib, "vs_one_rank": act / base,
                   "allgather_model": (base / cp + (2 * kv if cp > 1 else 0)) / mib,
                   "peak_tensor_mib_per_rank": summ["mem_peak_bytes_per_rank"] / mib,
                   "median_step_ms": 1000 * summ["median_step_s"]}
            if cp > 1:
                acc = summ["parallel"]
                row["collectives"] = {k: {"measured": v["bytes"], "analytic": acc["analytic_per_step"].get(k, 0)}
                                      for k, v in acc["measured_per_step"].items()}
            out[f"cp{cp}"] = row
    return out
