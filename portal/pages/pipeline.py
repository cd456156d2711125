"""Pipeline: the bubble of every pipeline run against (p-1)/(m+p-1), and the schedule of any
one run drawn as it ran (stage x time, forward and backward per microbatch, idle in grey)."""
from __future__ import annotations

import streamlit as st

from portal import charts, data
from results.analysis import bubble as pipe

st.title("Pipeline: schedules and their bubble")
df = data.load_or_stop()
table = data.pipeline_runs(df)
if table.empty:
    st.info("No pipeline runs yet. Run e.g. `mpiexec -n 2 .venv/bin/python -m harness run lm --set parallel.pp=2 "
            "--set parallel.microbatches=4`, or `make parallel` (its sweep has pipeline cells).")
    st.stop()
st.caption("Bubble = 1 - busy / window per rank, averaged over ranks and the timed steps; the window is the "
           "pipeline's makespan (first microbatch forward to last backward, all stages), busy the rank's forward, "
           "backward and loss time. Theory with equal stages and free sends: (p-1)/(m+p-1), "
           "(p-1)/(v*m+p-1) interleaved. Predicted: the same schedule with each stage's median measured times "
           "(the first stage holds the embedding, the last the head and loss). Replayed: each step's own events, "
           "every duration as measured, sends free; what the measured window has beyond the replay is send/recv "
           "and the schedule's overhead.")
for (wl, size, device), t in table.groupby(["workload", "size", "device"]):
    st.subheader(f"{wl} {size} ({device})")
    st.plotly_chart(charts.bubble_curve(t, "bubble vs microbatches: measured, predicted, theory"), width="stretch")
    st.dataframe(t.drop(columns=["record_dir", "workload", "size", "device"]), hide_index=True, width="stretch")
    st.text("\n".join(pipe.verdict(r) for _, r in t.iterrows()))

st.subheader("timeline of one run")
choice = st.selectbox("pipeline run", table["run_id"].tolist(),
                      format_func=lambda rid: f"{rid}  ({table.set_index('run_id').loc[rid, 'config']})")
rec = data.pipeline_record(str(table.set_index("run_id").loc[choice, "record_dir"]))
if not rec:
    st.warning("The record folder of this run is not readable from here.")
    st.stop()
rows = pipe.timeline(rec)
st.plotly_chart(charts.pipeline_timeline(rows, rec["stages"], f"{rec['schedule']}, {rec['stages']} stages, "
                                         f"{rec['microbatches']} microbatches, split {rec['split']} "
                                         f"(the step with the median window)"), width="stretch")
st.text(f"{len(rows)} events; window {1000 * rec['window_s']:.1f} ms (median step); bubble "
        f"{rec['bubble_measured']:.3f} measured, {rec['bubble_theory']:.3f} theory")
