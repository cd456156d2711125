"""One real-browser check: the portal served by `streamlit run` on a free loopback port,
every page loaded in headless Debian Chromium (driven by Playwright), charts rendered, no
Streamlit exception block or Streamlit internals in the text, the Overview's figures equal to
those `results` computes from the same store, a ?run= link opening that run; a screenshot per
page saved under test-artifacts/portal/ (kept when a test fails)."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, serve

@pytest.fixture(scope="module")
def portal_url(seeded):  # conftest's session store
    with serve(seeded[0]) as url:
        yield url


def listening_addresses(port: int) -> set[str]:
    """Local addresses of the LISTEN sockets on `port`, from /proc/net/tcp and tcp6 (hex)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:
                found.add(addr)
    return found


def test_a_bare_streamlit_run_listens_on_localhost_only(portal_url):
    port = int(portal_url.rsplit(":", 1)[1])
    assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and no IPv6 wildcard either


STREAMLIT_INTERNALS = ("DeltaGenerator", "altair_chart", "write_stream")  # magic printing its own docs


@contextmanager
def _browser_page():
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


def _open(page, url: str, name: str, wait_for: str) -> str:
    """Load a page, wait for what it must draw, screenshot it (always: a failing page's picture
    is the first thing to look at), and return its visible text."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.goto(url)
    try:
        page.wait_for_selector("[data-testid='stMainBlockContainer'] h1", timeout=60_000)
        page.wait_for_selector(wait_for, timeout=60_000)
        page.wait_for_timeout(500)
    finally:
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert page.locator("[data-testid='stException']").count() == 0, name
    body = page.inner_text("body")
    assert not [w for w in STREAMLIT_INTERNALS if w in body], name
    assert "Deploy" not in body and "Started outside the repository root" not in body, name
    return body


CHART = ".js-plotly-plot .main-svg"
TABLE = "[data-testid='stDataFrame']"
HEADING = "[data-testid='stMainBlockContainer'] h1"
WAIT = {"overview": CHART, "ablation": CHART, "runs": TABLE, "run_detail": CHART, "compare": TABLE, "trends": CHART,
        "parallelism": HEADING}


def _expected_text(root: Path) -> dict[str, list[str]]:
    """What each page must say about the seeded store, from `results` on the same records."""
    import results
    from results.analysis import speedups as report
    df = results.load_runs(f"sqlite:///{root / 'mlflow.db'}")
    sha = report.records_frame(root / "runs")["git_sha"].dropna().iloc[0]
    return {
        "overview": ["Overview: what each optimization buys", "cosmoflow / tiny on cpu",
                     "Stability: 'disturbed' names why"],
        "ablation": ["+cuda_graphs: no bar, unsupported:",
                     "measured matmul peak at the run's dtype (fp32's where that is faster)"],
        "runs": [f"{len(df)} of {len(df)} runs, newest first"],
        "run_detail": ["median step (ms)", "download config.json"],
        "compare": ["2 run(s) of A, 2 of B: the CI resamples runs, then steps within them"],
        "trends": [f"every run is from one commit ({sha[:10]})", "No regression across 1 commit(s)"],
        "parallelism": ["No multi-rank strategy runs yet", "Weak scaling: no campaign yet"],
    }


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make system-deps)")
def test_every_page_renders_in_chromium(portal_url, seeded):
    """Every page drawn, and saying what `results` says about the same store."""
    expected = _expected_text(seeded[0])
    with _browser_page() as page:
        for name, wait_for in WAIT.items():
            body = _open(page, f"{portal_url}/{'' if name == 'overview' else name}", name, wait_for)
            missing = [text for text in expected[name] if text not in body]
            assert not missing, (name, missing)
    assert all((ARTIFACTS / f"{n}.png").stat().st_size > 10_000 for n in WAIT)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make system-deps)")
def test_overview_prints_the_figures_results_computes(portal_url, seeded):
    """The labels beside the Overview's points are report.speedup_table's, from the same store."""
    import results
    from portal import charts
    from results.analysis import speedups as report
    from results.stats import estimators as stats
    df = results.load_runs(f"sqlite:///{seeded[0] / 'mlflow.db'}")
    df = df[df["sweep"].str.startswith("portal@")]
    from portal import data
    t = data.verdict_figures(report.speedup_table(df, n_boot=stats.N_BOOT).dropna(subset=["speedup"]))
    want = {charts.speedup_label(*r) for r in zip(t["speedup"], t["ci_lo"], t["ci_hi"], t["verdict"])}
    assert len(want) >= 2  # the baseline and at least one toggle
    with _browser_page() as page:
        _open(page, portal_url, "overview-figures", CHART)
        drawn = set(page.locator(".js-plotly-plot g.textpoint text").all_text_contents())
        grid = page.locator(TABLE).first  # the numbers table, as the grid shows its cells
        headers = grid.locator("[role='columnheader']").all_text_contents()
        cells = grid.locator("[role='gridcell']").all_text_contents()
        text = page.locator("body").inner_text()
    assert drawn == want
    # the latest A/A calibration, as the sweep summary prints it (none in this store)
    assert "A/A calibration: none yet on this store (python -m harness calibrate)" in text
    # the numbers table says the same as results: pooled and paired speedups, stability, per configuration
    cols = {h.strip(): i for i, h in enumerate(headers)}
    rows = {r[0]: r for r in (cells[i:i + len(headers)] for i in range(0, len(cells), len(headers)))}
    full = report.speedup_table(df, n_boot=stats.N_BOOT).set_index("config")
    assert set(rows) == set(full.index)
    for config, r in full.iterrows():
        row = rows[config]
        pooled = charts.speedup_label(r["speedup"], r["ci_lo"], r["ci_hi"], r["verdict"]) if r["speedup"] == r["speedup"] else "-"
        assert row[cols["speedup [95% CI]"]] == pooled, config
        assert row[cols["paired [95% CI]"]] == charts.paired_label(r["paired_speedup"], r["paired_lo"], r["paired_hi"],
                                                                    r["pairs"], r["paired_method"]), config
        assert row[cols["stability"]] == (r["stability"] if isinstance(r["stability"], str) else "-"), config
    assert rows["+channels_last"][cols["paired [95% CI]"]].endswith(" n=2 (t)")  # two repeats, two pairs: t


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make system-deps)")
def test_overview_says_faster_in_every_process_where_only_the_direction_was_called(modes_store):
    """conftest's modes_store (+channels_last's processes at 1.07x and 1.30x, each called faster, the
    combined interval holding 1), in Chromium: the numbers table's verdict, the legend and the
    caption say "in every process", with the combined interval beside it."""
    from portal import charts
    from results.analysis import speedups as report
    root, modes = modes_store
    r = report.speedup_table(report.records_frame(root / "runs")).set_index("config").loc["+channels_last"]
    with serve(root) as url, _browser_page() as page:
        _open(page, f"{url}/?sweep={modes}", "overview-every-process", CHART)
        grid = page.locator(TABLE).first
        headers = [h.strip() for h in grid.locator("[role='columnheader']").all_text_contents()]
        cells = grid.locator("[role='gridcell']").all_text_contents()
        legend = page.locator(".js-plotly-plot g.legend text").all_text_contents()
        text = page.locator("body").inner_text()
    rows = {x[0]: dict(zip(headers, x)) for x in (cells[i:i + len(headers)] for i in range(0, len(cells), len(headers)))}
    assert rows["+channels_last"]["verdict"] == "faster in every process"
    assert rows["+channels_last"]["paired [95% CI]"] == charts.paired_label(
        r["paired_speedup"], r["paired_lo"], r["paired_hi"], r["pairs"], r["paired_method"], r["processes"])
    assert r["paired_lo"] < 1 < r["paired_hi"]  # the interval shown holds 1: the size is uncertain
    assert "faster (CI above 1, or in every process)" in legend
    assert "\"faster in every process\" means each process's own interval said so" in text


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make system-deps)")
def test_a_run_link_opens_that_run(portal_url, seeded):
    """?run=ID reproduces the view: two finished runs' links each show their own median step
    time (the tile's figure, from the store), not the other's, and their quality with what it is
    over (the seeded sweep evaluates 2 batches of 8: a spot check, so the tile says so)."""
    import results
    df = results.load_runs(f"sqlite:///{seeded[0] / 'mlflow.db'}")
    df = df[df["status"] == "finished"].assign(tile=lambda d: [f"{1000 * v:.1f}" for v in d["median_step_s"]])
    df = df.drop_duplicates("tile")
    quality = dict(zip(df["run_id"], df["quality"]))
    (a, ta), (b, tb) = list(zip(df["run_id"], df["tile"]))[:2]
    with _browser_page() as page:
        for rid, mine, other in ((a, ta, tb), (b, tb, ta)):
            body = _open(page, f"{portal_url}/run_detail?run={rid}", f"run_detail-{rid[:8]}", TABLE)
            tile = body.split("median step (ms)", 1)[1].split()[0]
            assert tile == mine != other, body[:2000]
            assert body.split("quality (16 of 96 val samples)", 1)[1].split()[0] == f"{quality[rid]:.4f}", body[:2000]
            assert f"run={rid}" in page.url


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make system-deps)")
def test_every_page_on_a_folder_without_a_store_writes_nothing(tmp_path):
    """Read-only means read-only: every page opened on a mistyped (absent) results folder and on
    one holding only collectives/profile/plan folders creates no file, store or lock there."""
    pages = sorted(p.stem for p in (REPO / "portal" / "pages").glob("*.py"))
    absent = tmp_path / "mistyped"
    only = tmp_path / "no-store"
    for sub in ("comm", "profiles", "plans"):
        (only / sub).mkdir(parents=True)
    before = _tree(only)
    # what each page must say there: the store-backed pages name the missing store and that the
    # portal creates none; Collectives and Planner say they have no records of their own yet
    says = {"collectives": "No collectives records yet", "planner": "No plans yet"}
    for root in (absent, only):
        with serve(root) as url, _browser_page() as page:
            for name in ["overview", *[p for p in pages if p != "overview"]]:
                body = _open(page, f"{url}/{'' if name == 'overview' else name}", f"nostore-{root.name}-{name}",
                             HEADING)
                want = says.get(name, f"No MLflow store at {root / 'mlflow.db'}")
                assert want in body, (root.name, name, body[:500])
                if name not in says:
                    assert "the portal is read-only and creates none" in body, (root.name, name)
    assert not absent.exists()
    assert _tree(only) == before
