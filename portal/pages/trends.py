"""Trends: each workload × configuration's step time and speedup across commits (the git sha is
in every record), with a marker where asv's regression rule fires against the previous commit.
`python -m harness compare BASE HEAD` prints the same verdicts in the terminal."""
from __future__ import annotations

import streamlit as st

from portal import charts, data
from results.analysis import trends

st.title("Trends across commits")
df = data.load_or_stop()
h = data.history(df)
if h.empty:
    st.info("No finished run records a git sha: runs made outside a git checkout cannot be placed on a commit.")
    st.stop()
h = h.assign(series=h["workload"] + "/" + h["size"] + "/" + h["device"], commit=h["git_sha"].str[:10])
st.caption(f"Rule (asv compare): a change is flagged when a commit's median step time differs from the previous "
           f"commit's by more than the threshold either way ({trends.RATIO:.2f}×, or the series' larger drift measured "
           "between reruns of one commit, as Conbench judges against earlier noise), a Mann–Whitney U test over the steps gives "
           f"p < {trends.P_MAX}, and the runs-then-steps bootstrap {trends.LEVEL:.0%} interval of the ratio excludes 1 "
           "(so a rerun on a busier machine is not a regression). Other rules in the field: PyTorch's HUD flags 2+ "
           "consecutive breaches; Hunter/Otava find change points with E-divisive means.")

flagged = h[h["verdict"].isin([trends.REGRESSION, trends.IMPROVEMENT])]
regressions = flagged[flagged["verdict"] == trends.REGRESSION]
if len(regressions):
    st.error(f"{len(regressions)} regression(s): " + "; ".join(
        f"{r.series} {r.config} at {r.commit} ({r.vs_previous:.2f}× the previous commit's step time)"
        for r in regressions.itertuples()))
else:
    st.success(f"No regression across {h['git_sha'].nunique()} commit(s) and {h[['series', 'config']].drop_duplicates().shape[0]} series.")

series = sorted(h["series"].unique())
wanted = st.query_params.get("series")
pick = st.selectbox("workload / size / device", series, index=series.index(wanted) if wanted in series else 0)
st.query_params["series"] = pick
s = h[h["series"] == pick]
configs = list(dict.fromkeys(["baseline", *s["config"]]))
configs = [c for c in configs if c in set(s["config"])]
shown = st.multiselect("configurations", configs, default=configs[:4], placeholder="all")
s = s[s["config"].isin(shown or configs)]
if s["git_sha"].nunique() < 2:
    st.info(f"{pick}: every run is from one commit ({s['commit'].iloc[0]}); a trend needs runs from 2 or more commits.")
st.plotly_chart(charts.trend_chart(s, f"{pick}: median step time per commit"), width="stretch")

table = s.assign(first_run=s["first_run"].dt.strftime("%Y-%m-%d %H:%M"))[
    ["commit", "first_run", "config", "runs", "median_ms", "speedup", "vs_previous", "threshold", "verdict"]]
st.dataframe(table, hide_index=True, width="stretch", column_config={
    "commit": "commit", "first_run": "first measured (UTC)", "config": "configuration", "runs": "runs",
    "median_ms": st.column_config.NumberColumn("median step (ms)", format="%.2f"),
    "speedup": st.column_config.NumberColumn("speedup over this commit's baseline", format="%.2f×"),
    "vs_previous": st.column_config.NumberColumn("step time vs previous commit", format="%.3f×"),
    "threshold": st.column_config.NumberColumn("threshold", format="%.2f×"),
    "verdict": "verdict vs previous commit"})
