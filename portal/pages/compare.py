"""Compare: two runs, or two git commits of the same sweep: config and environment diffs,
metric deltas with CIs, and a plain verdict per metric."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from portal import data
from results import schema


def _diff(a: dict, b: dict) -> pd.DataFrame:
    keys = sorted(set(a) | set(b))
    return pd.DataFrame([{"key": k, "A": str(a.get(k)), "B": str(b.get(k))} for k in keys if a.get(k) != b.get(k)])


def _record(row) -> dict:
    d = Path(str(row["record_dir"]))
    try:
        return schema.read_record(d)
    except (schema.RecordError, OSError):
        return {"config": {}, "env": {}}


st.title("Compare")
df = data.load_or_stop()
mode = st.radio("compare", ["two runs", "two commits of a sweep"], horizontal=True)
if mode == "two runs":
    ids = list(df.sort_values("started", ascending=False)["run_id"])
    a_id = st.selectbox("run A (reference)", ids, index=min(1, len(ids) - 1))
    b_id = st.selectbox("run B", ids, index=0)
    a, b = df[df["run_id"] == a_id].iloc[0], df[df["run_id"] == b_id].iloc[0]
    ra, rb = _record(a), _record(b)
    st.subheader("config diff")
    cd = _diff(schema.flatten(ra["config"]), schema.flatten(rb["config"]))
    st.dataframe(cd, hide_index=True, width="stretch") if not cd.empty else st.caption("identical")
    st.subheader("environment diff")
    keep = lambda e: {k: v for k, v in schema.flatten(e).items() if k not in ("command", "cwd")}  # noqa: E731
    ed = _diff(keep(ra["env"]), keep(rb["env"]))
    st.dataframe(ed, hide_index=True, width="stretch") if not ed.empty else st.caption("identical")
    st.subheader("metrics")
    rows = []
    sa, sb = data.samples(str(a["record_dir"])), data.samples(str(b["record_dir"]))
    if sa and sb:
        c = data.compare_samples([sa], [sb])
        rows.append({"metric": "step time (B speedup over A)", "A": f"{1000 * pd.Series(sa).median():.2f} ms",
                     "B": f"{1000 * pd.Series(sb).median():.2f} ms",
                     "delta [95% CI]": f"{c['speedup']:.3f}x [{c['ci_lo']:.3f}, {c['ci_hi']:.3f}]",
                     "verdict": c["verdict"]})
    for key in ("quality", "samples_per_s", "data_wait_frac"):
        if key in df and not (pd.isna(a.get(key)) or pd.isna(b.get(key))):
            rows.append({"metric": key, "A": f"{a[key]:.4g}", "B": f"{b[key]:.4g}",
                         "delta [95% CI]": f"{b[key] - a[key]:+.4g}", "verdict": "single value: no CI"})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
else:
    names = sorted(n for n in df["sweep_name"].unique() if n)
    if not names:
        st.info("No sweeps recorded yet. Run `make demo`.")
        st.stop()
    name = st.selectbox("sweep", names)
    view = df[df["sweep_name"] == name]
    shas = sorted(view["git_sha"].dropna().unique())
    if len(shas) < 2:
        st.info("This sweep was run at one git commit only; run it again after a change to compare.")
        st.stop()
    sha_a = st.selectbox("commit A (reference)", shas, index=0)
    sha_b = st.selectbox("commit B", shas, index=len(shas) - 1)
    rows = []
    for (wl, size, device, config), g in view.groupby(["workload", "size", "device", "config"]):
        ok = g[g["status"] == "finished"]
        ra = [r for r in (data.samples(d) for d in ok[ok["git_sha"] == sha_a]["record_dir"]) if r]
        rb = [r for r in (data.samples(d) for d in ok[ok["git_sha"] == sha_b]["record_dir"]) if r]
        if ra and rb:
            c = data.compare_samples(ra, rb)
            rows.append({"workload": wl, "size": size, "device": device, "config": config,
                         "B speedup over A": c["speedup"], "ci_lo": c["ci_lo"], "ci_hi": c["ci_hi"],
                         "verdict": c["verdict"]})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
