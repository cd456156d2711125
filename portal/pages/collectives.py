"""Collectives: bus bandwidth and latency per collective and backend (gloo, MPI, NCCL) on the
same ranks, nccl-tests' definitions, against this machine's memory-copy ceiling."""
from __future__ import annotations

import streamlit as st

from portal import charts, data
from results.analysis import collectives

st.title("Collectives: bandwidth and latency per backend")
data.refresh_button()
try:
    recs = data.comm_records(data.tracking_uri())
except Exception as e:  # noqa: BLE001 - an unreachable store is shown, not raised
    st.warning("The MLflow store could not be read:")
    st.code(f"{data.tracking_uri()}\n{type(e).__name__}: {e}", language=None)
    st.stop()
if recs.empty:
    st.info("No collectives records yet. Run `make comm RANKS=2` (all_reduce, reduce_scatter, all_gather, "
            "all_to_all, broadcast, reduce, send/recv on gloo and MPI, under mpiexec) and press Refresh.")
    st.stop()

benches = recs.groupby("bench", sort=False).agg(started=("started", "min"), host=("host", "first"),
                                                 ranks=("ranks", "first")).sort_values("started", ascending=False)
labels = {b: f"{r.started:%Y-%m-%d %H:%M} · {r.host} · {r.ranks} ranks" for b, r in benches.iterrows()}
bench = st.selectbox("benchmark run", list(labels), format_func=labels.get)
sel = recs[recs["bench"] == bench]
dtypes = sorted(sel["dtype"].unique(), key=lambda d: (d != "float32", d))  # float32 first
dtype = st.selectbox("dtype", dtypes) if len(dtypes) > 1 else dtypes[0]
sel = sel[sel["dtype"] == dtype]
first = sel.iloc[0]
CEILINGS = (("copy_gb_per_s_rank", "memory copy, a rank's threads"), ("copy_gb_per_s_all_cores", "memory copy, all cores"),
            ("nvlink_gb_per_s_vendor", "NVLink per direction (datasheet)"), ("copy_gb_per_s_device", "GPU memory copy"))
ceilings = {name: float(first[col]) for col, name in CEILINGS if col in sel and first.notna().get(col, False)}
by_backend = collectives.ceilings_by_backend(first.to_dict())  # what each backend's busbw is held against

st.caption("Definitions as nccl-tests: size S is the whole array (the all_gather output, the reduce_scatter input); "
           "time = the slowest rank's mean over the timed iterations; algbw = S / time; busbw = algbw x 2(n-1)/n "
           "for all_reduce, x (n-1)/n for reduce_scatter, all_gather and all_to_all, x 1 for broadcast, reduce "
           "and send/recv. Every result was checked by value; wrong data fails the record. The ceiling is a plain "
           "memory copy of large arrays on this machine: on one node gloo and MPI move bytes through shared "
           "memory, at least one copy per byte, so busbw cannot pass it once S is larger than the caches "
           "(smaller sizes can, from cache). A rank's busbw is held against the copy one rank can do with its "
           "threads; the node's all-core copy is drawn above it.")
cores, per_node = first.get("cpu_cores"), first.get("ranks_per_node")
if cores == cores and per_node == per_node and cores and per_node and per_node > cores:  # NaN-safe
    st.warning(f"{int(per_node)} ranks on {int(cores)} cores of a node: oversubscribed. MPI's busy-polling waits "
               "steal cores from the ranks doing work, so these figures understate the backends.")
load = first.get("loadavg_1m_start")
if load == load and cores == cores and load and cores and load > cores:
    st.warning(f"The machine was loaded when this benchmark started (1-minute load {load:.1f} on {int(cores)} "
               "cores): other work shared the cores, so the figures are noisy and low.")

sized = data.comm_sizes(sel)
if sized.empty:
    st.info("No finished record in this benchmark run.")
else:
    top = collectives.largest(sized)
    st.text("\n".join(collectives.verdict_lines(top, by_backend)))
    st.plotly_chart(charts.collective_panels(sized, "busbw_gb_per_s", "busbw (GB/s)", "bus bandwidth vs size",
                                             ceilings=ceilings), width="stretch")
    small = sized[sized["bytes"] <= 64 * 2 ** 10]
    if not small.empty:
        st.plotly_chart(charts.collective_panels(small, "time_us", "time per call (us)",
                                                 "latency: time per call up to 64 KiB (slowest rank's mean)",
                                                 log_y=True), width="stretch")
    st.subheader("at the largest size")
    shown = top.assign(size_mib=top["bytes"] / 2 ** 20)
    shown["pct_of_ceiling"] = [100 * bw / by_backend[b][1] if b in by_backend else None
                               for b, bw in zip(shown["backend"], shown["busbw_gb_per_s"])]
    shown["ceiling"] = [by_backend.get(b, ("", 0))[0] for b in shown["backend"]]
    cols = [c for c in ("collective", "backend", "mode", "size_mib", "time_us", "p50_us", "p95_us", "algbw_gb_per_s",
                        "busbw_gb_per_s", "pct_of_ceiling", "ceiling") if c in shown]
    st.dataframe(shown[cols], hide_index=True, width="stretch")
not_run = sel[sel["status"] != "finished"]
if not not_run.empty:
    st.subheader("not measured")
    st.text("\n".join(sorted({f"{r.backend} {r.collective}: {r.status}: {r.status_reason}"
                              for r in not_run.itertuples()})))
