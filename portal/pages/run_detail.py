"""Run detail: curves, step-time distribution, MLLOG timeline, environment, artifacts."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from portal import charts, data

st.title("Run detail")
df = data.load_or_stop()
newest = df.sort_values("started", ascending=False)
ids = list(newest["run_id"])
labels = dict(zip(ids, data.run_labels(newest)))
wanted = st.query_params.get("run")  # a shared link (Runs rows and other pages link here with ?run=)
run_id = st.selectbox("run", ids, index=ids.index(wanted) if wanted in ids else 0, format_func=labels.get)
st.query_params["run"] = run_id  # the address bar now reproduces this view
row = df[df["run_id"] == run_id].iloc[0]
cols = st.columns(4)
cols[0].metric("status", str(row["status"]))
for col, key, label, fmt, scale in ((cols[1], "median_step_s", "median step (ms)", "{:.1f}", 1000),
                                    (cols[2], "samples_per_s", "samples/s", "{:.1f}", 1),
                                    (cols[3], "quality", "quality", "{:.4f}", 1)):
    v = row.get(key)
    n_eval, n_val = row.get("eval_samples"), row.get("n_val")
    if key == "quality" and not pd.isna(n_eval) and not pd.isna(n_val) and n_eval < n_val:
        label = f"quality ({int(n_eval)} of {int(n_val)} val samples)"  # a throughput run's spot check
    col.metric(label, "-" if pd.isna(v) else fmt.format(scale * v))
if isinstance(row.get("reason"), str) and row["reason"]:
    st.caption("reason")
    st.code(row["reason"], language=None)  # user/exception text: shown verbatim, never as markdown

if not pd.isna(row.get("roofline_intensity", float("nan"))):
    st.page_link("pages/roofline.py", label="this run on the device's roofline", icon="📈",
                 query_params={"run": run_id})
run_dir = Path(str(row.get("record_dir", "")))
if not run_dir.is_dir():
    st.warning(f"The record folder of this run ({run_dir}) is not readable from here; only store data is shown.")
    st.stop()
record = data.run_record(run_dir)
if record["problem"]:
    st.warning(f"This record is malformed ({record['problem']}): only what could be read is shown.")
metrics, summary, events = record["metrics"], record["summary"], record["events"]
steps = metrics[metrics["kind"] == "step"] if not metrics.empty else pd.DataFrame()
evals = metrics[metrics["kind"] == "eval"] if not metrics.empty else pd.DataFrame()
if steps.empty:
    st.info(f"No training steps recorded ({row['status']}): the record's reason, environment and files follow.")
else:
    c1, c2 = st.columns(2)
    c1.plotly_chart(px.line(steps, x="step", y="loss", title="training loss vs step"), width="stretch")
    c2.plotly_chart(px.line(steps, x="t", y="loss", title="training loss vs time (s)"), width="stretch")
if not evals.empty:
    st.plotly_chart(charts.validation_curve(evals, summary), width="stretch")
if not steps.empty:
    hist = steps.assign(step_ms=1000 * steps["step_s"])
    st.plotly_chart(px.histogram(hist, x="step_ms", color="phase", nbins=40, barmode="overlay",
                                 title="step time distribution (ms; warm-up marked)"), width="stretch")
if events:
    st.plotly_chart(charts.mllog_timeline(pd.DataFrame(events)), width="stretch")
with st.expander("configuration and toggles", expanded=True):
    cfg = record["config"]
    st.json({k: v for k, v in cfg.items() if k in ("workload", "size", "mode", "device", "toggles", "parallel",
                                                    "steps", "warmup_steps", "batch_size", "seed", "sweep",
                                                    "repeat")})
with st.expander("environment"):
    st.json(record["env"])
with st.expander("artifacts", expanded=True):
    files = [p for p in sorted(run_dir.iterdir()) if p.is_file()]
    st.dataframe(pd.DataFrame([{"file": p.name, "bytes": p.stat().st_size} for p in files]), hide_index=True)
    for p in files:  # the record's own files, downloadable as they are
        st.download_button(f"download {p.name}", p.read_bytes(), file_name=p.name, key=f"dl-{p.name}")
