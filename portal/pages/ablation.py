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
st.subheader("Where the step time goes")
st.caption("A short profiled phase after each run's timed steps (torch.profiler; never the timed steps): "
           "data wait, compute-bound ops (matmul, convolution, attention), memory-bound ops (normalisation, "
           "pointwise, softmax, copies and layout transforms), optimizer, other. Compile should shrink "
           "memory-bound time, NHWC should remove layout copies, DALI should shrink data wait.")
shares = [c for c, _, _ in charts.BREAKDOWN if c in view]
finished = view[view["status"] == "finished"]
if shares and not finished.dropna(subset=shares, how="all").empty:
    med = finished.groupby(["workload", "size", "device", "config"], as_index=False)[shares].median()
    for (wl, size, device), b in med.groupby(["workload", "size", "device"]):
        st.plotly_chart(charts.breakdown_bars(b, f"{wl} {size} ({device})"), width="stretch")
    st.page_link("pages/roofline.py", label="each run and its top ops on the roofline; fusion's effect", icon="📈")
else:
    st.caption("No profiled runs in this sweep (profile_steps=0).")
st.subheader("Throughput and MFU per configuration")
cols = [c for c in ("workload", "size", "config", "status", "samples_per_s", "achieved_tflops", "mfu_measured_pct",
                    "mfu_vendor_pct", "data_wait_frac") if c in view]
st.dataframe(view[cols].groupby(["workload", "size", "config", "status"], as_index=False).median(numeric_only=True),
             hide_index=True, width="stretch")
st.caption("MFU = model FLOPs per sample x samples/s over the device peak (PaLM, appendix B): "
           "mfu_measured_pct against this machine's measured matmul peak at the run's dtype, "
           "mfu_vendor_pct against the vendor's datasheet peak where the device is known.")
