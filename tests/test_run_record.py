"""A tiny run end to end: complete record, MLLOG lines, ingest into a real sqlite MLflow store,
load_runs(), idempotent re-ingest, and a SIGTERM mid-run leaving a `killed` record."""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from results.record import schema
from results.store.ingest import ingest_all, ingest_run
from results.store.frames import load_runs, step_samples
from tests.conftest import REPO, harness, run_dirs


@pytest.fixture(scope="module")
def one_run(tmp_path_factory, data_root) -> Path:
    """One tiny run for the module (each run is a process start and a model build: ~6 s)."""
    import os
    base = tmp_path_factory.mktemp("one_run")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(HARNESS_RESULTS=str(base / "results"), HARNESS_DATA=str(data_root), PYTHONPATH=str(REPO),
               HARNESS_STAGE_DIR=str(base / "stage"), OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "2"))
    p = harness(env, "run", "cosmoflow", "--set", "steps=5", "--set", "warmup_steps=2", "--no-ingest")
    assert p.returncode == 0, p.stderr
    # what it measured, then where the record is (5 steps: too few for the median's interval)
    first, last = p.stdout.strip().splitlines()[-2:]
    assert first.startswith("cosmoflow/tiny on cpu: median step ") and "(no interval: < 6 steps), 5 steps" in first
    assert "samples/s" in first and any(f"; {k}" in first for k in ("stable", "noisy: ", "disturbed: "))
    assert last.startswith("finished: ")
    (d,) = run_dirs(env)
    return d


@pytest.fixture
def tiny_run(one_run, env) -> Path:
    """The module's run, copied into this test's results: a test may change or ingest it alone."""
    d = Path(env["HARNESS_RESULTS"]) / "runs" / one_run.name
    shutil.copytree(one_run, d)
    return d


def test_record_is_complete(tiny_run):
    for name in (schema.CONFIG, schema.ENV, schema.METRICS, schema.MLPERF_LOG, schema.SUMMARY, schema.STATUS):
        assert (tiny_run / name).is_file(), name
    rec = schema.read_record(tiny_run, with_metrics=True)
    assert rec["status"]["status"] == "finished" and rec["status"]["ended"] >= rec["status"]["started"]
    assert rec["config"]["run_id"] == tiny_run.name and rec["config"]["variant"] in tiny_run.name
    env = rec["env"]
    for key in ("git_sha", "python", "cpu_model", "cpu_count", "hostname", "command", "gpu_name"):
        assert key in env
    for pkg in ("torch", "nvidia-dali-cuda120", "mlflow", "mlperf-logging"):
        assert env["versions"][pkg], pkg
    assert "harness" in env["command"] and "steps=5" in env["command"]
    # the run timed with glibc's malloc thresholds fixed (harness/measure/allocator.py)
    assert env["malloc"] == {"malloc": "fixed", "mmap_threshold": 32 << 20, "trim_threshold": 1 << 30}
    steps = [m for m in rec["metrics"] if m["kind"] == "step"]
    assert [m["phase"] for m in steps] == ["warmup"] * 2 + ["steady"] * 5
    assert all(m["step_s"] > 0 and m["data_s"] >= 0 for m in steps)
    s = rec["summary"]
    assert s["n_steps"] == 5 and s["global_batch"] == 8
    assert s["samples_per_s"] == pytest.approx(8 / s["median_step_s"])
    assert 0 < s["quality"] < 10 and s["quality_metric"] == "mae"


def test_mllog_lines_parse(tiny_run):
    lines = (tiny_run / schema.MLPERF_LOG).read_text().splitlines()
    assert lines and all(line.startswith(":::MLLOG {") for line in lines)
    events = [json.loads(line[len(":::MLLOG "):]) for line in lines]
    keys = [e["key"] for e in events]
    for required in ("init_start", "init_stop", "run_start", "run_stop", "eval_error", "global_batch_size"):
        assert required in keys, required
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("run_stop")
    stop = events[keys.index("run_stop")]
    assert stop["metadata"]["status"] == "success" and stop["event_type"] == "INTERVAL_END"
    assert all(isinstance(e["time_ms"], int) for e in events)


def test_ingest_load_runs_and_idempotence(tiny_run, tmp_path):
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    assert ingest_run(tiny_run, uri) == "added"
    df = load_runs(uri)
    assert len(df) == 1
    row = df.iloc[0]
    rec = schema.read_record(tiny_run)
    assert row["run_id"] == tiny_run.name and row["status"] == "finished"
    assert row["workload"] == "cosmoflow" and row["toggles_on"] == "baseline"
    assert row["toggles.compile"] == "False" and row["toggles.amp"] == "off"
    assert row["median_step_s"] == pytest.approx(rec["summary"]["median_step_s"])
    assert row["quality"] == pytest.approx(rec["summary"]["quality"])
    assert len(step_samples(row["record_dir"])) == 5
    # again, one by one and in bulk: nothing is added
    assert ingest_run(tiny_run, uri) == "present"
    assert ingest_all(tiny_run.parent, uri)["added"] == []
    assert len(load_runs(uri)) == 1


def test_load_runs_without_a_uri_reads_the_projects_store(tiny_run, tmp_path, monkeypatch):
    """As mlflow.search_runs() uses the default tracking URI: in a notebook, load_runs() alone."""
    import results
    root = tmp_path / "results"
    monkeypatch.setenv("HARNESS_RESULTS", str(root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert ingest_run(tiny_run, f"sqlite:///{root / 'mlflow.db'}") == "added"
    assert list(results.load_runs()["run_id"]) == [tiny_run.name]


@pytest.mark.parametrize("bulk", [True, False])
def test_half_written_run_is_replaced_not_duplicated(tiny_run, tmp_path, bulk):
    """An ingest that died after create_run leaves a run tagged incomplete; the next ingest
    (bulk: one search up front; single: a search per record) deletes it and writes the run in full."""
    from mlflow.tracking import MlflowClient

    from results.store.ingest import COMPLETE_TAG, EXPERIMENT, _client, experiment_id

    uri = f"sqlite:///{tmp_path / 'store.db'}"
    exp = experiment_id(_client(uri))
    MlflowClient(uri).create_run(exp, tags={"run_id": tiny_run.name, "kind": "run", COMPLETE_TAG: "0"})
    if bulk:
        assert ingest_all(tiny_run.parent, uri)["added"] == [tiny_run.name]
    else:
        assert ingest_run(tiny_run, uri) == "added"
    hits = MlflowClient(uri).search_runs([exp], f"tags.run_id = '{tiny_run.name}'")
    assert [h.data.tags[COMPLETE_TAG] for h in hits] == ["1"]
    assert MlflowClient(uri).get_experiment_by_name(EXPERIMENT).experiment_id == exp
    assert len(load_runs(uri)) == 1


def test_unreachable_store_keeps_record_then_make_ingest_catches_up(env, tmp_path):
    env = dict(env, MLFLOW_TRACKING_URI="http://127.0.0.1:9/")  # nothing listens on port 9
    env["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    env["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "2"
    env["HARNESS_INGEST_ATTEMPTS"] = "1"  # `make ingest` would back off ~1 min before giving up
    p = harness(env, "run", "cosmoflow", "--set", "steps=2", "--set", "warmup_steps=1")
    assert p.returncode == 0
    assert "MLflow store not updated" in p.stderr and "make ingest" in p.stderr
    (d,) = run_dirs(env)
    assert schema.read_record(d)["status"]["status"] == "finished"
    bad = subprocess.run([sys.executable, "-m", "results", "ingest"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'later.db'}"
    ok = subprocess.run([sys.executable, "-m", "results", "ingest"], env=env, cwd=REPO,
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "1 added" in ok.stdout
    assert len(load_runs(env["MLFLOW_TRACKING_URI"])) == 1


def test_sigterm_leaves_killed_record_with_steps(env):
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "cosmoflow", "--no-ingest",
                             "--set", "steps=100000"], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    metrics = None
    while time.time() < deadline:
        dirs = run_dirs(env)
        if dirs and (dirs[0] / schema.METRICS).exists():
            metrics = dirs[0] / schema.METRICS
            if len(metrics.read_text().splitlines()) >= 6:
                break
        time.sleep(0.2)
    assert metrics is not None, "run never started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    rec = schema.read_record(metrics.parent, with_metrics=True)
    assert rec["status"]["status"] == "killed"
    assert "SIGTERM" in rec["status"]["reason"]
    steps = [m for m in rec["metrics"] if m["kind"] == "step"]
    assert len(steps) >= 6 and rec["summary"]["steps_done"] == len(steps)
    assert rec["summary"]["median_step_s"] > 0  # the samples so far are summarised
    log = (metrics.parent / schema.MLPERF_LOG).read_text()
    assert '"key": "run_stop"' in log and '"status": "aborted"' in log


def test_crashed_process_record_is_finalized_by_ingest(env, tmp_path):
    """A run that dies without finishing its record (here SIGKILL, as a segfault or the OOM
    killer would) is closed as failed by the next ingest, never left `running` forever."""
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "cosmoflow", "--no-ingest",
                             "--set", "steps=100000"], env=env, cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while time.time() < deadline and not (run_dirs(env) and (run_dirs(env)[0] / schema.METRICS).exists()
                                          and (run_dirs(env)[0] / schema.METRICS).read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.kill()
    proc.wait(timeout=30)
    (d,) = run_dirs(env)
    assert schema.read_record(d)["status"]["status"] == "running"
    uri = f"sqlite:///{tmp_path / 'orphan.db'}"
    assert ingest_run(d, uri) == "added"
    st = schema.read_record(d)["status"]
    assert st["status"] == "failed" and f"process {st['pid']} died" in st["reason"]
    assert load_runs(uri).iloc[0]["status"] == "failed"


def test_ingest_attempts_setting_of_zero_still_tries_once(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_INGEST_ATTEMPTS", "0")
    assert ingest_run(tiny_run, f"sqlite:///{tmp_path / 's.db'}") == "added"
    monkeypatch.setenv("HARNESS_INGEST_ATTEMPTS", "0")  # and a store that fails fails once, plainly
    (tmp_path / "blocked").write_text("a file where the store's folder should be")
    with pytest.raises(Exception) as e:
        ingest_run(tiny_run, f"sqlite:///{tmp_path / 'blocked' / 's.db'}")
    assert not isinstance(e.value, AssertionError)


def test_records_written_before_the_unit_renames_read_with_the_new_keys(tiny_run, tmp_path):
    old = tmp_path / tiny_run.name
    shutil.copytree(tiny_run, old)
    s = json.loads((old / schema.SUMMARY).read_text())
    s = {schema.RENAMED_FROM.get(k, k): v for k, v in s.items()}  # as an older harness wrote it
    assert "peak_flops_measured" in s and "share_data_wait" in s
    (old / schema.SUMMARY).write_text(json.dumps(s))
    assert schema.read_record(old)["summary"] == schema.read_record(tiny_run)["summary"]
