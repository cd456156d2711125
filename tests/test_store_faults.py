"""A tracking server that is down or failing costs a run or an ingest a bounded time (the store
budget, 30 s by default), with MLflow's own HTTP retries folded into ours: real refusing port,
real server answering 500, and no MLFLOW_HTTP_* override in the environment."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from results.record import schema
from tests.conftest import REPO, harness, run_dirs

BOUND_S = 90  # budget 30 s plus process start-up; before the fix a run waited ~510 s


class _Fails(BaseHTTPRequestHandler):
    def _fail(self):
        type(self).hits += 1
        body = b'{"error_code": "INTERNAL_ERROR", "message": "boom"}'
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = _fail

    def log_message(self, *a):  # quiet
        pass


@pytest.fixture
def failing_server():
    handler = type("Handler", (_Fails,), {"hits": 0})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    srv.shutdown()
    srv.server_close()


def _refusing_uri() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connections are refused
    return f"http://127.0.0.1:{port}"


def _clean(env):
    return {k: v for k, v in env.items() if not k.startswith("MLFLOW_HTTP_") and k != "HARNESS_INGEST_ATTEMPTS"}


def test_run_against_a_server_answering_500_keeps_its_record_in_bounded_time(env, failing_server):
    uri, handler = failing_server
    e = dict(_clean(env), MLFLOW_TRACKING_URI=uri)
    t0 = time.monotonic()
    p = harness(e, "run", "cosmoflow", "--set", "steps=2", "--set", "warmup_steps=1", timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert "MLflow store not updated" in p.stderr and "make ingest" in p.stderr
    assert handler.hits >= 1  # the server was really asked
    assert took < BOUND_S, took
    (d,) = run_dirs(e)
    assert schema.read_record(d)["status"]["status"] == "finished"  # nothing recorded is lost


def test_ingest_against_a_refusing_port_says_so_in_one_line_in_bounded_time(env, failing_server):
    uri, _ = failing_server
    e = dict(_clean(env), MLFLOW_TRACKING_URI=uri)
    assert harness(e, "run", "cosmoflow", "--no-ingest", "--set", "steps=2", "--set", "warmup_steps=1").returncode == 0
    for target in (_refusing_uri(), uri):
        e["MLFLOW_TRACKING_URI"] = target
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "results", "ingest"], env=e, cwd=REPO,
                           capture_output=True, text=True, timeout=300)
        took = time.monotonic() - t0
        assert p.returncode == 2, (target, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and target in p.stderr, p.stderr
        assert took < BOUND_S, (target, took)


def test_store_budget_setting_is_checked(monkeypatch):
    from results.store import tracking
    for bad in ("soon", "0", "-5"):
        monkeypatch.setenv("HARNESS_STORE_BUDGET_S", bad)
        with pytest.raises(ValueError, match="HARNESS_STORE_BUDGET_S"):
            tracking.store_budget_s()
    monkeypatch.setenv("HARNESS_STORE_BUDGET_S", "4")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
    assert tracking.store_budget_s() == 4.0
    tracking.bound_http("http://127.0.0.1:1")
    assert tracking.os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert float(tracking.os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]) == 4
