"""Runs: every recorded run, filterable; failed / killed / unsupported runs with reasons."""
from __future__ import annotations

import streamlit as st

from portal import data

st.title("Runs")
df = data.load_or_stop()

FILTERS = ("workload", "size", "device", "status", "config", "sweep_name")
cols = st.columns(len(FILTERS))
view = df
for col, key in zip(cols, FILTERS):
    options = sorted(df[key].fillna("").astype(str).unique())
    picked = col.multiselect(key, options, default=options, key=f"filter-{key}")
    view = view[view[key].fillna("").astype(str).isin(picked)]
shown = [c for c in ("started", "run_id", "workload", "size", "device", "config", "status", "reason",
                     "median_step_s", "samples_per_s", "quality", "git_sha", "host", "slurm_job_id", "sweep")
         if c in view.columns]
st.caption(f"{len(view)} of {len(df)} runs")
st.dataframe(view[shown], hide_index=True, width="stretch")
