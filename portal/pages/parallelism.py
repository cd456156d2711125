"""Parallelism: what each strategy (ddp, zero1, zero2, fsdp, tensor / sequence / context parallel,
their compositions, recomputation) costs in time, collectives and memory, beside the theory."""
from __future__ import annotations

import streamlit as st

from portal import charts, data
from results.analysis import recompute_tradeoff, scaling
from results.record.paths import results_root
from results.analysis.speedups import COLLECTIVES, verdict_line


def show_weak_scaling() -> None:
    weak = data.weak_scaling(str(results_root()))
    if weak.empty:
        st.caption("Weak scaling: no campaign yet (`make weak WORKLOAD=cosmoflow INSTANCES=2`: M concurrent "
                   "instances, each trained to target; models/min = M / TTTa).")
    else:
        st.caption("Weak scaling (MLPerf HPC): M instances train concurrently, each to its target; TTTa = latest "
                   "run_stop - earliest run_start, models/min = M / TTTa.")
        st.dataframe(weak, hide_index=True, width="stretch")


st.title("Parallelism: strategies, collectives and memory")
df = data.load_or_stop()
table_all = data.parallel(df)
if table_all.empty:
    st.info("No multi-rank strategy runs yet. Run `make parallel` (ddp, zero1, fsdp, tensor and sequence "
            "parallel under mpiexec).")
    show_weak_scaling()
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
                        "model_state_mib_per_rank", "optimizer_mib_per_rank", "activation_mib_per_block",
                        "peak_mib_per_rank",
                        "peak_rss_mib_per_rank", "claim")
            if c in t and t[c].notna().any()]
    st.dataframe(t[cols], hide_index=True, width="stretch")
    st.text("\n".join(verdict_line(r) for _, r in t.iterrows()))  # the verdicts as text (readable, searchable)
    c1, c2 = st.columns(2)
    c1.plotly_chart(charts.collective_bars(t, COLLECTIVES, "collectives per step: measured vs theory"),
                    width="stretch")
    c2.plotly_chart(charts.memory_bars(t, "model state per rank"), width="stretch")

st.subheader("activation recomputation: memory saved vs time added")
trade = data.recompute_tradeoff(view)
if trade.empty:
    st.caption("No recomputing cell with its counterpart yet: run e.g. `make parallel "
               "SWEEP_PARALLEL=harness/sweeps/parallel-cpu-long.yaml` (parallel.recompute=full and selective "
               "beside the same layout without it).")
else:
    st.caption("Each recomputing cell against the same layout without recomputation (the one-rank baseline for "
               "@1 cells). Activations per block: the bytes one forward keeps per block for backward, measured on "
               "the profiler's allocations (full recomputation keeps the block's output; selective keeps matmul, "
               "attention and convolution outputs). Step time: the interleaved ratio when the cell was measured "
               "against its counterpart in one process, else the ratio of median steps.")
    st.plotly_chart(charts.recompute_tradeoff(trade), width="stretch")
    st.dataframe(trade, hide_index=True, width="stretch")
    st.text("\n".join(recompute_tradeoff.line(r) for _, r in trade.iterrows()))
st.caption("Context parallel (cpN): each rank holds seq_len/N tokens of every sequence (chunks i and 2N-1-i); "
           "per layer K and V are all-gathered (forward) and their gradients reduce-scattered (backward): "
           "the all_gather and reduce_scatter columns above, beside their analytic volume "
           "2 x layers x batch x seq_len x hidden x bytes each.")

st.subheader("scaling")
strong = scaling.strong(table)
if strong.empty:
    st.caption("Strong scaling needs parallel cells with a finished one-rank baseline in the same sweep.")
for (wl, size, device), t in strong.groupby(["workload", "size", "device"]):
    st.plotly_chart(charts.scaling_chart(t, f"{wl} {size} ({device}): strong scaling"), width="stretch")
    st.caption("Efficiency = speedup over one rank / ranks (1.0 = perfect), its 95% CI the speedup's divided by "
               "the ranks. Every cell trains the one-rank global batch, split over the ranks.")
    st.dataframe(t.drop(columns=["workload", "size", "device"]), hide_index=True, width="stretch", column_config={
        "median_step_ms": st.column_config.NumberColumn("median step (ms)", format="%.1f"),
        **{c: st.column_config.NumberColumn(c, format="%.2f") for c in
           ("speedup", "ci_lo", "ci_hi", "efficiency", "eff_lo", "eff_hi")}})
show_weak_scaling()

st.subheader("communication time predicted from the collectives benchmark")
try:
    comm = data.comm_records(data.tracking_uri())
except Exception:  # noqa: BLE001 - the strategies above stand without it
    comm = None
pred = data.comm_predictions(view, comm) if comm is not None and not comm.empty else None
if pred is None or pred.empty:
    st.caption("Run `make comm RANKS=n` on the machine and rank count of these runs: each run's collectives per "
               "step (calls and bytes, above) then turn into a predicted communication time per step.")
else:
    st.caption("Predicted time = for each collective, calls per step x the benchmarked time of one call of "
               "its size (log-log interpolation between measured sizes; in-place where measured), on the same "
               "host, rank count and backend. Set beside the median step time, and beside the communication "
               "share the step's profile measured where the run was profiled.")
    st.dataframe(pred.drop(columns=["run_id", "bench"]), hide_index=True, width="stretch")
    st.text("\n".join(
        f"{r.config}: predicted communication {r.predicted_comm_ms:.1f} ms of a {r.median_step_ms:.1f} ms step "
        f"({100 * r.predicted_comm_share:.0f}%)" + (f"; profiled {100 * r.profiled_comm_share:.0f}%"
                                                    if r.profiled_comm_share == r.profiled_comm_share
                                                    and r.profiled_comm_share is not None else "")
        for r in pred.itertuples() if r.predicted_comm_ms == r.predicted_comm_ms and r.predicted_comm_ms is not None))
