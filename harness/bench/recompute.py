"""Activation recomputation for `make perf` (not a test): on LM small and LM long-tiny (seq_len
2048), parallel.recompute=selective and full against none, one rank. Per mode: the activation
bytes one forward keeps per block (harness/parallel/activations.py) beside the layer count and
Korthikanti et al.'s formulas, the peak live tensor bytes of a step, and the step time against
none from the interleaved engine (both in one process, alternating blocks; 2 processes
combined), so "memory saved vs time added" is one row per mode.

torchtitan reports, on Llama 3 8B (H100s), 58.2% MFU with selective op-level recomputation and
56.8% with full per-layer recomputation; the note says where ours lands and why.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.bench.launch import run_interleaved, run_recorded
from results.stats import interleaved

MODES = ("selective", "full")


def _args(size: str, sets: list[str], steps: int, batch: int) -> list[str]:
    args = ["run", "lm", "--size", size, "--no-ingest", "--set", f"steps={steps}", "--set", "warmup_steps=2",
            "--set", "profile_steps=0", "--set", "account=true", "--set", f"batch_size={batch}"]
    for s in sets:
        args += ["--set", s]
    return args


def _memory(s: dict) -> dict:
    mib = 2 ** 20
    return {"activation_mib_per_block": s["mem_activation_bytes_per_block"] / mib,
            "peak_tensor_mib": s["mem_peak_bytes_per_rank"] / mib,
            "model_state_mib": s["mem_model_state_bytes_per_rank"] / mib}


def recompute_bench(sizes: tuple[str, ...] = ("small", "long-tiny"), processes: int = 2,
                    budget_s: float = 25.0) -> dict:
    from harness.config import registry
    from harness.parallel import activations
    wl = registry.get("lm")
    out: dict = {"method": "interleaved against recompute=none in one process, random effects over "
                 f"{processes} processes; memory: profiler live-tensor bytes (one rank)"}
    batch = {"small": 8, "long-tiny": 4}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HARNESS_RESULTS": tmp}
        env.pop("MLFLOW_TRACKING_URI", None)
        for size in sizes:
            s = wl.sizes[size]
            b = batch.get(size, s.batch_size)
            none = run_recorded(env, Path(tmp), 1, *_args(size, [], 4, b))["summary"]
            theory = activations.layer_theory(s.seq_len, b, s.d_model, s.n_head)
            row = {"batch": b, "seq_len": s.seq_len, "none": _memory(none),
                   "theory_bytes_per_block": theory,
                   "none_vs_theory": none["mem_activation_bytes_per_block"] / theory["ours_none"]}
            for mode in MODES:
                g = run_interleaved(env, Path(tmp), 1, processes,
                                    *_args(size, [f"parallel.recompute={mode}", f"budget_s={budget_s}"], 400, b))
                last = g.pop("records")[-1]["summary"]
                lo, hi = g["ci95"]
                mem = _memory(last)
                row[mode] = {**mem, "step_time_vs_none": 1 / g["speedup"], "ci95": [1 / hi, 1 / lo],
                             "half_width": interleaved.half_width(lo, hi, g["speedup"]),
                             "per_process": g["per_process"],
                             "activation_saved_frac": 1 - mem["activation_mib_per_block"]
                             / row["none"]["activation_mib_per_block"],
                             "peak_saved_frac": 1 - mem["peak_tensor_mib"] / row["none"]["peak_tensor_mib"]}
            row["full_vs_theory"] = row["full"]["activation_mib_per_block"] * 2 ** 20 / theory["ours_full"]
            out[size] = row
    return out
