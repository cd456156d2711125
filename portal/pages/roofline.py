"""Roofline: each device's measured roofs (peak FLOP/s, STREAM triad bandwidth, the ridge), every
profiled run as a point, the chosen run's top ops sized by time, its FLOPs share vs time share,
and fusion's effect (compile, channels_last) on memory-bound time and ops per step."""
from __future__ import annotations

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from portal import data
from results.analysis import roofline as rr

st.title("Roofline: where each run sits against the device's ceilings")
df = data.load_or_stop()
points = data.roofline_points(df)
if points.empty:
    st.info("No profiled runs with a roofline yet. Every run records one in its profiled phase "
            "(profile_steps > 0): run `make demo`, or `python -m harness roofline` for this machine's ceilings.")
    st.stop()
st.caption("Roofs measured on the device (harness/measure/roofline.py): peak FLOP/s = the best large matmul at the run's "
           "dtype; bandwidth = STREAM triad (3 arrays per pass) at the rank's threads; ridge = peak / bandwidth. "
           "Intensity = FLOPs per byte read and written by each op (inputs + outputs of the unfused graph: a lower "
           "bound on memory traffic). Ops torch's FLOP counter gives no FLOPs (pointwise, norms, copies) are in "
           "the table below with the bandwidth they reached.")
picked = st.query_params.get("run")
ids = list(points["run_id"])
run_id = st.selectbox("run", ids, index=ids.index(picked) if picked in ids else len(ids) - 1,
                      format_func=lambda i: "{workload} {size} {config} ({run_id})".format(
                          **points.set_index("run_id").loc[i].to_dict(), run_id=i))
st.query_params["run"] = run_id
sel = points.set_index("run_id").loc[run_id]
b = rr.block(sel["record_dir"])
ops = rr.op_frame(b)

for (device, dtype), g in points.groupby(["device_name", "dtype"]):
    peak, bw = g["peak_flop_per_s"].median(), g["bw_bytes_per_s"].median()
    xs, ys = rr.roof_curve(peak, bw)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"roof: {peak / 1e9:,.1f} GFLOP/s, {bw / 1e9:,.1f} GB/s",
                             line={"color": "#424242"}))
    fig.add_vline(x=peak / bw, line_dash="dot", annotation_text=f"ridge {peak / bw:.1f} FLOP/B")
    for wl, w in g.groupby("workload"):
        fig.add_trace(go.Scatter(x=w["intensity"], y=w["achieved_flop_per_s"], mode="markers", name=f"runs: {wl}",
                                 text=w["config"] + " " + w["size"] + " " + w["roof_pct"].map("{:.0f}% of roof".format),
                                 hovertemplate="%{text}<br>%{x:.2f} FLOP/B, %{y:.3s}FLOP/s<extra></extra>"))
    if sel["device_name"] == device and sel["dtype"] == dtype and not ops.empty:
        placed = ops[ops["flops"] > 0]
        fig.add_trace(go.Scatter(x=placed["intensity"], y=placed["achieved_flop_per_s"], mode="markers",
                                 name="selected run's ops (size = time)", text=placed["op"],
                                 marker={"size": 8 + 40 * placed["s"] / placed["s"].max(), "symbol": "diamond",
                                         "opacity": 0.6},
                                 hovertemplate="%{text}<br>%{x:.2f} FLOP/B, %{y:.3s}FLOP/s<extra></extra>"))
    fig.update_layout(title=f"{device} ({dtype})", xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
                      yaxis={"type": "log", "title": "FLOP/s per rank"}, height=480)
    st.plotly_chart(fig, width="stretch")

st.subheader(f"{sel['workload']} {sel['size']} {sel['config']}")
st.markdown(f"Intensity **{sel['intensity']:.2f} FLOP/byte** against a ridge of **{sel['ridge']:.2f}**: "
            f"**{sel['bound'].replace('_', '-')}**; it reaches **{sel['roof_pct']:.1f}%** of its roof "
            f"({sel['achieved_flop_per_s'] / 1e9:,.2f} of {sel['roof_flop_per_s'] / 1e9:,.2f} GFLOP/s per rank).")
shares = rr.class_shares(b)
if not shares.empty:
    fig = px.bar(shares, x="class", y="share", color="measure", barmode="group",
                 title="share of FLOPs vs share of profiled time, per class")
    fig.update_yaxes(tickformat=".0%")
    st.plotly_chart(fig, width="stretch")
    cb = {r["measure"]: r["share"] for _, r in shares[shares["class"] == "compute-bound"].iterrows()}
    st.caption(f"Compute-bound ops (matmul, convolution, attention) carry {cb.get('flop share', 0):.1%} of the "
               f"counted FLOPs and {cb.get('time share', 0):.1%} of the time (Ivanov et al. 2021: 99.8% and 61% "
               "for a BERT layer on a V100).")
if not ops.empty:
    cols = ["op", "calls", "ms", "gflop_per_s", "gb_per_s", "intensity", "bound", "class_by_name", "roof_pct", "disagree"]
    st.dataframe(ops[cols], hide_index=True, width="stretch")
    if b.get("disagreements"):
        st.caption("Where the class by name and the bound by intensity disagree: " + ", ".join(b["disagreements"]))

st.subheader("Fusion's effect")
fusion = data.fusion(df)
if fusion.empty:
    st.caption("No sweep with a baseline and a +compile or +channels_last cell, both profiled.")
else:
    side = fusion.melt(id_vars=["workload", "size", "toggle"], value_vars=["memory_bound_ms_baseline", "memory_bound_ms_on"],
                       var_name="cell", value_name="memory-bound ms per step")
    side["cell"] = side["cell"].map({"memory_bound_ms_baseline": "baseline", "memory_bound_ms_on": "toggle on"})
    side["pair"] = side["workload"] + " " + side["size"] + " +" + side["toggle"]
    st.plotly_chart(px.bar(side, x="pair", y="memory-bound ms per step", color="cell", barmode="group",
                           title="memory-bound time per profiled step, baseline vs toggle on"), width="stretch")
    for _, f in fusion.iterrows():
        st.markdown(f"**{f['workload']} {f['size']} +{f['toggle']}** ({f['sweep']}): memory-bound time "
                    f"{f['memory_bound_ms_baseline']:.2f} → {f['memory_bound_ms_on']:.2f} ms/step "
                    f"({f['memory_bound_change_pct']:+.0f}%), ops {f['ops_baseline']:.0f} → {f['ops_on']:.0f} per step "
                    f"({f['ops_change_pct']:+.0f}%), {f['fused_kernels_on']:.0f} fused kernels.")
    st.caption("Medians over each cell's repeats, from the profiled phase (wall time per profiled step includes "
               "the profiler's overhead). Ops = top-level aten ops and generated kernels dispatched per step.")
