"""Ablation: add-one-in gain vs leave-one-out loss per toggle (interactions visible), and
throughput per configuration."""
from __future__ import annotations

import streamlit as st

from portal import charts, data

st.title("Ablation: toggles alone vs in combination")
df = data.load_or_stop()
sweeps = [s for s in sorted(df["sweep"].dropna().unique(), reverse=True) if s]
if not sweeps:
    st.info("No sweep runs yet. Run `make demo` or `make sweep SWEEP=harness/sweeps/cpu-ablation.yaml`.")
    st.stop()
sweep = st.selectbox("sweep", sweeps)
view = df[df["sweep"] == sweep]
attr = data.attribution(view)
st.caption("add-one-in: the toggle alone over the baseline. leave-one-out: all-on over all-on minus the "
           "toggle. When the two differ, the toggle interacts with the others.")
if attr.empty:
    st.info("This sweep has no add-one-in cells with a finished baseline.")
for (wl, size, device), a in (attr.groupby(["workload", "size", "device"]) if not attr.empty else []):
    st.plotly_chart(charts.attribution_bars(a, f"{wl} {size} ({device})"), width="stretch")
    if "leave_one_out" not in a:
        st.caption("No leave-one-out cells in this sweep (matrix without all_on / leave_one_out).")
st.subheader("Throughput per configuration")
cols = [c for c in ("workload", "size", "config", "status", "samples_per_s", "achieved_tflops", "data_wait_frac")
        if c in view]
st.dataframe(view[cols].groupby(["workload", "size", "config", "status"], as_index=False).median(numeric_only=True),
             hide_index=True, width="stretch")
st.caption("MFU and the profiled bottleneck breakdown (data wait / compute / memory-bound) come with the "
           "MLPerf-rules work; achieved TFLOP/s = FLOPs per sample x samples/s.")
