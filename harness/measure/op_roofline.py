"""Every op and the run itself placed on the device's roofline (Williams et al. 2009): FLOPs and
bytes per op from one counted step (harness/measure/op_counts.py), time per op from the profiled steps
(harness/measure/breakdown.py), the roofs from harness/measure/roofline.py.

Joining the two: the counter sees ops where they are dispatched below autograd (aten::addmm,
aten::convolution, aten::native_layer_norm); the profiler sees those and what they call inside
(aten::mkldnn_convolution, aten::copy_ ...), plus composite ops above them (aten::linear). A
profiled event's self time goes to its outermost ancestor-or-self that the counter saw, so each
counted op gets its whole kernel time, counted once. What no counted op covers (autograd engine,
Python, a compiled graph's generated kernels, which the counter never sees) stays unattributed.

Per op: intensity I = FLOPs / bytes, achieved FLOP/s, the roof at I and the fraction of it
reached, the bound by intensity (against the ridge) beside the class by name
(harness/breakdown.classify), and whether they disagree.
"""
from __future__ import annotations

from harness.measure import breakdown
from harness.measure import roofline

TOP = 12


def attribute(chains: dict[tuple[str, ...], float], counted: set[str]) -> dict[str, float]:
    """Self seconds per counted op (see the module docstring); the rest under "(unattributed)"."""
    out: dict[str, float] = {}
    for chain, s in chains.items():
        owner = next((n for n in reversed(chain) if n in counted), "(unattributed)")
        out[owner] = out.get(owner, 0.0) + s
    return out


def op_rows(counts: dict[str, dict], seconds: dict[str, float], steps: int, ceil: dict) -> list[dict]:
    """One row per counted op that took time: per-step figures and its place on the roofline."""
    rows = []
    for op, c in counts.items():
        s = seconds.get(op, 0.0) / steps
        if s <= 0 or not (c["flops"] or c["bytes"]):
            continue  # views and ops the profile never timed
        name_cls = breakdown.classify(op)
        row = {"op": op, "calls": c["calls"], "flops": c["flops"], "bytes": c["bytes"], "s": s,
               "achieved_flop_per_s": c["flops"] / s, "achieved_bytes_per_s": c["bytes"] / s,
               "class_by_name": name_cls}
        if c["bytes"]:
            i = c["flops"] / c["bytes"]
            row.update(intensity=i, roof_flop_per_s=roofline.roof(i, ceil), bound=roofline.bound(i, ceil))
            # below the ridge achieved/roof = (FLOP/s) / (I x bandwidth) = (bytes/s) / bandwidth: the
            # bandwidth form also places the ops torch counts no FLOPs for (pointwise, norms, copies)
            row["roof_frac"] = (row["achieved_bytes_per_s"] / ceil["bw_bytes_per_s"] if row["bound"] == "memory_bound"
                                else row["achieved_flop_per_s"] / ceil["peak_flop_per_s"])
            # the name classes other than the two bounds (communication, other) say nothing to compare
            row["disagree"] = name_cls in ("compute_bound", "memory_bound") and name_cls != row["bound"]
        rows.append(row)
    return sorted(rows, key=lambda r: -r["s"])


def flop_time_shares(counts: dict[str, dict], shares: dict[str, float]) -> dict[str, dict[str, float]]:
    """Share of the step's counted FLOPs and of its profiled time per name class: the
    "matmuls 99.8% of FLOPs, 61% of runtime" view (Ivanov et al. 2021)."""
    flops = {cls: 0.0 for cls in breakdown.CLASSES}
    for op, c in counts.items():
        flops[breakdown.classify(op)] += c["flops"]
    total = sum(flops.values()) or 1.0
    return {cls: {"flop_share": flops[cls] / total, "time_share": shares.get(cls, 0.0)} for cls in breakdown.CLASSES}


def report(counts: dict[str, dict], chains: dict, steps: int, ceil: dict, model_flops_per_step: float,
           shares: dict[str, float]) -> dict:
    """The record's `roofline` block (per rank): ceilings, the run's intensity, per-op rows."""
    seconds = attribute(chains, set(counts))
    rows = op_rows(counts, seconds, steps, ceil)
    moved = sum(c["bytes"] for c in counts.values())
    counted_flops = sum(c["flops"] for c in counts.values())
    out = {**ceil, "bytes_per_step": moved, "counted_flops_per_step": counted_flops,
           "model_flops_per_step": model_flops_per_step,
           "unattributed_s_per_step": seconds.get("(unattributed)", 0.0) / steps,
           "ops": rows[:TOP], "disagreements": [r["op"] for r in rows if r.get("disagree")],
           "classes": flop_time_shares(counts, shares)}
    if moved:
        out["intensity"] = model_flops_per_step / moved  # FLOP per byte of the unfused graph
        out["bound"] = roofline.bound(out["intensity"], ceil)
        out["roof_flop_per_s"] = roofline.roof(out["intensity"], ceil)
    return out


def summary_figures(block: dict, achieved_flop_per_s_per_device: float | None) -> dict[str, float]:
    """Flat keys for the run summary and MLflow (record.summary() calls this)."""
    out = {"roofline_intensity": block.get("intensity"), "roofline_ridge": block["ridge_flop_per_byte"],
           "roofline_bytes_per_step": block["bytes_per_step"],
           "roofline_membw_gb_per_s": block["bw_bytes_per_s"] / 1e9,
           "roofline_flop_frac_compute_bound": block["classes"]["compute_bound"]["flop_share"],
           "roofline_time_frac_compute_bound": block["classes"]["compute_bound"]["time_share"]}
    if achieved_flop_per_s_per_device and block.get("roof_flop_per_s"):
        out["roofline_roof_pct"] = 100.0 * achieved_flop_per_s_per_device / block["roof_flop_per_s"]
    return {k: v for k, v in out.items() if v is not None}
