"""Pipeline benchmark for `make perf` (not a test): LM small (6 blocks) over 2 ranks under mpiexec.

bubble_curve: GPipe at M = 1, 2, 4, 8 and 1F1B at M = 2, 4, 8 (torch's 1F1B needs M >= P),
equal stages (3 + 3 blocks), each microbatch MB sequences at every M (the global batch grows
with M), so a microbatch costs the same and only the schedule changes. Per run: the measured
bubble (mean over ranks and steady steps), the theory (p-1)/(m+p-1), the bubble the measured
stage times predict (the first and last stage carry the embedding, and the head and loss), and
the window's milliseconds the prediction leaves unexplained (send/recv, schedule overhead).

split_balance: the even split against the one the measured stage times balance
(results/pipeline.balanced_split) and its neighbours, in alternating rounds so drift between
runs shows as spread, not as a difference.

Sized where compute dominates the sends: LM small, sequences of 256 tokens; a microbatch's
activation is MB x 256 x 384 x 4 B = 0.75 MiB per hop against ~0.1 s of compute per stage.
Load on the machine is read before and after every run and kept beside its figures.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from harness.comm.bench import load_now
from results.analysis import bubble as pipe
from harness.bench.launch import run_recorded

MB = 2  # sequences per microbatch


def _run(env: dict, results: Path, sets: list[str], batch: int, steps: int, size: str) -> dict:
    load_before = load_now()
    args = ["run", "lm", "--size", size, "--no-ingest", "--set", f"steps={steps}", "--set", "warmup_steps=1",
            "--set", "profile_steps=0", "--set", f"batch_size={batch}", "--set", "parallel.pp=2"]
    for s in sets:
        args += ["--set", f"parallel.{s}"]
    s = run_recorded(env, results, 2, *args)["summary"]
    return {**s["pipeline"], "median_step_s": s["median_step_s"], "load_before": load_before, "load_after": load_now()}


def _row(r: dict) -> dict:
    stage_ms = {k: round(1000 * (v["fwd_s"] + v["bwd_s"]), 2) for k, v in r["stage_times"].items()}
    out = {"schedule": r["schedule"], "m": r["microbatches"], "split": r["split"],
           "bubble_measured": round(r["bubble_measured"], 4), "bubble_theory": round(r["bubble_theory"], 4),
           "window_ms": round(1000 * r["window_s"], 1), "step_ms": round(1000 * r["median_step_s"], 1),
           "stage_fwd_bwd_ms_per_microbatch": stage_ms,
           "bubble_per_step": [round(float(np.mean(list(s["bubble_by_rank"].values()))), 4) for s in r["steps"]],
           "load_1m": [r["load_before"].get("loadavg_1m"), r["load_after"].get("loadavg_1m")]}
    out.update(bubble_replay=round(r["bubble_replay"], 4), comm_overhead_ms=round(1000 * r["comm_overhead_s"], 1),
               measured_minus_theory=round(r["bubble_measured"] - r["bubble_theory"], 4))
    if "bubble_predicted" in r:  # the gap, term by term: unequal stages, variation, sends + overhead
        out.update(bubble_predicted=round(r["bubble_predicted"], 4),
                   unexplained_ms=round(1000 * r["unexplained_s"], 1),
                   stage_imbalance_term=round(r["bubble_predicted"] - r["bubble_theory"], 4),
                   variation_term=round(r["bubble_replay"] - r["bubble_predicted"], 4),
                   comm_overhead_term=round(r["bubble_measured"] - r["bubble_replay"], 4))
    return out


def pipeline_bench(size: str = "small", steps: int = 4, rounds: int = 2) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HARNESS_RESULTS": tmp}
        env.pop("MLFLOW_TRACKING_URI", None)
        curve = []
        for schedule, ms in (("gpipe", (1, 2, 4, 8)), ("1f1b", (2, 4, 8))):
            for m in ms:
                r = _run(env, Path(tmp), [f"pp_schedule={schedule}", f"microbatches={m}"], MB * m, steps, size)
                curve.append(_row(r))
        # the split: even, the balanced one from the even run's stage times, and their neighbours
        m = 4
        even = _run(env, Path(tmp), [f"microbatches={m}"], MB * m, steps, size)
        plan = pipe.balanced_split(even["split"], even["stage_times"])
        n = sum(even["split"])
        candidates = {tuple(even["split"]), tuple(plan["split"])}
        for sp in list(candidates):
            candidates |= {(sp[0] + d, sp[1] - d) for d in (-1, 1) if 1 <= sp[0] + d < n}
        runs: dict[tuple, list[dict]] = {sp: [] for sp in sorted(candidates)}
        for _ in range(rounds):  # alternating rounds: each split measured at several times
            for sp in runs:
                runs[sp].append(_run(env, Path(tmp), [f"microbatches={m}", f"pp_split={sp[0]},{sp[1]}"],
                                     MB * m, steps, size))
    splits = []
    for sp, rs in runs.items():
        step_ms = [1000 * r["median_step_s"] for r in rs]
        splits.append({"split": list(sp), "step_ms": [round(x, 1) for x in step_ms],
                       "window_ms": [round(1000 * r["window_s"], 1) for r in rs],
                       "bubble_measured": [round(r["bubble_measured"], 4) for r in rs],
                       "stage_fwd_bwd_ms_per_microbatch": _row(rs[-1])["stage_fwd_bwd_ms_per_microbatch"],
                       "load_1m": [r["load_before"].get("loadavg_1m") for r in rs]})
    fastest = min(splits, key=lambda s: float(np.median(s["window_ms"])))
    return {"workload": f"lm/{size}", "ranks": 2, "microbatch_sequences": MB, "steps": steps,
            "bubble_curve": curve,
            "split_balance": {"microbatches": m, "even": even["split"],
                              "balanced_from_measured": plan["split"],
                              "block_ms": round(1000 * plan["block_s"], 2),
                              "last_stage_extra_ms": round(1000 * plan["last_stage_extra_s"], 2),
                              "splits": splits, "fastest_measured": fastest["split"]},
            "targets": {"equal_stages_within_0.05_of_theory": all(
                abs(r["bubble_measured"] - r["bubble_theory"]) <= 0.05 for r in curve)}}
    # where it is not: measured - theory = stage_imbalance_term + variation_term + comm_overhead_term
    # (an identity; each term is measured: median stage times, the replay of every duration,
    # and the window beyond the replay)
