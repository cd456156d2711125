"""Collectives benchmark records as frames for the portal and the CLI: the records in the store,
size tables, ceilings, verdicts and predicted communication time of training runs. The record
itself (kind, folder, per-size figures) is results/record/comm.py. Pure Python plus pandas.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from results.record import schema
from results.record.comm import COLLECTIVES, KIND, MODES, SIZE_FIGURES, table, time_at

if TYPE_CHECKING:
    import pandas as pd


def predicted_comm_s(summary: dict, tables: dict[str, list[dict]]) -> tuple[float | None, dict[str, float]]:
    """A training run's communication time per step predicted from its accounting (calls and
    bytes per step of each collective, results of harness/parallel/accounting.py) and the
    collectives measured on the same machine and rank count: calls x time(bytes / calls).
    Returns (total seconds or None when a collective it uses was not measured, per collective)."""
    parts: dict[str, float] = {}
    missing = False
    for coll in COLLECTIVES:
        calls, nbytes = _num(summary.get(f"comm_{coll}_calls_per_step")), _num(summary.get(f"comm_{coll}_bytes_per_step"))
        if not calls or not nbytes:
            continue
        t = time_at(tables.get(coll, []), nbytes / calls)
        if t is None:
            missing = True
            continue
        parts[coll] = calls * t
    return (None if missing or not parts else sum(parts.values())), parts


def _num(x) -> float | None:
    """A figure as a float; None for missing, NaN (a frame's empty cell) or non-numbers."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def load_comm(tracking_uri: str):
    """One row per collectives record in the MLflow store: its tags (collective, backend, ranks,
    dtype, host, status, reason, record_dir, bench = the invocation) and summary metrics."""
    import pandas as pd

    from results.store.tracking import COMPLETE_TAG, EXPERIMENT, reader
    c = reader(tracking_uri)
    if c is None:  # no store there: nothing to show, and nothing created
        return pd.DataFrame()
    exp = c.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        return pd.DataFrame()
    hits = c.search_runs([exp.experiment_id], f"tags.kind = '{KIND}' and tags.{COMPLETE_TAG} = '1'",
                         max_results=50_000)
    rows = [{**r.data.tags, **r.data.metrics, "started": r.info.start_time} for r in hits]
    df = pd.DataFrame(rows)
    if not df.empty:
        df["ranks"] = pd.to_numeric(df["ranks"], errors="coerce").astype("Int64")
        df["started"] = pd.to_datetime(df["started"], unit="ms", utc=True)
        df = df.sort_values("started").reset_index(drop=True)
    return df


def size_frame(records) -> pd.DataFrame:
    """Long frame of the per-size figures of finished records (one row per record, size and
    mode), read from the records themselves (the source of truth), for the portal's curves."""
    import pandas as pd
    rows = []
    for _, r in records.iterrows():
        if r.get("status") != schema.FINISHED or not r.get("record_dir"):
            continue
        try:
            sized = table(r["record_dir"])
        except OSError:
            continue
        for s in sized:
            for mode in MODES:
                if s.get(f"time_us_{mode}") is None:
                    continue
                rows.append({"collective": r["collective"], "backend": r["backend"], "dtype": r["dtype"],
                             "ranks": r["ranks"], "bytes": s["bytes"], "mode": mode,
                             **{f.rstrip("_"): s[f"{f}{mode}"] for f in SIZE_FIGURES}})
    return pd.DataFrame(rows)


def largest(sized) -> pd.DataFrame:
    """Each (collective, backend, dtype) at its largest size, in its best mode (in place where
    measured): the table under the curves."""
    if sized.empty:
        return sized
    best = sized.assign(_ip=(sized["mode"] == "ip")).sort_values(["bytes", "_ip"])
    return (best.groupby(["collective", "backend", "dtype"], sort=False).tail(1).drop(columns="_ip")
            .sort_values(["collective", "backend"]).reset_index(drop=True))


def ceilings_by_backend(summary: dict) -> dict[str, tuple[str, float]]:
    """The ceiling each backend's busbw is held against, from a record's summary: the memory
    copy for gloo and MPI (shared memory), NVLink's datasheet figure for NCCL where known."""
    out = {}
    copy = _num(summary.get("copy_gb_per_s_rank"))  # what one rank can copy with its threads
    if copy:
        out.update(gloo=("memory-copy ceiling", copy), mpi=("memory-copy ceiling", copy))
    nvlink = _num(summary.get("nvlink_gb_per_s_vendor"))
    if nvlink:
        out["nccl"] = ("NVLink figure per direction", nvlink)
    return out


def verdict_lines(top: pd.DataFrame, ceilings: dict[str, tuple[str, float]]) -> list[str]:
    """One sentence per collective and dtype at the largest size: each backend's busbw, the
    fastest against the next, and the fastest's fraction of its ceiling (ceilings_by_backend)."""
    out = []
    for (c, dtype), g in top.groupby(["collective", "dtype"], sort=False):
        g = g.sort_values("busbw_gb_per_s", ascending=False)
        best = g.iloc[0]
        parts = [f"{b['backend']} {b['busbw_gb_per_s']:.2f} GB/s" for _, b in g.iterrows()]
        line = f"{c} ({dtype}, {_human(best['bytes'])}): busbw " + ", ".join(parts)
        if len(g) > 1 and g.iloc[1]["busbw_gb_per_s"] > 0:
            line += f"; {best['backend']} {best['busbw_gb_per_s'] / g.iloc[1]['busbw_gb_per_s']:.1f}x {g.iloc[1]['backend']}"
        if best["backend"] in ceilings:
            name, value = ceilings[best["backend"]]
            line += f"; {100 * best['busbw_gb_per_s'] / value:.0f}% of the {name}"
        out.append(line)
    return out


def _human(nbytes: float) -> str:
    for unit, k in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= k:
            return f"{nbytes / k:g} {unit}"
    return f"{int(nbytes)} B"


def predictions(runs: pd.DataFrame, comm: pd.DataFrame) -> pd.DataFrame:
    """Per multi-rank training run with a communication account: its communication time per
    step predicted from the collectives benchmarked on the same host with the same rank count
    and the backend the run used (gloo on CPU, NCCL on GPU; the latest such benchmark, float32),
    beside its median step time and, where it was profiled, the measured communication share."""
    import pandas as pd
    if runs.empty or comm.empty:
        return pd.DataFrame()
    ok = comm[(comm["status"] == schema.FINISHED) & (comm["dtype"] == "float32")]
    tables: dict[tuple, tuple[str, dict]] = {}
    out = []
    for _, r in runs.iterrows():
        if r.get("status") != schema.FINISHED or not any(_num(r.get(f"comm_{c}_calls_per_step")) for c in COLLECTIVES):
            continue
        key = (r.get("host"), int(r.get("ranks") or 0), "nccl" if r.get("device") == "cuda" else "gloo")
        if key not in tables:
            cand = ok[(ok["host"] == key[0]) & (ok["ranks"] == key[1]) & (ok["backend"] == key[2])]
            if cand.empty:
                tables[key] = ("", {})
            else:
                bench = cand.sort_values("started")["bench"].iloc[-1]
                latest = cand[cand["bench"] == bench]
                tables[key] = (bench, {x["collective"]: table(x["record_dir"]) for _, x in latest.iterrows()})
        bench, measured = tables[key]
        if not measured:
            continue
        total, parts = predicted_comm_s(r.to_dict(), measured)
        step = _num(r.get("median_step_s"))
        out.append({"run_id": r.get("run_id"), "config": r.get("config"), "backend": key[2], "bench": bench,
                    "predicted_comm_ms": None if total is None else 1e3 * total,
                    "median_step_ms": None if step is None else 1e3 * step,
                    "predicted_comm_share": None if total is None or not step else total / step,
                    "profiled_comm_share": _num(r.get("time_frac_communication")),
                    **{f"{c}_ms": 1e3 * t for c, t in parts.items()}})
    return pd.DataFrame(out)
