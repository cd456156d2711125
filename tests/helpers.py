"""Helpers the test files share (one copy each): the MPI launcher for subprocess runs, the
portal under Streamlit's AppTest, the portal served to a real Chromium. Fixtures live in
conftest.py; this module holds plain functions and constants."""
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

from harness.parallel.dist import mpiexec
from tests.conftest import REPO

MPIEXEC = mpiexec()  # harness/parallel/dist.py: the one lookup
APP = str(REPO / "portal" / "app.py")


def mpirun(env, n: int, *args: str, timeout: float = 300, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`mpiexec -n N python ARGS...` from the repository root, output captured."""
    return subprocess.run([MPIEXEC, *extra, "-n", str(n), sys.executable, *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def app_page(monkeypatch, root, page: str | None = None, query: dict[str, str] | None = None,
             timeout: float = 120):
    """The portal on results folder `root` under Streamlit's AppTest, switched to `page` (a
    pages/<name>.py stem or path), run without an exception."""
    from streamlit.testing.v1 import AppTest
    monkeypatch.setenv("HARNESS_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.run()
    for k, v in (query or {}).items():  # a shared link's state (?run=...)
        at.query_params[k] = v
    if page:
        at.switch_page(page if page.endswith(".py") else f"pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts" / "portal"
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


# -- the store: real records and concurrent ingesters --------------------------------------------
def make_records(runs: Path, n: int, sweep: str) -> list[Path]:
    """Real run records (RunRecord writes them as a run would), a few steps each."""
    from harness.config.run_config import RunConfig
    from harness.run.record import RunRecord
    out = []
    for i in range(n):
        rec = RunRecord(runs, RunConfig(workload="lm", seed=i + 1, sweep=sweep), {"hostname": "test"})
        for s in range(5):
            rec.log_step(step=s, phase="warmup" if s == 0 else "steady", t=0.1 * s, step_s=0.1 + 0.001 * i,
                         data_s=0.001, loss=4.0 - 0.1 * s)
        rec.info.update(global_batch=8)
        rec.finish("finished")
        out.append(rec.dir)
    return out


def ingest_env() -> dict:
    import os
    e = dict(os.environ)
    e.pop("MLFLOW_TRACKING_URI", None)  # the store under --results, whatever the caller's shell says
    return e


def concurrent_ingests(results: Path, n: int, env: dict | None = None) -> list[tuple[int, str, str]]:
    procs = [subprocess.Popen([sys.executable, "-m", "results", "ingest", "--results", str(results)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or ingest_env())
             for _ in range(n)]
    outs = [p.communicate(timeout=600) for p in procs]
    return [(p.returncode, *o) for p, o in zip(procs, outs)]


def store_runs(uri: str) -> dict:
    """What MLflow itself holds, not the run index: active runs per record, deleted runs, parents."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient
    c = MlflowClient(uri)
    exp = c.get_experiment_by_name("mlperf-harness").experiment_id
    active = c.search_runs([exp], "tags.kind = 'run'", max_results=5000)
    deleted = c.search_runs([exp], "", run_view_type=ViewType.DELETED_ONLY, max_results=5000)
    parents = c.search_runs([exp], "tags.kind = 'sweep'", max_results=5000)
    return {"run_ids": sorted(r.data.tags["run_id"] for r in active), "deleted": len(deleted),
            "incomplete": sum(r.data.tags.get("ingest_complete") != "1" for r in active),
            "parents": sorted(r.data.tags["sweep"] for r in parents)}


# -- the portal in a real browser ---------------------------------------------------------------
def visit(browser, url: str, path: str, name: str) -> tuple[str, str]:
    """(page text, first chart's text) of a portal page once its charts and tables are drawn;
    a full-page screenshot goes to test-artifacts/portal/<name>.png."""
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    page.goto(f"{url}/{path}")
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
    page.wait_for_selector("[data-testid='stDataFrame']", timeout=60_000)
    page.wait_for_timeout(500)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert page.locator("[data-testid='stException']").count() == 0
    body, legend = page.inner_text("body"), page.inner_text(".js-plotly-plot")
    assert "DeltaGenerator" not in body
    page.close()
    return body, legend
