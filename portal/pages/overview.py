"""Overview: what each optimization buys, per workload and device, with 95% CIs."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from portal import charts, data

st.title("Overview: what each optimization buys")
# the first page: it reads the sweep table, then only the runs of the sweeps it shows (a store of
# 100,000 runs renders as fast as one of 100; portal/perf.py and harness/bench/store_scale.py time it)
stored = data.sweeps_or_stop()
sweeps = data.sweep_order(stored)
if not sweeps:
    st.info("No sweep runs yet: speedups need a baseline measured in the same sweep. Run `make demo`.")
    st.stop()
wanted = st.query_params.get("sweep")
sweep = st.selectbox("sweep", sweeps, index=sweeps.index(wanted) if wanted in sweeps else 0,
                     help="a sweep instance (name@start time): ablation sweeps newest first, then campaigns")
st.query_params["sweep"] = sweep
view = data.sweep_runs(data.tracking_uri(), (sweep,))
table = data.speedups(view)
repeats = data.repeat_speedups(view)
st.info(data.calibration_line(data.latest_calibration_runs(stored)))
st.caption("speedup = median(baseline step time) / median(configuration step time), on a log axis (0.5× as far "
           "below 1 as 2× above). Each point is the figure its verdict is on, with its 95% interval: interleaved "
           "(i ×P: both sides in one process, alternating blocks of steps, P processes combined), else paired by "
           "repeat, else the pooled bootstrap over runs and steps; the verdict in the table is on the same figure: "
           "the paired one where there is one, else the pooled one. \"faster\" or \"slower\" needs an interval "
           "that excludes 1 and a change of at least 3%; \"faster in every process\" means each process's own "
           "interval said so while their sizes differ (the combined interval holds 1: the size is uncertain). Small dots are single repeats. "
           "Failed, unsupported and fail_accuracy configurations have no point; their reasons are listed below. "
           "Stability: 'disturbed' names why a configuration's numbers can't be trusted (other processes above "
           "10% of the CPUs, steal above 5%, repeat medians more than 1.10x apart, or an interleaved speedup that "
           "differs between processes); 'noisy' means step times vary more than 10% within a run with nothing else "
           "wrong: measured, and its interval says how well. The A/A line above is the latest calibration: how often "
           "the verdict rule called a difference between the baseline and itself on this machine.")
for (wl, size, device), t in table.groupby(["workload", "size", "device"]):
    st.subheader(f"{wl} / {size} on {device}")
    if t["speedup"].notna().any():
        st.plotly_chart(charts.speedup_chart(data.verdict_figures(t), repeats[(repeats["workload"] == wl) & (repeats["size"] == size)
                                                        & (repeats["device"] == device)], f"{wl} {size} ({device})"),
                        width="stretch")
    else:
        st.warning("No speedup to show: no configuration finished beside a finished baseline in this sweep. "
                   "What happened to each is listed below.")
    base_ms = t.loc[t["config"] == "baseline", "median_step_ms"]
    numbers = pd.DataFrame({
        "configuration": t["config"],
        "speedup [95% CI]": [charts.speedup_label(*r) if r[0] == r[0] else "-"
                             for r in zip(t["speedup"], t["ci_lo"], t["ci_hi"], t["verdict"])],
        "paired [95% CI]": [charts.paired_label(*r) for r in zip(t["paired_speedup"], t["paired_lo"], t["paired_hi"],
                                                                 t["pairs"], t["paired_method"], t["processes"])],
        "verdict": [data.verdict_text(r) or "-" for _, r in t.iterrows()], "median step (ms)": t["median_step_ms"].round(1),
        "baseline median step (ms)": round(float(base_ms.iloc[0]), 1) if len(base_ms) and base_ms.notna().all() else None,
        "runs": t["runs"], "status": t["status"],
        "stability": t["stability"].fillna("-") if "stability" in t else "-"})
    st.dataframe(numbers, hide_index=True, width="stretch")
    missing = t[t["speedup"].isna()]
    if len(missing):
        st.dataframe(missing[["config", "status", "reason"]], hide_index=True, width="stretch")
geo = data.geomeans(view)
if not geo.empty:
    st.subheader("Geomean across workloads")
    st.dataframe(geo, hide_index=True, width="stretch")
st.subheader("Time-to-train (MLPerf olympic score)")
campaigns = tuple(s for s in stored["sweep"] if s.startswith("ttt-"))
scores = data.ttt_scores(data.sweep_runs(data.tracking_uri(), campaigns)) if campaigns else pd.DataFrame()
if scores.empty:
    st.caption("No time-to-train campaigns yet: `make ttt WORKLOAD=cosmoflow RUNS=5`.")
else:
    st.caption("Per campaign: run_stop - run_start per run, fastest and slowest dropped, the rest averaged; "
               "one run that missed the target counts as the dropped slowest, two make it invalid.")
    st.dataframe(scores, hide_index=True, width="stretch")
