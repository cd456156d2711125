"""Every portal page through streamlit's AppTest against a real sqlite MLflow store in a temp
dir, seeded with a real tiny sweep plus crafted failure records (one with a hostile name)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.io
import pytest
from streamlit.testing.v1 import AppTest

from results.analysis import speedups as report
from tests.conftest import REPO, XSS, copy_record
from tests.helpers import app_page

APP = str(REPO / "portal" / "app.py")


def _no_markdown_with(at: AppTest, text: str) -> bool:
    return all(text not in m.value for m in at.markdown) and all(text not in c.value for c in at.caption)


@pytest.mark.parametrize("page", ["overview", "ablation", "runs", "run_detail", "compare"])
def test_empty_store_says_what_to_run(monkeypatch, tmp_path, page):
    """A mistyped or empty results folder: the page names the path it looked at, and, being
    read-only, leaves the folder as it was (no mlflow.db, no run index)."""
    (tmp_path / "empty").mkdir()
    at = app_page(monkeypatch, tmp_path / "empty", page)
    assert [i.value for i in at.info] == [
        f"No MLflow store at {tmp_path / 'empty' / 'mlflow.db'} (the results folder is HARNESS_RESULTS, else "
        "./results); the portal is read-only and creates none. Run `make demo` (a small CPU ablation) and press "
        "Refresh, or start the portal with HARNESS_RESULTS set to your results folder."]
    assert list((tmp_path / "empty").iterdir()) == []


def test_collectives_page_on_an_empty_store_says_what_to_run(monkeypatch, tmp_path):
    at = app_page(monkeypatch, tmp_path / "empty", "collectives")
    assert [i.value for i in at.info] == [
        "No collectives records yet. Run `make comm RANKS=2` (all_reduce, reduce_scatter, all_gather, all_to_all, "
        "broadcast, reduce, send/recv on gloo and MPI, under mpiexec) and press Refresh."]
    assert not at.get("plotly_chart")


def test_overview_shows_the_report_speedups_with_cis(monkeypatch, seeded):
    """Points with CIs on a log axis centred on 1.0, their figures printed, a legend by verdict,
    a dot per repeat, and the same numbers in a table: all equal to the CLI's report."""
    from portal.charts import VERDICT_NAMES, speedup_label
    root, _ = seeded
    at = app_page(monkeypatch, root)
    sweep = at.selectbox[0].value
    assert sweep.startswith("portal@")
    frame = report.records_frame(root / "runs").query("sweep == @sweep")
    want = report.speedup_table(frame).dropna(subset=["speedup"]).set_index("config")
    # each point is the figure its verdict is on: here two repeats paired (t), not the pooled bootstrap
    assert set(want["verdict_on"].dropna()) == {"paired"}
    shown = want.copy()
    for col, src in (("speedup", "paired_speedup"), ("ci_lo", "paired_lo"), ("ci_hi", "paired_hi")):
        shown.loc[shown["verdict_on"] == "paired", col] = shown[src]
    assert "A/A calibration: none yet" in at.info[0].value
    fig = plotly.io.from_json(at.get("plotly_chart")[0].proto.spec)  # decodes plotly's typed arrays
    points, dots = {}, []
    for tr in fig.data:
        if tr.name == "one repeat":
            dots += list(tr.y)
            continue
        assert tr.name in VERDICT_NAMES.values()
        for k, (x, y, text) in enumerate(zip(tr.x, tr.y, tr.text)):
            err = (tr.error_y.array[k], tr.error_y.arrayminus[k]) if tr.error_y.array is not None else None
            points[x] = (y, text, err)
    assert set(points) == set(want.index) == {"baseline", "+channels_last", "+dali", "all_on"}
    assert points["baseline"] == (1.0, "1.00× reference", None)
    for config, (y, text, (up, down)) in ((c, p) for c, p in points.items() if c != "baseline"):
        w = shown.loc[config]
        assert y == pytest.approx(w["speedup"]) and y + up == pytest.approx(w["ci_hi"], rel=1e-9)
        assert y - down == pytest.approx(w["ci_lo"], rel=1e-9)
        assert text == speedup_label(w["speedup"], w["ci_lo"], w["ci_hi"], w["verdict"])
    assert sorted(dots) == pytest.approx(sorted(report.repeat_speedups(frame)["speedup"]))
    assert len(dots) == 8  # 4 configurations x 2 repeats
    lo, hi = fig.layout.yaxis.range
    assert fig.layout.yaxis.type == "log" and lo == pytest.approx(-hi)  # centred on 1.0
    assert any(s.type == "line" and s.y0 == 1.0 for s in fig.layout.shapes)
    # labels placed where a person reads them: the baseline's above the dashed line, the last point's to its left
    pos = {x: p for tr in fig.data if tr.text for x, p in zip(tr.x, tr.textposition)}
    assert pos["baseline"] == "top center" and pos[fig.layout.xaxis.categoryarray[-1]] == "middle left"
    numbers = at.dataframe[0].value.set_index("configuration")
    assert numbers.loc["+dali", "speedup [95% CI]"] == speedup_label(*want.loc["+dali", ["speedup", "ci_lo", "ci_hi",
                                                                                         "verdict"]])
    assert numbers["baseline median step (ms)"].iloc[0] == round(want.loc["baseline", "median_step_ms"], 1)  # shown as the other steps are
    from portal.charts import paired_label
    assert numbers.loc["+dali", "paired [95% CI]"] == paired_label(*want.loc["+dali", ["paired_speedup", "paired_lo",
                                                                                      "paired_hi", "pairs", "paired_method"]])
    assert numbers.loc["+dali", "paired [95% CI]"].endswith("n=2 (t)")  # 2 repeats, each a pair: Student's t
    assert numbers.loc["baseline", "paired [95% CI]"] == "-"
    assert numbers.loc["+dali", "verdict"] == want.loc["+dali", "verdict"]  # on the paired figure beside it
    for config in want.index:  # the stability verdict, as results judges it from the same records
        assert numbers.loc[config, "stability"] == want.loc[config, "stability"]
        assert want.loc[config, "stability"] == "stable" or want.loc[config, "stability"].startswith(("noisy: ", "disturbed: "))
    # the unsupported configuration has no point but its reason is listed
    reasons = at.dataframe[1].value
    assert list(reasons["config"]) == ["+cuda_graphs"] and "CUDA" in reasons["reason"].iloc[0]


def test_overview_of_a_sweep_with_no_finished_run_says_so(monkeypatch, seeded):
    """The crafted failed run is its sweep's only run: no bar, a sentence, and its reason."""
    root, _ = seeded
    at = app_page(monkeypatch, root)
    at.selectbox[0].set_value(XSS).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.get("plotly_chart")
    assert [w.value for w in at.warning] == [
        "No speedup to show: no configuration finished beside a finished baseline in this sweep. "
        "What happened to each is listed below."]
    assert at.dataframe[-1].value["reason"].tolist() == [f"RuntimeError: {XSS}"]


def test_overview_names_a_verdict_called_in_every_process(monkeypatch, modes_store):
    """+channels_last's two processes at 1.07x [1.04, 1.10] and 1.30x [1.26, 1.34] (conftest's
    modes_store): their combined interval holds 1 while each process called it faster, and
    Overview says "faster in every process", as the sweep summary does, with the combined interval
    beside it and the rule in its caption."""
    from portal.charts import VERDICT_NAMES
    from results.stats.interleaved import EVERY_PROCESS
    root, modes = modes_store
    want = report.speedup_table(report.records_frame(root / "runs")).set_index("config")
    row = want.loc["+channels_last"]
    assert (row["verdict"], row["verdict_on"]) == ("faster", EVERY_PROCESS) and row["paired_lo"] < 1 < row["paired_hi"]
    at = app_page(monkeypatch, root)
    assert at.selectbox[0].value == modes
    numbers = at.dataframe[0].value.set_index("configuration")
    assert numbers.loc["+channels_last", "verdict"] == "faster in every process"
    assert numbers.loc["+channels_last", "paired [95% CI]"] == (
        f"{row['paired_speedup']:.2f}× [{row['paired_lo']:.2f}, {row['paired_hi']:.2f}] n=24 (i ×2)")
    assert numbers.loc["+dali", "verdict"] == want.loc["+dali", "verdict"]  # the paired-by-repeat rows as before
    assert any("\"faster in every process\" means each process's own interval said so" in c.value for c in at.caption)
    fig = plotly.io.from_json(at.get("plotly_chart")[0].proto.spec)
    named = {x: tr.name for tr in fig.data if tr.name != "one repeat" for x in tr.x}
    assert named["+channels_last"] == VERDICT_NAMES["faster"] == "faster (CI above 1, or in every process)"


def test_overview_shows_the_calibration_with_the_demos_topped_up_groups(monkeypatch, modes_store, tmp_path):
    """A calibration sweep beside the modes sweep: five A/A trials (two tight, then two wide and a
    tight one: the demo's top-up would add the fifth to the second pair). Overview prints the same
    line as the sweep summary, its demo groups (2-3 processes) included."""
    import shutil

    from results.analysis import calibration
    from results.store.ingest import ingest_all
    src, modes = modes_store
    root = tmp_path / "results"
    shutil.copytree(src / "runs", root / "runs")
    frame = report.records_frame(root / "runs")
    base = frame.loc[report.label_configs(frame) == "baseline", "record_dir"].iloc[0]
    tight, wide = (1.0, 0.98, 1.02), (1.0, 0.85, 1.18)
    for i, (r, lo, hi) in enumerate([tight, tight, wide, wide, tight]):
        copy_record(base, root / "runs" / f"{Path(base).name}-cal{i}",
                    {"repeat": i, "sweep": "calibrate@20261204T230000-1a2b3c"},
                    {"ab_ratio": r, "ab_lo": lo, "ab_hi": hi, "ab_pairs": 10})
    ingest_all(root / "runs", f"sqlite:///{root / 'mlflow.db'}")
    want = calibration.line(calibration.latest(report.records_frame(root / "runs")))
    assert "0 of 5 trials" in want and "0 of 2 demo groups (2-3 processes, topped up as the demo is)" in want
    at = app_page(monkeypatch, root)
    assert at.selectbox[0].value == modes  # the newest sweep that is not a calibration
    assert at.info[0].value == want


def _run_ids(frame) -> list[str]:
    """Runs rows link to Run detail (`run_detail?run=<run_id>`)."""
    assert frame["detail"].str.startswith("run_detail?run=").all()
    return frame["detail"].str.removeprefix("run_detail?run=").tolist()


def test_runs_page_lists_failures_with_reasons_as_text(monkeypatch, seeded):
    root, crafted = seeded
    at = app_page(monkeypatch, root, "runs")
    df = at.dataframe[0].value
    assert len(df) == 11  # 5 cells x 2 repeats + the crafted failure
    row = df.set_index(pd.Index(_run_ids(df))).loc[crafted]
    assert row["status"] == "failed" and row["reason"] == f"RuntimeError: {XSS}"
    assert set(df["status"]) == {"finished", "unsupported", "failed"}
    assert df["started"].is_monotonic_decreasing  # newest first
    assert (df["median_step_ms"].dropna() > 1).all()  # milliseconds, as on every other page
    assert _no_markdown_with(at, XSS)
    assert at.caption[0].value == "11 of 11 runs, newest first"


def test_runs_page_filters(monkeypatch, seeded):
    """Filters start empty, meaning all; picking narrows; clearing gives every run back."""
    root, crafted = seeded
    at = app_page(monkeypatch, root, "runs")
    assert [m.value for m in at.multiselect] == [[]] * 6
    status = next(m for m in at.multiselect if m.label == "status")
    status.set_value(["failed"]).run()
    assert _run_ids(at.dataframe[0].value) == [crafted]
    status.set_value(["unsupported"]).run()
    assert set(at.dataframe[0].value["config"]) == {"+cuda_graphs"}
    status.set_value([]).run()
    assert len(at.dataframe[0].value) == 11


def test_run_detail_from_a_shared_link_of_an_unsupported_run(monkeypatch, seeded):
    """?run= picks the run; an unsupported run (readable folder, no steps) shows its status,
    reason, configuration and files, not "not readable"."""
    root, _ = seeded
    frames = report.records_frame(root / "runs")
    unsupported = frames[frames["status"] == "unsupported"].iloc[0]["run_id"]
    at = app_page(monkeypatch, root, "run_detail", query={"run": unsupported})
    assert at.selectbox[0].value == unsupported
    assert [i.value for i in at.info] == [
        "No training steps recorded (unsupported): the record's reason, environment and files follow."]
    assert not at.warning and "CUDA" in at.code[0].value
    assert [e.label for e in at.expander] == ["configuration and toggles", "environment", "artifacts"]
    assert {"config.json", "status.json"} <= {b.label.removeprefix("download ") for b in at.get("download_button")}


def test_run_detail_names_its_figures(monkeypatch, seeded):
    root, _ = seeded
    frames = report.records_frame(root / "runs")
    finished = frames[frames["status"] == "finished"].iloc[0]["run_id"]
    at = app_page(monkeypatch, root, "run_detail", query={"run": finished})
    # the seeded sweep evaluates 2 batches of 8 per run: the tile says what its quality is over
    assert [m.label for m in at.metric] == ["status", "median step (ms)", "samples/s", "quality (16 of 96 val samples)"]
    figs = [plotly.io.from_json(c.proto.spec) for c in at.get("plotly_chart")]
    titles = [f.layout.title.text for f in figs]
    assert "validation mae vs step (lower is better)" in titles
    timeline = figs[titles.index("MLLOG events")]
    keys = list(timeline.layout.yaxis.ticktext)
    assert len(keys) > 10 and timeline.layout.height >= 24 * len(keys)  # every key labelled


def test_run_detail_of_a_failed_run_shows_reason_verbatim(monkeypatch, seeded):
    root, crafted = seeded
    at = app_page(monkeypatch, root, "run_detail")
    at.selectbox[0].set_value(crafted).run()
    assert not at.exception
    assert any(c.value == f"RuntimeError: {XSS}" for c in at.code)
    assert _no_markdown_with(at, XSS)
    assert len(at.get("plotly_chart")) >= 4  # loss vs step/time, eval, histogram, MLLOG timeline


def test_compare_two_runs_diffs_config_and_gives_verdict(monkeypatch, seeded):
    root, _ = seeded
    at = app_page(monkeypatch, root, "compare")
    at.radio[0].set_value("runs").run()
    frames = report.records_frame(root / "runs")
    frames = frames[frames["status"] == "finished"]
    a = frames[frames["toggles.channels_last"] == "False"].iloc[0]["run_id"]
    b = frames[frames["toggles.channels_last"] == "True"].iloc[0]["run_id"]
    at.selectbox[0].set_value(b).run()  # run B first: A defaults to B's newest peer
    at.selectbox[1].set_value(a).run()
    frames = [d.value for d in at.dataframe]  # config diff, [environment diff,] metrics
    config_diff, metrics = frames[0], frames[-1]
    assert "toggles.channels_last" in set(config_diff["key"])
    if len(frames) == 2:  # same machine, same libraries: the environment diff is empty
        assert any(c.value == "identical" for c in at.caption)
    step = metrics.set_index("metric").loc["step time (B speedup over A)"]
    # the page's figures are the ones results computes from the same two records
    from results.stats import estimators as stats
    from results.store.frames import step_samples
    from portal.data import N_BOOT
    dirs = report.records_frame(root / "runs").set_index("run_id")["record_dir"]
    sp = stats.speedup([step_samples(dirs[a])], [step_samples(dirs[b])], n_boot=N_BOOT)
    assert step["delta [95% CI]"] == f"{sp['speedup']:.3f}x [{sp['ci_lo']:.3f}, {sp['ci_hi']:.3f}]"
    verdict = stats.verdict(sp["ci_lo"], sp["ci_hi"])
    assert step["verdict"] == {"faster": "B faster", "slower": "B slower"}.get(verdict, verdict)
    quality = metrics.set_index("metric").loc["quality"]
    assert "lower is better" in quality["verdict"] and quality["verdict"].startswith(("B better", "B worse", "same"))
    assert any("not run-to-run variation" in c.value for c in at.caption)
    qp = {k: v if isinstance(v, str) else v[-1] for k, v in at.query_params.items()}
    assert qp["a"] == a and qp["b"] == b  # the link reproduces the pair
