"""Correctness gate: a toggle must not change what is computed.

The first K training losses of a run with toggles on are compared with those of a reference
run with toggles off (the sweep's baseline of the same repeat: same seed, data order, batch
and schedule). A relative difference above the tolerance of any enabled toggle makes the run
`fail_accuracy`; such runs are excluded from speedups (the PyTorch compile dashboard's rule).

Tolerance is relative and grows per step: tol(k) = base * growth**k over the first K = 3
steps. Step 0 is the forward pass alone on identical weights and data, so it is held tightly;
each update then lets legitimate float reordering grow (small-batch, high-LR trajectories
amplify it ~10x per step). Measured on tiny CosmoFlow, CPU, seed 1 (relative differences at
steps 0, 1, 2): channels_last 1e-7, 2.5e-4, 6.8e-3; bf16 autocast 1.2e-3, 5.1e-3, 5.7e-5;
dali bitwise equal. A layout transform that rolls the channel order gave 5.3e-3 at step 0 and
is caught there (tests/test_gate.py); comparing later steps alone would not separate the two.
"""
from __future__ import annotations

from pathlib import Path

from harness.config.run_config import LABEL_FIELDS, RunConfig
from results.record import schema
from results.record.toggles import BY_NAME

K_STEPS = 3
# Per toggle (base at step 0, growth per step): declared with the toggle (results/record/toggles.py):
# dali and mpi_staging 1e-6 (the same bytes), channels_last/compile/cuda_graphs 1e-4 (same
# math, reordered reductions), amp 1e-2 growing 3x (lower precision by design).
STRICTEST = (1e-6, 10.0)  # no toggle on: the run must reproduce its reference
# More ranks against one (any parallel strategy): gradients are summed across ranks in another
# order. Measured on LM tiny, 2 ranks, gloo: ddp, zero1 and fsdp match the one-rank losses to
# 1e-7 relative at steps 0-4.
PARALLEL = (1e-5, 10.0)
# what a gated run may differ in from its reference: labels, and what is being checked
CHECKED = ("toggles", "parallel", "ranks")


def tolerance(cfg: RunConfig, step: int) -> float:
    gates = [BY_NAME[t].gate for t in cfg.toggles.enabled()]
    if cfg.ranks > 1 or not cfg.parallel.is_default():
        gates.append(PARALLEL)
    base, growth = max(gates, default=STRICTEST)
    return base * growth ** step


def check(cfg: RunConfig, losses: list[float], reference_dir: Path, decided: dict | None = None) -> str | None:
    """None when the losses agree with the reference, else the reason for fail_accuracy. What
    was decided goes into `decided` (the run's summary keeps it): gate_steps_compared,
    gate_max_rel_diff (the largest relative loss difference), gate_max_ratio (the largest
    difference over its step's tolerance: <= 1 passes), gate_passed (1 or 0)."""
    decided = {} if decided is None else decided
    decided.update(gate_steps_compared=0, gate_passed=0)
    ref = schema.read_record(reference_dir, with_metrics=True)
    ref_cfg = {k: v for k, v in ref["config"].items()
               if k not in (*LABEL_FIELDS, *CHECKED, "run_id", "variant", "record_version")}
    ours = {k: v for k, v in cfg.to_dict().items() if k not in (*LABEL_FIELDS, *CHECKED)}
    differ = sorted(k for k in ours if ours[k] != ref_cfg.get(k))
    if differ:
        return f"correctness gate: reference {reference_dir.name} differs in {', '.join(differ)}"
    ref_losses = [m["loss"] for m in ref["metrics"] if m.get("kind") == "step"][:K_STEPS]
    k = min(K_STEPS, len(losses), len(ref_losses))
    if k == 0:
        return f"correctness gate: no losses to compare with {reference_dir.name}"
    worst_rel = worst_ratio = 0.0
    for step in range(k):
        tol = tolerance(cfg, step)
        a, b = losses[step], ref_losses[step]
        rel = abs(a - b) / max(abs(b), 1e-12)
        decided["gate_steps_compared"] = step + 1
        worst_rel, worst_ratio = max(worst_rel, rel), max(worst_ratio, rel / tol)
        decided.update(gate_max_rel_diff=worst_rel, gate_max_ratio=worst_ratio)
        if not rel <= tol:  # also catches NaN
            return (f"correctness gate: loss at step {step} is {a:.6g} vs baseline {b:.6g} "
                    f"(relative difference {rel:.2e} > tolerance {tol:.0e})")
    decided["gate_passed"] = 1
    return None
