"""Plotly figures. Titles and labels use only our own names (workloads, toggles), never
user-provided strings: plotly text accepts a subset of HTML."""
from __future__ import annotations

import math

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from results.stats.estimators import T_LOG
from results.stats.interleaved import COMBINED

VERDICT_COLORS = {"faster": "#2e7d32", "slower": "#c62828", "within noise": "#9e9e9e", "baseline": "#1565c0"}


# "or in every process": results/stats/interleaved.direction, where the combined interval holds 1
VERDICT_NAMES = {"faster": "faster (CI above 1, or in every process)", "slower": "slower (CI below 1, or in every process)",
                 "within noise": "within noise (CI spans 1)", "baseline": "baseline (the reference)"}


def speedup_label(speedup: float, lo: float, hi: float, verdict: str) -> str:
    return "1.00× reference" if verdict == "baseline" else f"{speedup:.2f}× [{lo:.2f}, {hi:.2f}]"


def paired_label(speedup: float, lo: float, hi: float, pairs: float, method=None, processes=None) -> str:
    """The paired speedup (interleaved blocks, or per-repeat ratios: results/stats/paired.py) with
    its interval and its method's tag as in the CLI; '-' without pairs."""
    if speedup != speedup:
        return "-"
    ci = "no interval" if lo != lo else f"{lo:.2f}, {hi:.2f}"
    return f"{speedup:.2f}× [{ci}] n={int(pairs)}" + _method_tag(method, processes)


def _method_tag(method, processes) -> str:
    """As the CLI: ' (t)' for a t interval over few repeats, ' (i ×P)' for interleaved blocks in P processes."""
    if method == T_LOG:
        return " (t)"
    if method == COMBINED and processes == processes and processes:
        return f" (i ×{int(processes)})"
    return ""


def speedup_chart(t: pd.DataFrame, repeats: pd.DataFrame, title: str) -> go.Figure:
    """Speedup per configuration on a log axis centred on 1.0 (0.5× and 2× equally far from it):
    a point with its 95% CI, the figure printed beside it, colour by verdict with a legend, and
    one small dot per repeat so run-to-run noise shows. The baseline is the reference: 1.0, no CI."""
    t = t.dropna(subset=["speedup"])
    order = t["config"].tolist()
    fig = go.Figure()
    for verdict, g in t.groupby("verdict", sort=False):
        base = verdict == "baseline"
        # plain lists, not numpy arrays: the figure spec stays readable JSON (no base64 typed arrays)
        fig.add_scatter(x=g["config"].tolist(), y=[1.0] * len(g) if base else g["speedup"].tolist(), mode="markers+text",
                        name=VERDICT_NAMES.get(verdict, verdict), marker=dict(size=13, symbol="diamond",
                                                                              color=VERDICT_COLORS.get(verdict, "#9e9e9e")),
                        error_y=None if base else dict(type="data", symmetric=False,
                                                       array=(g["ci_hi"] - g["speedup"]).tolist(),
                                                       arrayminus=(g["speedup"] - g["ci_lo"]).tolist()),
                        text=[speedup_label(*r) for r in zip(g["speedup"], g["ci_lo"], g["ci_hi"], g["verdict"])],
                        # the baseline's label above the dashed 1.0 line, not on it; the rightmost
                        # configuration's to the left of its point, so the plot edge never cuts it
                        textposition=["top center" if base else ("middle left" if c == order[-1] and len(order) > 1
                                                                 else "middle right") for c in g["config"]],
                        cliponaxis=False, hovertemplate="%{x}: %{text}<extra></extra>")
    dots = repeats[repeats["config"].isin(order)]
    if len(dots):
        fig.add_scatter(x=dots["config"].tolist(), y=dots["speedup"].tolist(), mode="markers", name="one repeat",
                        marker=dict(size=6, color="rgba(0,0,0,0.35)"), hovertemplate="%{x}: %{y:.2f}×<extra>repeat</extra>")
    ys = [v for v in [*t["ci_lo"], *t["ci_hi"], *t["speedup"], *dots["speedup"]] if v == v and v > 0] or [1.0]
    span = max(1.25, max(max(ys), 1 / min(ys)) * 1.15)  # symmetric in log space around 1.0
    ticks = [v for v in (0.1, 0.2, 0.25, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 4.0, 5.0, 10.0) if 1 / span <= v <= span]
    fig.add_hline(y=1.0, line_dash="dash", line_color="black")
    fig.update_yaxes(type="log", range=[-math.log10(span), math.log10(span)], tickvals=ticks,
                     ticktext=[f"{v:g}×" for v in ticks], title="speedup over baseline (log scale)")
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    fig.update_layout(title=title, height=420, margin=dict(t=50, b=40, r=40), legend_title_text="verdict")
    return fig


def attribution_bars(a: pd.DataFrame, title: str) -> go.Figure:
    fig = go.Figure()
    for col, lo, hi, name in (("add_one_in", "add_lo", "add_hi", "add-one-in (gain alone)"),
                              ("leave_one_out", "loo_lo", "loo_hi", "leave-one-out (loss from all-on)")):
        if col in a:
            fig.add_bar(x=a["toggle"].tolist(), y=a[col].tolist(), name=name,
                        error_y=dict(type="data", symmetric=False, array=(a[hi] - a[col]).tolist(),
                                     arrayminus=(a[col] - a[lo]).tolist()))
    fig.add_hline(y=1.0, line_dash="dash", line_color="black")
    fig.update_layout(title=title, barmode="group", yaxis_title="speedup (x)", height=380)
    return fig


BREAKDOWN = (("time_frac_data_wait", "data wait", "#8d6e63"), ("time_frac_compute_bound", "compute-bound", "#1565c0"),
             ("time_frac_memory_bound", "memory-bound", "#ef6c00"), ("time_frac_optimizer", "optimizer", "#6a1b9a"),
             ("time_frac_communication", "communication", "#00838f"),
             ("time_frac_other", "other", "#9e9e9e"))


def breakdown_bars(b: pd.DataFrame, title: str) -> go.Figure:
    """Stacked shares of profiled step time per configuration (median over its runs), in %."""
    fig = go.Figure()
    for col, name, color in BREAKDOWN:
        if col in b:
            fig.add_bar(x=b["config"].tolist(), y=(100 * b[col]).round(1).tolist(), name=name, marker_color=color)
    fig.update_layout(title=title, barmode="stack", yaxis_title="share of step time (%)", yaxis_range=[0, 100],
                      height=380)
    return fig


COLLECTIVE_COLORS = {"all_reduce": "#1565c0", "reduce_scatter": "#2e7d32", "all_gather": "#ef6c00",
                     "all_to_all": "#6a1b9a", "broadcast": "#8d6e63", "send_recv": "#00838f", "reduce": "#c62828"}
BACKEND_COLORS = {"gloo": "#1565c0", "mpi": "#ef6c00", "nccl": "#2e7d32"}
MODE_DASH = {"ip": "solid", "oop": "dash"}


def collective_bars(t: pd.DataFrame, collectives: tuple[str, ...], title: str) -> go.Figure:
    """MiB per step by collective, per strategy: measured (solid) beside the analytic volume
    (hatched), stacked by collective."""
    fig = go.Figure()
    for kind in collectives:
        if f"{kind}_mib" not in t:
            continue
        for col, name, pattern in ((f"{kind}_mib", "measured", ""), (f"{kind}_theory_mib", "theory", "/")):
            fig.add_bar(x=t["config"].tolist(), y=t[col].fillna(0).tolist(), name=f"{kind} ({name})",
                        offsetgroup=name, marker=dict(color=COLLECTIVE_COLORS.get(kind, "#9e9e9e"),
                                                      pattern_shape=pattern),
                        hovertemplate=f"%{{x}}: {kind} {name} %{{y:.3f}} MiB<extra></extra>")
    fig.update_layout(title=title, barmode="stack", yaxis_title="MiB per training step (collective size S)",
                      height=400, margin=dict(t=50, b=40))
    return fig


def memory_bars(t: pd.DataFrame, title: str) -> go.Figure:
    """Model state per rank (parameters, gradients, optimizer state; stacked) per strategy."""
    fig = go.Figure()
    for part, color in (("params", "#1565c0"), ("grads", "#2e7d32"), ("optimizer", "#ef6c00")):
        if f"{part}_mib_per_rank" in t:
            fig.add_bar(x=t["config"].tolist(), y=t[f"{part}_mib_per_rank"].tolist(), name=part,
                        marker_color=color, hovertemplate=f"%{{x}}: {part} %{{y:.2f}} MiB<extra></extra>")
    fig.update_layout(title=title, barmode="stack", yaxis_title="MiB per rank (largest rank)", height=380,
                      margin=dict(t=50, b=40))
    return fig


def recompute_tradeoff(t: pd.DataFrame) -> go.Figure:
    """Recomputation: activation memory saved (y) against step time added (x), one point per
    cell, labelled; the ideal is the top left."""
    fig = go.Figure()
    fig.add_scatter(x=(100 * (t["step_time_ratio"] - 1)).tolist(), y=(100 * t["activation_saved"]).tolist(),
                    mode="markers+text", text=[f"{c} ({w}/{s})" for c, w, s in zip(t["config"], t["workload"], t["size"])],
                    textposition="top center", marker=dict(size=11, color="#6a1b9a"),
                    hovertemplate="%{text}: +%{x:.0f}% step time, %{y:.0f}% fewer activation bytes<extra></extra>")
    fig.update_layout(title="recomputation: memory saved vs time added", xaxis_title="step time added (%)",
                      yaxis_title="activation bytes per block saved (%)", height=380, margin=dict(t=50, b=40))
    return fig


def collective_panels(sized: pd.DataFrame, y: str, y_title: str, title: str, log_y: bool = False,
                      ceilings: dict[str, float] | None = None) -> go.Figure:
    """One panel per collective, size on a log x axis; a line per backend (colour) and mode
    (solid in place, dashed out of place); ceilings as dashed black lines in every panel."""
    from plotly.subplots import make_subplots
    colls = [c for c in COLLECTIVE_COLORS if c in set(sized["collective"])]
    cols = 4
    rows = (len(colls) + cols - 1) // cols
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=colls, horizontal_spacing=0.05, vertical_spacing=0.14)
    seen = set()
    for i, coll in enumerate(colls):
        for (backend, mode), g in sized[sized["collective"] == coll].groupby(["backend", "mode"], sort=True):
            g = g.sort_values("bytes")
            name = f"{backend} ({mode})"
            fig.add_scatter(x=g["bytes"].tolist(), y=g[y].tolist(), mode="lines+markers", name=name,
                            legendgroup=name, showlegend=name not in seen, row=i // cols + 1, col=i % cols + 1,
                            line=dict(color=BACKEND_COLORS.get(backend, "#9e9e9e"), dash=MODE_DASH.get(mode, "dot")),
                            hovertemplate=f"{coll} {name}: %{{x:,}} B, %{{y:.3g}}<extra></extra>")
            seen.add(name)
    for k, (label, value) in enumerate((ceilings or {}).items()):
        fig.add_hline(y=value, line_dash="dash" if k == 0 else "dot", line_color="black", row="all", col="all")
        fig.add_scatter(x=[None], y=[None], mode="lines", name=f"{label} {value:.2f} GB/s",
                        line=dict(color="black", dash="dash" if k == 0 else "dot"))  # the ceiling's legend entry
    fig.update_xaxes(type="log", title_text="size S (bytes)", title_font_size=10)
    if log_y:
        fig.update_yaxes(type="log")
    elif ceilings:  # the ceilings inside every panel, not over its title
        fig.update_yaxes(range=[0, 1.1 * max(*ceilings.values(), float(sized[y].max()))])
    fig.update_yaxes(title_text=y_title, col=1, title_font_size=10)
    fig.update_layout(title=title, height=300 * rows + 80, margin=dict(t=80, b=40))
    return fig


PIPE_COLORS = {"F": "#1565c0", "B": "#2e7d32", "L": "#ef6c00"}
PIPE_NAMES = {"F": "forward", "B": "backward", "L": "loss"}


def pipeline_timeline(rows: list[dict], n_stages: int, title: str) -> go.Figure:
    """The schedule as it ran (results/pipeline.timeline rows): one lane per stage, a bar per
    microbatch's forward (blue), backward (green) and loss (orange), labelled with the
    microbatch; the idle time in grey behind them, as the GPipe and 1F1B figures draw it."""
    fig = go.Figure()
    end = max((r["end_ms"] for r in rows), default=0.0)
    lanes = [f"stage {s}" for s in range(n_stages)]
    fig.add_bar(y=lanes, x=[end] * n_stages, base=[0.0] * n_stages, orientation="h", name="idle",
                marker_color="#e0e0e0", hoverinfo="skip")
    for kind in ("F", "B", "L"):
        rs = [r for r in rows if r["kind"] == kind]
        if not rs:
            continue
        fig.add_bar(y=[f"stage {r['stage']}" for r in rs], x=[r["end_ms"] - r["start_ms"] for r in rs],
                    base=[r["start_ms"] for r in rs], orientation="h", name=PIPE_NAMES[kind],
                    marker_color=PIPE_COLORS[kind], text=[str(r["mb"]) if r["mb"] >= 0 else "" for r in rs],
                    textposition="inside", insidetextanchor="middle",
                    hovertemplate=f"{PIPE_NAMES[kind]} %{{text}}: %{{base:.1f}} ms + %{{x:.1f}} ms<extra></extra>")
    fig.update_layout(title=title, barmode="overlay", xaxis_title="ms from the step's first event",
                      yaxis=dict(categoryorder="array", categoryarray=lanes[::-1]), height=120 + 60 * n_stages,
                      margin=dict(t=50, b=40))
    return fig


def bubble_curve(t: pd.DataFrame, title: str) -> go.Figure:
    """Measured bubble (points) and the stage-time prediction (hollow) per schedule over the
    microbatch count, on the theory line (p-1)/(m+p-1) of each pipeline depth."""
    from results.analysis.bubble import theory
    fig = go.Figure()
    colors = {"gpipe": "#1565c0", "1f1b": "#2e7d32", "interleaved_1f1b": "#6a1b9a"}
    for p, v in sorted({(int(a), int(b)) for a, b in zip(t["pp"], t["virtual"])}):
        ms = list(range(1, int(t["microbatches"].max()) + 1))
        fig.add_scatter(x=ms, y=[theory(p, m, v) for m in ms], mode="lines", name=f"theory p={p}" + (f" v={v}" if v > 1 else ""),
                        line=dict(color="black", dash="dash" if v == 1 else "dot"))
    for sched, g in t.groupby("schedule"):
        fig.add_scatter(x=g["microbatches"].tolist(), y=g["bubble_measured"].tolist(), mode="markers",
                        name=f"{sched} measured", marker=dict(color=colors.get(sched, "#9e9e9e"), size=10),
                        hovertemplate=f"{sched}: m=%{{x}}, bubble %{{y:.3f}}<extra></extra>")
        if "bubble_predicted" in g and g["bubble_predicted"].notna().any():
            fig.add_scatter(x=g["microbatches"].tolist(), y=g["bubble_predicted"].tolist(), mode="markers",
                            name=f"{sched} predicted from stage times",
                            marker=dict(color=colors.get(sched, "#9e9e9e"), size=10, symbol="circle-open"))
    fig.update_layout(title=title, xaxis_title="microbatches m", yaxis_title="bubble (idle share of the step)",
                      yaxis_range=[0, 1], height=400)
    return fig


def validation_curve(evals: pd.DataFrame, summary: dict) -> go.Figure:
    """Validation quality against step, named (metric, direction) with the target as a line, so
    one point is still read correctly."""
    metric = summary.get("quality_metric", "quality")
    better = "higher" if summary.get("higher_is_better") else "lower"
    fig = go.Figure(go.Scatter(x=evals["step"], y=evals["quality"], mode="lines+markers", name=metric))
    target = summary.get("quality_target")
    if target is not None:
        fig.add_hline(y=target, line_dash="dash", annotation_text=f"target {target:g}")
    fig.update_layout(title=f"validation {metric} vs step ({better} is better)", xaxis_title="step",
                      yaxis_title=metric, height=360)
    return fig


def mllog_timeline(ev: pd.DataFrame) -> go.Figure:
    """MLLOG events over the run's time, one row per key, tall enough that every key is labelled."""
    ev = ev.assign(time_s=(ev["time_ms"] - ev["time_ms"].min()) / 1000)
    keys = list(dict.fromkeys(ev["key"]))
    fig = px.scatter(ev, x="time_s", y="key", color="event_type", title="MLLOG events",
                     category_orders={"key": keys})
    fig.update_yaxes(tickmode="array", tickvals=keys, ticktext=keys, automargin=True)
    fig.update_layout(height=max(360, 24 * len(keys) + 120), xaxis_title="time since the first event (s)")
    return fig


TREND_COLORS = {"regression": "#c62828", "improvement": "#2e7d32", "first": "#1565c0"}


def trend_chart(h: pd.DataFrame, title: str) -> go.Figure:
    """Median step time per commit (x: commits in the order first measured), one small dot per
    run, and a red/green marker where the regression rule (results/analysis/trends.py) fired against the
    previous commit."""
    fig = go.Figure()
    for config, g in h.groupby("config", sort=False):
        fig.add_scatter(x=g["commit"].tolist(), y=g["median_ms"].tolist(), mode="lines+markers", name=config,
                        hovertemplate="%{x}: %{y:.2f} ms<extra>" + config + "</extra>")
        runs = g.explode("run_medians_ms")
        fig.add_scatter(x=runs["commit"].tolist(), y=runs["run_medians_ms"].astype(float).tolist(), mode="markers",
                        showlegend=False, marker=dict(size=5, color="rgba(0,0,0,0.35)"),
                        hovertemplate="%{x}: %{y:.2f} ms<extra>one run</extra>")
    for verdict in ("regression", "improvement"):
        m = h[h["verdict"] == verdict]
        if len(m):
            fig.add_scatter(x=m["commit"].tolist(), y=m["median_ms"].tolist(), mode="markers", name=verdict,
                            marker=dict(size=16, symbol="x" if verdict == "regression" else "star",
                                        color=TREND_COLORS[verdict]),
                            hovertemplate="%{x}: " + verdict + "<extra></extra>")
    fig.update_yaxes(title="median step time (ms)", rangemode="tozero")
    fig.update_xaxes(title="commit (first measured, oldest left)", type="category")
    fig.update_layout(title=title, height=420, margin=dict(t=50, b=40))
    return fig


def scaling_chart(t: pd.DataFrame, title: str) -> go.Figure:
    """Strong scaling: speedup over one rank vs ranks per strategy (95% CI bars), beside the
    ideal line speedup = ranks."""
    fig = go.Figure()
    top = int(max(t["ranks"].max(), 2))
    fig.add_scatter(x=[1, top], y=[1, top], mode="lines", name="ideal (speedup = ranks)",
                    line=dict(dash="dash", color="black"))
    for strategy, g in t.groupby("strategy", sort=True):
        g = g.sort_values("ranks")
        fig.add_scatter(x=[1, *g["ranks"].tolist()], y=[1.0, *g["speedup"].tolist()], mode="lines+markers",
                        name=strategy, error_y=dict(type="data", symmetric=False,
                                                    array=[0, *(g["ci_hi"] - g["speedup"]).tolist()],
                                                    arrayminus=[0, *(g["speedup"] - g["ci_lo"]).tolist()]),
                        hovertemplate="%{x} ranks: %{y:.2f}×<extra>" + strategy + "</extra>")
    fig.update_xaxes(title="ranks", tickvals=list(range(1, top + 1)))
    fig.update_yaxes(title="speedup over one rank (same global batch)", rangemode="tozero")
    fig.update_layout(title=title, height=380, margin=dict(t=50, b=40))
    return fig
