"""Every portal page through streamlit's AppTest against a real sqlite MLflow store in a temp
dir, seeded with a real tiny sweep plus crafted failure records (one with a hostile name)."""
from __future__ import annotations

import plotly.io
import pytest
from streamlit.testing.v1 import AppTest

from results import report
from tests.conftest import REPO, XSS

APP = str(REPO / "portal" / "app.py")


def _page(monkeypatch, root, page: str | None = None, query: dict[str, str] | None = None) -> AppTest:
    monkeypatch.setenv("HARNESS_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    for k, v in (query or {}).items():  # a shared link's state (?run=...)
        at.query_params[k] = v
    if page:
        at.switch_page(f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _no_markdown_with(at: AppTest, text: str) -> bool:
    return all(text not in m.value for m in at.markdown) and all(text not in c.value for c in at.caption)


@pytest.mark.parametrize("page", ["overview", "ablation", "runs", "run_detail", "compare"])
def test_empty_store_says_what_to_run(monkeypatch, tmp_path, page):
    """A mistyped or empty results folder: the page names the path it looked at, and, being
    read-only, leaves the folder as it was (no mlflow.db, no run index)."""
    (tmp_path / "empty").mkdir()
    at = _page(monkeypatch, tmp_path / "empty", page)
    assert [i.value for i in at.info] == [
        f"No MLflow store at {tmp_path / 'empty' / 'mlflow.db'} (the results folder is HARNESS_RESULTS, else "
        "./results); the portal is read-only and creates none. Run `make demo` (a small CPU ablation) and press "
        "Refresh, or start the portal with HARNESS_RESULTS set to your results folder."]
    assert list((tmp_path / "empty").iterdir()) == []


def test_collectives_page_on_an_empty_store_says_what_to_run(monkeypatch, tmp_path):
    at = _page(monkeypatch, tmp_path / "empty", "collectives")
    assert [i.value for i in at.info] == [
        "No collectives records yet. Run `make comm RANKS=2` (all_reduce, reduce_scatter, all_gather, all_to_all, "
        "broadcast, reduce, send/recv on gloo and MPI, under mpiexec) and press Refresh."]
    assert not at.get("plotly_chart")


def test_overview_shows_the_report_speedups_with_cis(monkeypatch, seeded):
    root, _ = seeded
    at = _page(monkeypatch, root)
    sweep = at.selectbox[0].value
    assert sweep.startswith("portal@")
    expected = report.speedup_table(report.records_frame(root / "runs").query("sweep == @sweep"))
    fig = plotly.io.from_json(at.get("plotly_chart")[0].proto.spec)  # decodes plotly's typed arrays
    bar = fig.data[0]
    got = dict(zip(bar.x, bar.y))
    want = expected.dropna(subset=["speedup"]).set_index("config")
    assert set(got) == set(want.index) == {"baseline", "+channels_last", "+dali", "all_on"}
    for config, y in got.items():  # the same numbers as the CLI's table
        assert y == pytest.approx(want.loc[config, "speedup"])
    for i, config in enumerate(bar.x):
        hi = got[config] + bar.error_y.array[i]
        lo = got[config] - bar.error_y.arrayminus[i]
        assert hi == pytest.approx(want.loc[config, "ci_hi"], rel=1e-9)
        assert lo == pytest.approx(want.loc[config, "ci_lo"], rel=1e-9)
    assert any(s.type == "line" and s.y0 == 1.0 for s in fig.layout.shapes)
    # the unsupported configuration has no bar but its reason is listed
    reasons = at.dataframe[0].value
    assert list(reasons["config"]) == ["+cuda_graphs"] and "CUDA" in reasons["reason"].iloc[0]


def test_overview_of_a_sweep_with_no_finished_run_says_so(monkeypatch, seeded):
    """The crafted failed run is its sweep's only run: no bar, a sentence, and its reason."""
    root, _ = seeded
    at = _page(monkeypatch, root)
    at.selectbox[0].set_value(XSS).run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.get("plotly_chart")
    assert [w.value for w in at.warning] == [
        "No speedup to show: no configuration finished beside a finished baseline in this sweep. "
        "What happened to each is listed below."]
    assert at.dataframe[0].value["reason"].tolist() == [f"RuntimeError: {XSS}"]


def test_runs_page_lists_failures_with_reasons_as_text(monkeypatch, seeded):
    root, crafted = seeded
    at = _page(monkeypatch, root, "runs")
    df = at.dataframe[0].value
    assert len(df) == 11  # 5 cells x 2 repeats + the crafted failure
    row = df.set_index("run_id").loc[crafted]
    assert row["status"] == "failed" and row["reason"] == f"RuntimeError: {XSS}"
    assert set(df["status"]) == {"finished", "unsupported", "failed"}
    assert _no_markdown_with(at, XSS)


def test_runs_page_filters(monkeypatch, seeded):
    root, crafted = seeded
    at = _page(monkeypatch, root, "runs")
    status = next(m for m in at.multiselect if m.label == "status")
    status.set_value(["failed"]).run()
    assert list(at.dataframe[0].value["run_id"]) == [crafted]
    status.set_value(["unsupported"]).run()
    assert set(at.dataframe[0].value["config"]) == {"+cuda_graphs"}


def test_run_detail_of_a_failed_run_shows_reason_verbatim(monkeypatch, seeded):
    root, crafted = seeded
    at = _page(monkeypatch, root, "run_detail")
    at.selectbox[0].set_value(crafted).run()
    assert not at.exception
    assert any(c.value == f"RuntimeError: {XSS}" for c in at.code)
    assert _no_markdown_with(at, XSS)
    assert len(at.get("plotly_chart")) >= 4  # loss vs step/time, eval, histogram, MLLOG timeline


def test_compare_two_runs_diffs_config_and_gives_verdict(monkeypatch, seeded):
    root, _ = seeded
    at = _page(monkeypatch, root, "compare")
    frames = report.records_frame(root / "runs")
    frames = frames[frames["status"] == "finished"]
    a = frames[frames["toggles.channels_last"] == "False"].iloc[0]["run_id"]
    b = frames[frames["toggles.channels_last"] == "True"].iloc[0]["run_id"]
    at.selectbox[0].set_value(a).run()
    at.selectbox[1].set_value(b).run()
    frames = [d.value for d in at.dataframe]  # config diff, [environment diff,] metrics
    config_diff, metrics = frames[0], frames[-1]
    assert "toggles.channels_last" in set(config_diff["key"])
    if len(frames) == 2:  # same machine, same libraries: the environment diff is empty
        assert any(c.value == "identical" for c in at.caption)
    step = metrics.set_index("metric").loc["step time (B speedup over A)"]
    # the page's figures are the ones results computes from the same two records
    from results import stats
    from results.store import step_samples
    from portal.data import N_BOOT
    dirs = report.records_frame(root / "runs").set_index("run_id")["record_dir"]
    sp = stats.speedup([step_samples(dirs[a])], [step_samples(dirs[b])], n_boot=N_BOOT)
    assert step["delta [95% CI]"] == f"{sp['speedup']:.3f}x [{sp['ci_lo']:.3f}, {sp['ci_hi']:.3f}]"
    assert step["verdict"] == stats.verdict(sp["ci_lo"], sp["ci_hi"])
