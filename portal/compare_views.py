"""The Compare page's three views (two sweep cells, two runs, two commits of a sweep), each a
function of the runs frame. Kept apart from the page so each stays readable."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from portal import data
from results.record import schema

# metric -> (label, higher is better); quality's direction comes from the record's summary
DELTAS = {"samples_per_s": ("samples/s", True), "data_wait_frac": ("data wait fraction", False)}


def _diff(a: dict, b: dict) -> pd.DataFrame:
    keys = sorted(set(a) | set(b))
    return pd.DataFrame([{"key": k, "A": str(a.get(k)), "B": str(b.get(k))} for k in keys if a.get(k) != b.get(k)])


def _record(row) -> dict:
    try:
        return schema.read_record(Path(str(row["record_dir"])))
    except (schema.RecordError, OSError):
        return {"config": {}, "env": {}, "summary": {}}


def _show_diff(title: str, frame: pd.DataFrame) -> None:
    st.subheader(title)
    if frame.empty:
        st.caption("identical")
    else:
        st.dataframe(frame, hide_index=True, width="stretch")


def _better(delta: float, higher_is_better: bool) -> str:
    if delta == 0:
        return "same"
    return "B better" if (delta > 0) == higher_is_better else "B worse"


def _step_row(a_runs: list[list[float]], b_runs: list[list[float]]) -> dict:
    c = data.compare_samples(a_runs, b_runs)
    med = lambda runs: 1000 * pd.Series([x for r in runs for x in r]).median()  # noqa: E731
    verdict = {"faster": "B faster", "slower": "B slower"}.get(c["verdict"], c["verdict"])
    return {"metric": "step time (B speedup over A)", "A": f"{med(a_runs):.2f} ms", "B": f"{med(b_runs):.2f} ms",
            "delta [95% CI]": f"{c['speedup']:.3f}x [{c['ci_lo']:.3f}, {c['ci_hi']:.3f}]", "verdict": verdict}


def sweep_cells(df: pd.DataFrame) -> None:
    """All repeats of one configuration against all repeats of another (default: a sweep's
    baseline against its first other configuration): the CI includes run-to-run variation."""
    sweeps = data.sweeps_newest_first(df)
    if not sweeps:
        st.info("No sweeps recorded yet. Run `make demo`.")
        return
    sweep = st.selectbox("sweep", sweeps, index=0)
    view = df[(df["sweep"] == sweep) & (df["status"] == "finished")]
    cells = list(dict.fromkeys(f"{w}/{s} {c}" for w, s, c in zip(view["workload"], view["size"], view["config"])))
    if len(cells) < 2:
        st.info("This sweep has fewer than two configurations with finished runs.")
        return
    base = next((i for i, c in enumerate(cells) if c.endswith(" baseline")), 0)
    a = st.selectbox("cell A (reference)", cells, index=base)
    same = [c for c in cells if c != a and c.split(" ")[0] == a.split(" ")[0]]
    b = st.selectbox("cell B", cells, index=cells.index(same[0]) if same else (1 if base == 0 else 0))
    runs = lambda cell: [r for r in (data.samples(d) for d in view[(view["workload"] + "/" + view["size"] + " "  # noqa: E731
                                                              + view["config"]) == cell]["record_dir"]) if r]
    ra, rb = runs(a), runs(b)
    if a == b:
        st.warning("A and B are the same cell: the speedup is 1 by construction.")
    if ra and rb:
        st.dataframe(pd.DataFrame([_step_row(ra, rb)]), hide_index=True, width="stretch")
        st.caption(f"{len(ra)} run(s) of A, {len(rb)} of B: the CI resamples runs, then steps within them, so it "
                   "includes run-to-run variation" + ("" if min(len(ra), len(rb)) > 1 else
                                                      "; with one run on a side it cannot, and is too narrow"))


def two_runs(df: pd.DataFrame) -> None:
    """Two single runs. Warns on pairs that mean nothing; says for each delta which way is
    better; shows an unsupported or failed run's status and reason instead of empty figures."""
    newest = df.sort_values("started", ascending=False)
    ids = list(newest["run_id"])
    labels = dict(zip(ids, data.run_labels(newest)))
    b_id = st.selectbox("run B", ids, index=ids.index(st.query_params["b"]) if st.query_params.get("b") in ids else 0,
                        format_func=labels.get)
    b = df[df["run_id"] == b_id].iloc[0]
    peers = [i for i in ids if i != b_id and (newest.set_index("run_id").loc[i, ["workload", "size"]]
                                              == b[["workload", "size"]]).all()]
    default_a = st.query_params.get("a") if st.query_params.get("a") in ids else (peers[0] if peers else ids[0])
    a_id = st.selectbox("run A (reference)", ids, index=ids.index(default_a), format_func=labels.get)
    st.query_params.update(view="runs", a=a_id, b=b_id)
    a = df[df["run_id"] == a_id].iloc[0]
    if a_id == b_id:
        st.warning("A and B are the same run.")
    elif (a["workload"], a["size"]) != (b["workload"], b["size"]):
        st.warning(f"A is {a['workload']}/{a['size']} and B is {b['workload']}/{b['size']}: their quality and "
                   "throughput measure different things, so the deltas below mean little.")
    ra, rb = _record(a), _record(b)
    _show_diff("config diff", _diff(schema.flatten(ra["config"]), schema.flatten(rb["config"])))
    keep = lambda e: {k: v for k, v in schema.flatten(e).items() if k not in ("command", "cwd")}  # noqa: E731
    _show_diff("environment diff", _diff(keep(ra["env"]), keep(rb["env"])))
    st.subheader("metrics")
    for side, row in (("A", a), ("B", b)):
        if row["status"] != "finished":  # its status and reason instead of an empty grid
            st.warning(f"Run {side} is {row['status']}; its reason:")
            st.code(str(row.get("reason") or "no reason recorded"), language=None)  # verbatim, never markdown
    rows = []
    sa, sb = data.samples(str(a["record_dir"])), data.samples(str(b["record_dir"]))
    if sa and sb:
        rows.append(_step_row([sa], [sb]))
    up = bool((rb.get("summary") or {}).get("higher_is_better", False))
    for key, (label, higher) in {"quality": ("quality", up), **DELTAS}.items():
        if key in df and not (pd.isna(a.get(key)) or pd.isna(b.get(key))):
            d = b[key] - a[key]
            rows.append({"metric": label, "A": f"{a[key]:.4g}", "B": f"{b[key]:.4g}", "delta [95% CI]": f"{d:+.4g}",
                         "verdict": f"{_better(d, higher)} ({'higher' if higher else 'lower'} is better; one value "
                                    "each, no CI)"})
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        st.caption("One run each: the step-time CI covers step-to-step variation within the two runs only, not "
                   "run-to-run variation; compare sweep cells (all repeats) for a verdict that does.")


def two_commits(df: pd.DataFrame) -> None:
    names = sorted(n for n in df["sweep_name"].unique() if n)
    if not names:
        st.info("No sweeps recorded yet. Run `make demo`.")
        return
    name = st.selectbox("sweep", names)
    view = df[df["sweep_name"] == name]
    shas = sorted(view["git_sha"].dropna().unique())
    if len(shas) < 2:
        st.info("This sweep was run at one git commit only; run it again after a change to compare.")
        return
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
