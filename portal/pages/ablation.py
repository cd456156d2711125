"""Ablation: add-one-in gain vs leave-one-out loss per toggle (interactions visible), and
throughput per configuration."""
from __future__ import annotations

import streamlit as st

from portal import charts, data

st.title("Ablation: toggles alone vs in combination")
df = data.load_or_stop()
sweeps = data.sweeps_newest_first(df)
if not sweeps:
    st.info("No sweep runs yet. Run `make demo` or `make sweep SWEEP=harness/sweeps/cpu-ablation.yaml`.")
    st.stop()
wanted = st.query_params.get("sweep")
sweep = st.selectbox("sweep", sweeps, index=sweeps.index(wanted) if wanted in sweeps else 0)
st.query_params["sweep"] = sweep
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
    cell = view[(view["workload"] == wl) & (view["size"] == size) & (view["device"] == device)]
    absent = cell[cell["config"].str.startswith("+") & (cell["status"] != "finished")]
    have = set(a.loc[a["add_one_in"].notna(), "toggle"]) if "add_one_in" in a else set()
    for config, g in absent.groupby("config"):  # a toggle with no bar says why
        if config[1:].split("=")[0] not in have:
            st.caption(f"{config}: no bar, {g['status'].iloc[0]}: {g['reason'].fillna('').iloc[0] or 'no reason recorded'}")
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
med = view[cols].groupby(["workload", "size", "config", "status"], as_index=False, sort=False).median(numeric_only=True)
med = med.dropna(axis=1, how="all")  # a column with no value anywhere (mfu_vendor_pct on a CPU) is left out
med = med.assign(_first=med["config"] != "baseline").sort_values(["workload", "size", "_first", "config"])
med = med.drop(columns="_first")  # the baseline first, then the configurations by name
st.dataframe(med, hide_index=True, width="stretch")
described = {"mfu_measured_pct": "mfu_measured_pct against this machine's measured matmul peak at the run's dtype (fp32's where that is faster)",
             "mfu_vendor_pct": "mfu_vendor_pct against the vendor's datasheet peak (known devices only)"}
st.caption("MFU = model FLOPs per sample x samples/s over the device peak (PaLM, appendix B): "
           + "; ".join(v for k, v in described.items() if k in med) + ".")
