"""Run detail: curves, step-time distribution, MLLOG timeline, environment, artifacts."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from portal import data
from results import schema

st.title("Run detail")
df = data.load_or_stop()
ids = list(df.sort_values("started", ascending=False)["run_id"])
run_id = st.selectbox("run", ids, index=0)
row = df[df["run_id"] == run_id].iloc[0]
cols = st.columns(4)
cols[0].metric("status", str(row["status"]))
for col, key, fmt in ((cols[1], "median_step_s", "{:.1f} ms"), (cols[2], "samples_per_s", "{:.1f}"),
                      (cols[3], "quality", "{:.4f}")):
    v = row.get(key)
    col.metric(key.replace("_", " "), "-" if pd.isna(v) else fmt.format(1000 * v if key == "median_step_s" else v))
if isinstance(row.get("reason"), str) and row["reason"]:
    st.caption("reason")
    st.code(row["reason"], language=None)  # user/exception text: shown verbatim, never as markdown

if not pd.isna(row.get("roofline_intensity", float("nan"))):
    st.page_link("pages/roofline.py", label="this run on the device's roofline", icon="📈",
                 query_params={"run": run_id})
run_dir = Path(str(row.get("record_dir", "")))
try:
    metrics = pd.DataFrame(schema.read_metrics(run_dir)) if run_dir.is_dir() else pd.DataFrame()
except OSError:
    metrics = pd.DataFrame()
if metrics.empty:
    st.warning("The record folder of this run is not readable from here; only store data is shown.")
    st.stop()
steps = metrics[metrics["kind"] == "step"]
evals = metrics[metrics["kind"] == "eval"]
c1, c2 = st.columns(2)
c1.plotly_chart(px.line(steps, x="step", y="loss", title="training loss vs step"), width="stretch")
c2.plotly_chart(px.line(steps, x="t", y="loss", title="training loss vs time (s)"), width="stretch")
if not evals.empty:
    st.plotly_chart(px.line(evals, x="step", y="quality", markers=True, title="validation quality vs step"),
                    width="stretch")
hist = steps.assign(step_ms=1000 * steps["step_s"])
st.plotly_chart(px.histogram(hist, x="step_ms", color="phase", nbins=40, barmode="overlay",
                             title="step time distribution (warm-up marked)"), width="stretch")
log = run_dir / schema.MLPERF_LOG
events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in log.read_text().splitlines()
          if ":::MLLOG " in line] if log.exists() else []
if events:
    ev = pd.DataFrame(events)
    ev["time_s"] = (ev["time_ms"] - ev["time_ms"].min()) / 1000
    st.plotly_chart(px.scatter(ev, x="time_s", y="key", color="event_type", title="MLLOG events"),
                    width="stretch")
with st.expander("environment"):
    env = json.loads((run_dir / schema.ENV).read_text()) if (run_dir / schema.ENV).exists() else {}
    st.json(env)
with st.expander("artifacts"):
    st.dataframe(pd.DataFrame([{"file": p.name, "bytes": p.stat().st_size} for p in sorted(run_dir.iterdir())]),
                 hide_index=True)
