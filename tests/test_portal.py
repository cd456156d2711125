"""Portal pages through streamlit's AppTest against a real sqlite MLflow store in a temp dir,
seeded with a real tiny run plus a crafted failure record."""
from __future__ import annotations

import json
import shutil

import pytest
from streamlit.testing.v1 import AppTest

from results.ingest import ingest_all
from tests.conftest import REPO, harness, run_dirs

APP = str(REPO / "portal" / "app.py")
XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, data_root):
    import os
    root = tmp_path_factory.mktemp("portal") / "results"
    env = dict(os.environ, HARNESS_RESULTS=str(root), HARNESS_DATA=str(data_root), PYTHONPATH=str(REPO))
    env.pop("MLFLOW_TRACKING_URI", None)
    p = harness(env, "run", "cosmoflow", "--no-ingest", "--set", "steps=3", "--set", "warmup_steps=1")
    assert p.returncode == 0, p.stderr
    (real,) = run_dirs(env)
    crafted = real.with_name(real.name + "-crafted")
    shutil.copytree(real, crafted)
    cfg = json.loads((crafted / "config.json").read_text())
    cfg.update(run_id=crafted.name, sweep=XSS)
    (crafted / "config.json").write_text(json.dumps(cfg))
    st = json.loads((crafted / "status.json").read_text())
    st.update(status="failed", reason=f"RuntimeError: {XSS}")
    (crafted / "status.json").write_text(json.dumps(st))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    assert len(ingest_all(root / "runs", uri)["added"]) == 2
    return root, real.name, crafted.name


def _app(monkeypatch, root) -> AppTest:
    monkeypatch.setenv("HARNESS_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_runs_page_empty_state(monkeypatch, tmp_path):
    at = _app(monkeypatch, tmp_path / "empty")
    assert any("make demo" in i.value for i in at.info)
    assert not at.dataframe


def test_runs_page_lists_runs_with_failures_and_reasons(monkeypatch, seeded):
    root, real, crafted = seeded
    at = _app(monkeypatch, root)
    df = at.dataframe[0].value
    assert set(df["run_id"]) == {real, crafted}
    row = df.set_index("run_id").loc[crafted]
    assert row["status"] == "failed" and row["reason"] == f"RuntimeError: {XSS}"
    assert df.set_index("run_id").loc[real, "status"] == "finished"
    # user strings are data in a dataframe, never markdown/HTML elements
    assert all(XSS not in m.value for m in at.markdown)


def test_runs_page_status_filter(monkeypatch, seeded):
    root, real, crafted = seeded
    at = _app(monkeypatch, root)
    status = next(m for m in at.multiselect if m.label == "status")
    status.set_value(["failed"]).run()
    assert list(at.dataframe[0].value["run_id"]) == [crafted]
