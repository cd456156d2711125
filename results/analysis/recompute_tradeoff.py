"""Activation recomputation's trade-off, from recorded runs: per recomputing cell (ac-full@1,
fsdp+ac-selective@2, cp2+ac-full@2 ...) the activation bytes per block and the peak memory it
saved against the same layout without recomputation (the one-rank baseline for @1 cells), and
the step time it added (ratio of median steps; the interleaved figure when the cell was
interleaved against no recomputation on one rank). Pure pandas: the portal's Parallelism page
and the tests read it."""
from __future__ import annotations

import re

import pandas as pd

from results.record import schema

_AC = re.compile(r"\+?ac-(full|selective)")


def counterpart(config: str) -> str | None:
    """The same layout without recomputation: 'fsdp+ac-full@2' -> 'fsdp@2', 'ac-full@1' ->
    'baseline'; None for a cell that does not recompute."""
    name, _, ranks = config.partition("@")
    if not _AC.search(name):
        return None
    base = _AC.sub("", name).strip("+")
    return f"{base}@{ranks}" if base else "baseline"


def table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per recomputing cell with a finished counterpart: activation MiB per block and
    peak MiB per rank, each side's, the fractions saved, and the step time ratio."""
    if df.empty or "config" not in df:
        return pd.DataFrame()
    done = df[df["status"] == schema.FINISHED]
    cols = [c for c in ("mem_activation_bytes_per_block", "mem_peak_bytes_per_rank", "median_step_s", "ab_ratio")
            if c in done]
    if "mem_activation_bytes_per_block" not in cols:
        return pd.DataFrame()
    keys = ["workload", "size", "device", "config"]
    med = done.groupby(keys, as_index=False)[cols].median(numeric_only=True)
    rows = []
    for _, r in med.iterrows():
        other = counterpart(str(r["config"]))
        if other is None:
            continue
        o = med[(med["workload"] == r["workload"]) & (med["size"] == r["size"]) & (med["device"] == r["device"])
                & (med["config"] == other)]
        if o.empty or pd.isna(o["mem_activation_bytes_per_block"].iloc[0]):
            continue
        o = o.iloc[0]
        row = {"workload": r["workload"], "size": r["size"], "device": r["device"], "config": r["config"],
               "against": other, "activation_mib_per_block": r["mem_activation_bytes_per_block"] / 2 ** 20,
               "against_activation_mib": o["mem_activation_bytes_per_block"] / 2 ** 20,
               "activation_saved": 1 - r["mem_activation_bytes_per_block"] / o["mem_activation_bytes_per_block"]}
        if not pd.isna(r.get("mem_peak_bytes_per_rank")) and not pd.isna(o.get("mem_peak_bytes_per_rank")):
            row["peak_saved"] = 1 - r["mem_peak_bytes_per_rank"] / o["mem_peak_bytes_per_rank"]
        interleaved = r.get("ab_ratio")
        if interleaved is not None and not pd.isna(interleaved):  # measured against it in one process
            row["step_time_ratio"], row["step_basis"] = 1 / interleaved, "interleaved"
        else:
            row["step_time_ratio"], row["step_basis"] = r["median_step_s"] / o["median_step_s"], "medians"
        rows.append(row)
    return pd.DataFrame(rows)


def line(r) -> str:
    """'ac-full@1 vs baseline: activations per block 95% smaller (0.26 vs 4.02 MiB), peak 34%
    smaller, step 1.24x as long (interleaved)'."""
    parts = [f"{r['config']} vs {r['against']}: activations per block {100 * r['activation_saved']:.0f}% smaller "
             f"({r['activation_mib_per_block']:.2f} vs {r['against_activation_mib']:.2f} MiB)"]
    if not pd.isna(r.get("peak_saved", float("nan"))):
        parts.append(f"peak {100 * r['peak_saved']:.0f}% smaller")
    parts.append(f"step {r['step_time_ratio']:.2f}x as long ({r['step_basis']})")
    return ", ".join(parts)
