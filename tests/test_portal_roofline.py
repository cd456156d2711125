"""The Roofline page against the seeded store (a real tiny CosmoFlow sweep with baseline and
+channels_last, profiled): the roofs drawn are the records' ceilings, the chosen run's sentence
carries its record's numbers, the fusion line is the table computed from the records, and a
link with ?run= opens that run; in AppTest and in headless Chromium."""
from __future__ import annotations

from pathlib import Path

import plotly.io
import pytest
from streamlit.testing.v1 import AppTest

from results.analysis import speedups as report
from results.analysis import roofline as roofline_report
from tests.helpers import CHROMIUM, CHROMIUM_ARGS, serve
from tests.helpers import app_page as portal_page


def _page(monkeypatch, root, run: str | None = None) -> AppTest:
    return portal_page(monkeypatch, root, "roofline", {"run": run} if run else None)


@pytest.fixture(scope="module")
def expected(seeded):
    root, _ = seeded
    df = report.records_frame(root / "runs")
    df["config"] = report.label_configs(df)
    return roofline_report.run_points(df), roofline_report.fusion_table(df)


def test_roofline_page_draws_the_records_roofs_and_the_chosen_run(monkeypatch, seeded, expected):
    points, fusion = expected
    assert len(points) >= 4 and set(points["config"]) >= {"baseline", "+channels_last"}
    run = points.iloc[0]
    at = _page(monkeypatch, seeded[0], run["run_id"])
    assert at.selectbox[0].value == run["run_id"]
    fig = plotly.io.from_json(at.get("plotly_chart")[0].proto.spec)
    roof = fig.data[0]
    assert max(roof.y) == pytest.approx(points["peak_flop_per_s"].median())
    assert roof.y[0] / roof.x[0] == pytest.approx(points["bw_bytes_per_s"].median())  # the bandwidth slope
    texts = [m.value for m in at.markdown]
    want = f"Intensity **{run['intensity']:.2f} FLOP/byte** against a ridge of **{run['ridge']:.2f}**"
    assert any(want in t and f"**{run['roof_pct']:.1f}%** of its roof" in t for t in texts), texts
    ops = at.dataframe[0].value
    assert {"aten::convolution", "aten::convolution_backward"} <= set(ops["op"])
    conv = ops.set_index("op").loc["aten::convolution"]
    assert conv["bound"] in ("compute_bound", "memory_bound") and conv["gflop_per_s"] > 0
    f = fusion[fusion["toggle"] == "channels_last"].iloc[0]
    line = (f"**cosmoflow tiny +channels_last** ({f['sweep']}): memory-bound time "
            f"{f['memory_bound_ms_baseline']:.2f} → {f['memory_bound_ms_on']:.2f} ms/step")
    assert any(line in t for t in texts), texts


def test_run_detail_links_its_run_to_the_roofline(monkeypatch, seeded, expected):
    points, _ = expected
    run = points.iloc[1]["run_id"]
    at = portal_page(monkeypatch, seeded[0], "run_detail")
    at.selectbox[0].set_value(run).run()
    links = [ln.proto for ln in at.get("page_link")]
    assert [(ln.label, ln.page.endswith("roofline.py") or ln.page == "roofline") for ln in links] == [
        ("this run on the device's roofline", True)], links
    assert f"run={run}" in links[0].query_string


def test_roofline_page_on_an_empty_store_says_what_to_run(monkeypatch, tmp_path):
    at = _page(monkeypatch, tmp_path / "empty")
    assert any("make demo" in i.value for i in at.info)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make system-deps)")
def test_a_roofline_link_opens_the_run_in_chromium(seeded, expected):
    from playwright.sync_api import sync_playwright
    points, _ = expected
    run = points.iloc[-2]
    with serve(seeded[0]) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{url}/ablation")
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        page.wait_for_timeout(500)
        ablation = page.inner_text("[data-testid='stMainBlockContainer']")
        page.goto(f"{url}/roofline?run={run['run_id']}")
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        page.wait_for_timeout(500)
        body = page.inner_text("[data-testid='stMainBlockContainer']")
        browser.close()
    assert "each run and its top ops on the roofline; fusion's effect" in ablation
    assert f"Intensity {run['intensity']:.2f} FLOP/byte against a ridge of {run['ridge']:.2f}" in body
    assert f"{run['workload']} {run['size']} {run['config']}" in body and "Fusion's effect" in body


def test_the_points_come_from_the_run_index_without_reading_a_record(monkeypatch, seeded, expected):
    """Runs ingested with the roofline tags are placed from load_runs' columns alone: no
    summary.json is opened (a store of many profiled runs must not read them all per page)."""
    from results.store.frames import load_runs
    from results.store.tracking import default_tracking_uri
    points, _ = expected
    df = load_runs(default_tracking_uri(seeded[0]))
    df["config"] = report.label_configs(df)
    monkeypatch.setattr(roofline_report, "block", lambda d: pytest.fail(f"read the record {d}"))
    got = roofline_report.run_points(df).set_index("run_id").sort_index()
    want = points.set_index("run_id").sort_index()
    assert list(got.index) == list(want.index)
    for col in ("intensity", "roof_flop_per_s", "peak_flop_per_s", "bw_bytes_per_s", "ridge", "roof_pct"):
        assert got[col].tolist() == pytest.approx(want[col].tolist(), rel=1e-9), col
    assert got["bound"].tolist() == want["bound"].tolist() and got["device_name"].tolist() == want["device_name"].tolist()
    assert got["dtype"].tolist() == want["dtype"].tolist()
