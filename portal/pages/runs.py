"""Runs: every recorded run, newest first, filterable; failed / killed / unsupported runs with
their reasons; each row links to its Run detail."""
from __future__ import annotations

import streamlit as st

from portal import data

st.title("Runs")
df = data.load_or_stop()

FILTERS = {"workload": "workload", "size": "size", "device": "device", "status": "status", "config": "configuration",
           "sweep_name": "sweep"}
cols = st.columns(len(FILTERS))
view = df
for col, (key, label) in zip(cols, FILTERS.items()):
    options = sorted(df[key].fillna("").astype(str).unique())
    picked = col.multiselect(label, options, default=[], placeholder="all", key=f"filter-{key}")
    if picked:  # nothing picked = no filter on this column
        view = view[view[key].fillna("").astype(str).isin(picked)]
view = view.sort_values("started", ascending=False).assign(
    detail="run_detail?run=" + view["run_id"].astype(str),
    median_step_ms=1000 * view["median_step_s"] if "median_step_s" in view else float("nan"))
COLUMNS = {  # column -> (header, config)
    "started": ("started (UTC)", st.column_config.DatetimeColumn("started (UTC)", format="YYYY-MM-DD HH:mm:ss")),
    "detail": ("run", st.column_config.LinkColumn("run", display_text=r"run=(.*)$", width="medium",
                                                  help="opens the run's detail page")),
    "workload": ("workload", None), "size": ("size", None), "device": ("device", None),
    "config": ("configuration", None), "status": ("status", None),
    "reason": ("reason", st.column_config.TextColumn("reason", width="large")),
    "median_step_ms": ("median step (ms)", st.column_config.NumberColumn("median step (ms)", format="%.1f")),
    "samples_per_s": ("samples/s", st.column_config.NumberColumn("samples/s", format="%.1f")),
    "quality": ("quality", None), "git_sha": ("git sha", None), "host": ("host", None),
    "slurm_job_id": ("Slurm job", None), "sweep": ("sweep", None),
}
shown = [c for c in COLUMNS if c in view.columns]
st.caption(f"{len(view)} of {len(df)} runs, newest first" + ("" if len(view) else ": no run matches every filter"))
st.dataframe(view[shown], hide_index=True, width="stretch",
             column_config={c: (cfg or COLUMNS[c][0]) for c, (_, cfg) in COLUMNS.items() if c in shown})
