"""Correctness gate: a toggle must not change what is computed.

The first K training losses of a run with toggles on are compared with those of a reference
run with toggles off (the sweep's baseline of the same repeat: same seed, data order, batch
and schedule). A relative difference above the tolerance of any enabled toggle makes the run
`fail_accuracy`; such runs are excluded from speedups (the PyTorch compile dashboard's rule).

Tolerances (relative, per step, over the first K = 3 steps), measured on tiny CosmoFlow on
CPU with seed 1: dali / mpi_staging read the same bytes, so losses are bitwise equal;
channels_last reorders float reductions: parameters after one step agree to ~3e-6, but the
small-batch, high-LR trajectory amplifies that about 10x per step (losses 1.3e-4 apart at step
1, 5.8e-3 at step 2, 2.4e-2 at step 4 - deterministic, not a bug), which is why only the first
three steps are compared; bf16 autocast moved them by up to 3.3e-2. A channel-order bug in
the layout transform moved the step-1 loss by 4.7e-2 and is caught (tests/test_gate.py).
"""
from __future__ import annotations

from pathlib import Path

from harness.config import LABEL_FIELDS, RunConfig
from results import schema

K_STEPS = 3
TOLERANCE = {
    "dali": 1e-4,
    "mpi_staging": 1e-4,
    "channels_last": 2e-2,
    "compile": 2e-2,
    "cuda_graphs": 2e-2,
    "amp": 1e-1,
}


def tolerance(cfg: RunConfig) -> float:
    return max((TOLERANCE[t] for t in cfg.toggles.enabled()), default=1e-4)


def check(cfg: RunConfig, losses: list[float], reference_dir: Path) -> str | None:
    """None when the losses agree with the reference, else the reason for fail_accuracy."""
    ref = schema.read_record(reference_dir, with_metrics=True)
    ref_cfg = {k: v for k, v in ref["config"].items()
               if k not in (*LABEL_FIELDS, "toggles", "run_id", "variant", "record_version")}
    ours = {k: v for k, v in cfg.to_dict().items() if k not in (*LABEL_FIELDS, "toggles")}
    differ = sorted(k for k in ours if ours[k] != ref_cfg.get(k))
    if differ:
        return f"correctness gate: reference {reference_dir.name} differs in {', '.join(differ)}"
    ref_losses = [m["loss"] for m in ref["metrics"] if m.get("kind") == "step"][:K_STEPS]
    k = min(K_STEPS, len(losses), len(ref_losses))
    if k == 0:
        return f"correctness gate: no losses to compare with {reference_dir.name}"
    tol = tolerance(cfg)
    for step in range(k):
        a, b = losses[step], ref_losses[step]
        rel = abs(a - b) / max(abs(b), 1e-12)
        if not rel <= tol:  # also catches NaN
            return (f"correctness gate: loss at step {step} is {a:.6g} vs baseline {b:.6g} "
                    f"(relative difference {rel:.2e} > tolerance {tol:.0e})")
    return None
