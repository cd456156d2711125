"""Parallelism: what each strategy (ddp, zero1, fsdp, tensor / sequence parallel, dp x tp)
costs in time, collectives and memory, measured beside the theory."""
from __future__ import annotations

import streamlit as st

from portal import charts, data
from results.report import COLLECTIVES, verdict_line

st.title("Parallelism: strategies, collectives and memory")
df = data.load_or_stop()
table_all = data.parallel(df)
if table_all.empty:
    st.info("No multi-rank strategy runs yet. Run `make parallel` (ddp, zero1, fsdp, tensor and sequence "
            "parallel under mpiexec).")
    st.stop()
sweeps = sorted({s for s in df.loc[df["config"].astype(str).str.contains("@"), "sweep"].dropna() if s},
                reverse=True)
sweep = st.selectbox("sweep", sweeps) if sweeps else None
view = df[df["sweep"] == sweep] if sweep else df
table = data.parallel(view)
st.caption("Every strategy trains the same global batch as the one-rank baseline (its correctness-gate "
           "reference: the first losses must agree). Speedup = median one-rank step / median strategy step "
           "(95% bootstrap CI). Collective sizes S per training step are measured on the real calls "
           "(torch's CommDebugMode) and set beside the analytic volume for the strategy; on the wire each "
           "rank moves S x 2(n-1)/n for an all-reduce, S x (n-1)/n for all-gather and reduce-scatter "
           "(nccl-tests' bus bandwidth convention). Memory: this rank's parameters, gradients and optimizer "
           "state (local shards); peak = live tensor bytes at their peak (CPU: the profiler's memory timeline; "
           "GPU: the CUDA allocator's peak), peak_rss = the process's peak resident set (VmHWM, libraries "
           "included).")
for (wl, size, device), t in table.groupby(["workload", "size", "device"]):
    st.subheader(f"{wl} {size} ({device})")
    cols = [c for c in ("config", "runs", "median_step_ms", "speedup", "ci_lo", "ci_hi", "bytes_match_theory",
                        *[f"{k}_{s}" for k in COLLECTIVES for s in ("mib", "theory_mib")],
                        "model_state_mib_per_rank", "optimizer_mib_per_rank", "peak_mib_per_rank",
                        "peak_rss_mib_per_rank", "claim")
            if c in t and t[c].notna().any()]
    st.dataframe(t[cols], hide_index=True, width="stretch")
    st.text("\n".join(verdict_line(r) for _, r in t.iterrows()))  # the verdicts as text (readable, searchable)
    c1, c2 = st.columns(2)
    c1.plotly_chart(charts.collective_bars(t, COLLECTIVES, "collectives per step: measured vs theory"),
                    width="stretch")
    c2.plotly_chart(charts.memory_bars(t, "model state per rank"), width="stretch")
