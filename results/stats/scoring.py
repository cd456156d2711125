"""MLPerf scoring from run times (no torch): time-to-train with the olympic mean, weak-scaling
throughput, and model FLOPs utilisation.

Olympic mean (mlperf_logging.result_summarizer, HPC rules): per run the time-to-train is
run_stop - run_start. Sort, drop the fastest and the slowest, average the rest. One run that did
not reach the target counts as the dropped slowest; more than one makes the result invalid.
Required runs per benchmark (benchmark_meta.py): cosmoflow 10, deepcam 5 - each workload declares
its own (mlperf_required_runs), and a time-to-train record carries it in its summary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

DEFAULT_REQUIRED = 10  # records from before mlperf_required_runs was recorded: the stricter HPC count


@dataclass(frozen=True)
class Olympic:
    score_s: float | None      # None when invalid
    used: int                  # runs averaged
    runs: int
    converged: int
    note: str                  # "" for a scored result, else why it is not one


def olympic(times_s: Sequence[float | None], required: int = DEFAULT_REQUIRED) -> Olympic:
    """times_s: one entry per run, None for a run that did not converge."""
    runs = len(times_s)
    done = sorted(t for t in times_s if t is not None)
    failed = runs - len(done)
    if failed > 1:
        return Olympic(None, 0, runs, len(done), f"invalid: {failed} runs did not reach the target (at most 1 may)")
    if runs < 3:
        return Olympic(None, 0, runs, len(done), f"invalid: olympic scoring needs at least 3 runs; got {runs}")
    kept = done[1:] if failed else done[1:-1]  # a failed run is the dropped slowest
    note = "" if runs >= required else f"not a scored result: MLPerf requires {required} runs; got {runs}"
    return Olympic(sum(kept) / len(kept), len(kept), runs, len(done), note)


def weak_scaling(starts_s: Sequence[float], stops_s: Sequence[float]) -> dict[str, float]:
    """M instances trained concurrently: TTTa = latest run_stop - earliest run_start."""
    ttta = max(stops_s) - min(starts_s)
    m = len(starts_s)
    return {"instances": m, "ttta_s": ttta, "ttta_min": ttta / 60, "models_per_min": m / (ttta / 60)}


def mfu_pct(flops_per_sample: float, samples_per_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation in percent: achieved model FLOP/s over the device's peak FLOP/s
    (PaLM, Chowdhery et al. 2022, appendix B: model FLOPs, not hardware FLOPs, so recomputation
    and padding do not count as useful work)."""
    return 100.0 * flops_per_sample * samples_per_s / peak_flops
