"""Runs: every recorded run, filterable; failed / killed / unsupported runs with reasons."""
from __future__ import annotations

import streamlit as st

from portal import data

st.title("Runs")
data.refresh_button()
df = data.runs(data.tracking_uri())
if df.empty:
    data.empty_state()
    st.stop()

cols = st.columns(3)
pick = {}
for col, key in zip(cols, ("workload", "status", "device")):
    options = sorted(df[key].dropna().astype(str).unique())
    pick[key] = col.multiselect(key, options, default=options)
view = df[df["workload"].astype(str).isin(pick["workload"]) & df["status"].astype(str).isin(pick["status"])
          & df["device"].astype(str).isin(pick["device"])]
shown = [c for c in ("started", "run_id", "workload", "size", "device", "toggles_on", "status", "reason",
                     "median_step_s", "samples_per_s", "quality", "git_sha", "host", "slurm_job_id", "sweep")
         if c in view.columns]
st.caption(f"{len(view)} of {len(df)} runs")
st.dataframe(view[shown], hide_index=True, use_container_width=True)
