"""Cached access to the run frames and the statistics computed from them. Pages read only
through here (and so only through `results`): no torch, no harness, read-only."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

import results
from results.analysis import collectives
from results.analysis import bubble as pipeline
from results.analysis import speedups as report
from results.analysis import roofline as roofline_report
from results.analysis import recompute_tradeoff as recompute_table
from results.analysis import scaling
from results.record import schema
from results.stats import estimators as stats
from results.analysis import trends
from results.record.paths import results_root
from results.store.tracking import default_tracking_uri
from results.store.frames import step_samples

CACHE_TTL_S = 300
N_BOOT = stats.N_BOOT  # same replicates and seed as the CLI: the portal shows the CLI's numbers


def tracking_uri() -> str:
    return default_tracking_uri(results_root())


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Loading runs")
def runs(uri: str) -> pd.DataFrame:
    df = results.load_runs(uri)
    if not df.empty:
        df["config"] = report.label_configs(df)
        df["sweep_name"] = df["sweep"].fillna("").str.split("@").str[0]
    return df


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Bootstrapping confidence intervals")
def speedups(df: pd.DataFrame) -> pd.DataFrame:
    return report.speedup_table(df, n_boot=N_BOOT)


@st.cache_data(ttl=CACHE_TTL_S)
def repeat_speedups(df: pd.DataFrame) -> pd.DataFrame:
    return report.repeat_speedups(df)


@st.cache_data(ttl=CACHE_TTL_S)
def attribution(df: pd.DataFrame) -> pd.DataFrame:
    return report.attribution_table(df, n_boot=N_BOOT)


@st.cache_data(ttl=CACHE_TTL_S)
def geomeans(df: pd.DataFrame) -> pd.DataFrame:
    return report.geomean_table(df, n_boot=N_BOOT)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Bootstrapping confidence intervals")
def parallel(df: pd.DataFrame) -> pd.DataFrame:
    return report.parallel_table(df, report.speedup_table(df, n_boot=N_BOOT))


@st.cache_data(ttl=CACHE_TTL_S)
def recompute_tradeoff(df: pd.DataFrame) -> pd.DataFrame:
    return recompute_table.table(df.assign(config=report.label_configs(df)) if "config" not in df else df)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Loading collectives records")
def comm_records(uri: str) -> pd.DataFrame:
    return collectives.load_comm(uri)


@st.cache_data(ttl=CACHE_TTL_S)
def comm_sizes(records: pd.DataFrame) -> pd.DataFrame:
    return collectives.size_frame(records)


@st.cache_data(ttl=CACHE_TTL_S)
def comm_predictions(runs: pd.DataFrame, comm: pd.DataFrame) -> pd.DataFrame:
    return collectives.predictions(runs, comm)


@st.cache_data(ttl=CACHE_TTL_S)
def roofline_points(df: pd.DataFrame) -> pd.DataFrame:
    return roofline_report.run_points(df)


@st.cache_data(ttl=CACHE_TTL_S)
def fusion(df: pd.DataFrame) -> pd.DataFrame:
    return roofline_report.fusion_table(df)


@st.cache_data(ttl=CACHE_TTL_S)
def pipeline_runs(df: pd.DataFrame) -> pd.DataFrame:
    return pipeline.bubble_table(df)


@st.cache_data(ttl=CACHE_TTL_S)
def pipeline_record(record_dir: str) -> dict:
    """The schedule record of a pipeline run (its events and bubble), or {} if unreadable."""
    from pathlib import Path
    try:
        return schema.read_record(Path(record_dir))["summary"].get("pipeline", {})
    except (OSError, ValueError, KeyError):
        return {}


@st.cache_data(ttl=CACHE_TTL_S)
def ttt_scores(df: pd.DataFrame) -> pd.DataFrame:
    return report.ttt_table(df)


@st.cache_data(ttl=CACHE_TTL_S)
def samples(record_dir: str, phase: str = "steady") -> list[float]:
    try:
        return step_samples(record_dir, phase)
    except OSError:
        return []


def compare_samples(a: list[list[float]], b: list[list[float]]) -> dict:
    """Speedup of b over a (a's step time / b's) with CI and a verdict."""
    s = stats.speedup(a, b, n_boot=N_BOOT)
    return {"speedup": s["speedup"], "ci_lo": s["ci_lo"], "ci_hi": s["ci_hi"],
            "verdict": stats.verdict(s["ci_lo"], s["ci_hi"])}


def refresh_button() -> None:
    if st.sidebar.button("Refresh data", help="re-read the run index (kept current by ingest)"):
        st.cache_data.clear()
    if st.sidebar.button("Re-read MLflow", help="rebuild the run index with a full MLflow search "
                         "(runs logged from other machines straight to a tracking server)"):
        from results.store import frames as store
        store.reindex(tracking_uri(), store.index_path(tracking_uri()))
        st.cache_data.clear()


def sweeps_newest_first(df: pd.DataFrame) -> list[str]:
    """Ablation sweeps (more than one configuration) newest first, then campaigns and other
    single-configuration sweeps (time-to-train, weak scaling), newest first: so a page's default
    is the newest ablation, not a lone baseline bar of the last `make ttt`."""
    if "sweep" not in df:
        return []
    runs = df[df["sweep"].fillna("") != ""]
    return _ablations_first(runs.groupby("sweep")["started"].max(), runs.groupby("sweep")["config"].nunique())


def sweep_order(table: pd.DataFrame) -> list[str]:
    """sweeps_newest_first from the store's sweep table (results.sweep_table: configurations
    counted as distinct variants), with no run loaded."""
    t = table[table["sweep"] != ""].set_index("sweep")
    return _ablations_first(t["newest"], t["configs"])


def _ablations_first(newest: pd.Series, configs: pd.Series) -> list[str]:
    newest = newest.sort_values(ascending=False)
    return [s for s in newest.index if configs[s] > 1] + [s for s in newest.index if configs[s] <= 1]


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Loading sweeps")
def sweep_table(uri: str) -> pd.DataFrame:
    return results.sweep_table(uri)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Loading runs")
def sweep_runs(uri: str, sweeps: tuple[str, ...]) -> pd.DataFrame:
    """The runs of `sweeps` only (read by the index's sweep column), with config labels."""
    df = results.load_runs(uri, sweeps=list(sweeps))
    if not df.empty:
        df["config"] = report.label_configs(df)
        df["sweep_name"] = df["sweep"].fillna("").str.split("@").str[0]
    return df


def sweeps_or_stop() -> pd.DataFrame:
    """The store's sweep table, or the empty state (and stop) when it holds no run: a first page
    that reads only the sweeps it shows (Overview) starts here instead of load_or_stop."""
    return _read_or_stop(sweep_table)


def _read_or_stop(read) -> pd.DataFrame:
    """read(tracking URI) behind the Refresh buttons; an unreachable store shown (not raised) and
    an empty one shown as the empty state, each stopping the page."""
    refresh_button()
    try:
        frame = read(tracking_uri())
    except Exception as e:  # noqa: BLE001 - an unreachable store is shown, not raised
        st.warning("The MLflow store could not be read:")
        st.code(f"{tracking_uri()}\n{type(e).__name__}: {e}", language=None)
        st.stop()
    if frame.empty:
        empty_state()
        st.stop()
    return frame


def run_labels(df: pd.DataFrame) -> list[str]:
    """A readable label per run for pickers: workload/size config rN, start time (UTC), status."""
    started = pd.to_datetime(df["started"], utc=True).dt.strftime("%Y-%m-%d %H:%M")
    config = df["config"] if "config" in df else df.get("variant", "")
    return [f"{w}/{s} {c} r{r} · {t} · {st_}" for w, s, c, r, t, st_ in
            zip(df["workload"], df["size"], config, df["repeat"], started, df["status"])]


def empty_state() -> None:
    uri = tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        st.info(f"No MLflow store at {uri[len('sqlite:///'):]} (the results folder is HARNESS_RESULTS, else "
                "./results); the portal is read-only and creates none. Run `make demo` (a small CPU ablation) and "
                "press Refresh, or start the portal with HARNESS_RESULTS set to your results folder.")
        return
    st.info(f"No runs recorded yet in {uri}. Run `make demo` (a small CPU ablation) and press Refresh.")


def load_or_stop() -> pd.DataFrame:
    """The runs frame, or the empty state (and stop) when there is nothing to show."""
    return _read_or_stop(runs)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Comparing commits")
def history(df: pd.DataFrame) -> pd.DataFrame:
    return trends.history(trends.labelled(df))


@st.cache_data(ttl=CACHE_TTL_S)
def weak_scaling(root: str) -> pd.DataFrame:
    return scaling.weak(Path(root))


def run_record(run_dir: Path) -> dict:
    """One run's record as Run detail shows it, through results' one reader: config, env and
    summary (empty with `problem` set when the record is malformed), metrics as a frame, the
    MLLOG events. A malformed record is named, never a traceback."""
    import pandas as pd

    from results.record import schema
    out = {"config": {}, "env": {}, "summary": {}, "problem": "", "metrics": pd.DataFrame(), "events": []}
    try:
        rec = schema.read_record(run_dir, with_metrics=True)
        out.update(config=rec["config"], env=rec["env"], summary=rec["summary"], metrics=pd.DataFrame(rec["metrics"]))
    except schema.RecordError as e:
        out["problem"] = str(e)
    except OSError as e:
        out["problem"] = f"{run_dir.name}: {e.strerror or e}"
    out["events"] = schema.mllog_events(run_dir)
    return out


def calibration_line(df: pd.DataFrame) -> str:
    """The latest A/A calibration in one line, as the sweep summary prints it."""
    from results.analysis import calibration
    return calibration.line(calibration.latest(df))


def latest_calibration_runs(table: pd.DataFrame) -> pd.DataFrame:
    """The runs of the newest calibration sweep in the sweep table (empty frame when none)."""
    from results.analysis import calibration
    from results.record import sweep_ids
    sweep = sweep_ids.latest(table["sweep"], calibration.NAME)
    return sweep_runs(tracking_uri(), (sweep,)) if sweep else pd.DataFrame()


def verdict_text(row) -> str:
    """A configuration's verdict as the sweep summary prints it (results/analysis/speedups)."""
    return report.verdict_text(row)


def verdict_figures(t: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's point and interval: the figure its verdict is on (results/analysis/speedups)."""
    return report.verdict_figures(t)
