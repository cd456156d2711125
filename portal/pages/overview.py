"""Overview: what each optimization buys, per workload and device, with 95% CIs."""
from __future__ import annotations

import streamlit as st

from portal import charts, data

st.title("Overview: what each optimization buys")
df = data.load_or_stop()
sweeps = sorted(df["sweep"].dropna().unique(), reverse=True)
sweeps = [s for s in sweeps if s]
if not sweeps:
    st.info("No sweep runs yet: speedups need a baseline measured in the same sweep. Run `make demo`.")
    st.stop()
sweep = st.selectbox("sweep", sweeps, help="a sweep instance: name@start time")
view = df[df["sweep"] == sweep]
table = data.speedups(view)
st.caption("speedup = median(baseline step time) / median(configuration step time); error bars are "
           "bootstrap 95% CIs over runs and steps. Below 1.0 means slower. Failed, unsupported and "
           "fail_accuracy configurations have no bar; their reasons are listed below the chart.")
for (wl, size, device), t in table.groupby(["workload", "size", "device"]):
    st.subheader(f"{wl} / {size} on {device}")
    if t["speedup"].notna().any():
        st.plotly_chart(charts.speedup_bars(t, f"{wl} {size} ({device})"), width="stretch")
    else:
        st.warning("No speedup to show: no configuration finished beside a finished baseline in this sweep. "
                   "What happened to each is listed below.")
    missing = t[t["speedup"].isna()]
    if len(missing):
        st.dataframe(missing[["config", "status", "reason"]], hide_index=True, width="stretch")
geo = data.geomeans(view)
if not geo.empty:
    st.subheader("Geomean across workloads")
    st.dataframe(geo, hide_index=True, width="stretch")
st.subheader("Time-to-train (MLPerf olympic score)")
scores = data.ttt_scores(df)
if scores.empty:
    st.caption("No time-to-train campaigns yet: `make ttt WORKLOAD=cosmoflow RUNS=5`.")
else:
    st.caption("Per campaign: run_stop - run_start per run, fastest and slowest dropped, the rest averaged; "
               "one run that missed the target counts as the dropped slowest, two make it invalid.")
    st.dataframe(scores, hide_index=True, width="stretch")
