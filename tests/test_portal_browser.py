"""One real-browser check: the portal served by `streamlit run` on a free loopback port,
every page loaded in headless Debian Chromium (driven by Playwright), charts rendered, no
Streamlit exception block, screenshots saved under test-artifacts/."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import REPO

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts" / "portal"
PAGES = {"overview": "", "ablation": "ablation", "runs": "runs", "run_detail": "run_detail", "compare": "compare"}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve(results_root: Path):
    """A bare `streamlit run portal/app.py` (only a free port given) from the repository root,
    as a user might start it: the portal's own .streamlit/config.toml must keep it safe."""
    port = _free_port()
    env = dict(os.environ, HARNESS_RESULTS=str(results_root), PYTHONPATH=str(REPO))
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "portal/app.py", "--server.port", str(port)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                time.sleep(0.3)
        else:
            pytest.fail("streamlit did not become healthy in 60 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


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


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian chromium not installed (make system-deps)")
def test_every_page_renders_in_chromium(portal_url):
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for name, path in PAGES.items():
            page.goto(f"{portal_url}/{path}")
            page.wait_for_selector("[data-testid='stMainBlockContainer'] h1", timeout=60_000)
            if name in ("overview", "run_detail", "ablation"):
                page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)  # the chart drew
            else:
                page.wait_for_selector("[data-testid='stDataFrame']", timeout=60_000)
            page.wait_for_timeout(500)
            assert page.locator("[data-testid='stException']").count() == 0, name
            body = page.inner_text("body")
            assert "Deploy" not in body and "Started outside the repository root" not in body, name
            page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
        browser.close()
    assert all((ARTIFACTS / f"{n}.png").stat().st_size > 10_000 for n in PAGES)
