"""One validating reader for records (results/record/schema.read_record): a record whose JSON
parses but has the wrong shape is skipped with one line naming its folder and the problem,
wherever records are walked (the frame, summary, ingest, a sweep), and nothing else stops.
Property-based: any JSON in any record file gives a record or a RecordError, never another error."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from results.analysis import speedups as report
from results.record import schema
from tests.conftest import REPO, harness, run_dirs

# (file, how to spoil it, what the skip line must name): the shapes that crashed readers before
SPOILS = [
    ("config.json", lambda c: {k: v for k, v in c.items() if k != "run_id"}, "run_id is missing"),
    ("config.json", lambda c: [1, 2], "config.json is list"),
    ("config.json", lambda c: "a string", "config.json is str"),
    ("env.json", lambda e: None, "env.json is NoneType"),
    ("status.json", lambda s: {k: v for k, v in s.items() if k != "started"}, "started is missing"),
    ("status.json", lambda s: {**s, "started": "yesterday"}, "started is 'yesterday'"),
    ("summary.json", lambda s: [], "summary.json is list"),
    ("config.json", lambda c: {**c, "toggles": "yes"}, "toggles is str"),
    ("status.json", lambda s: {**s, "status": "exploded"}, "status 'exploded' is not one of"),
]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory, data_root):
    import os
    root = tmp_path_factory.mktemp("malformed")
    e = dict(os.environ, HARNESS_RESULTS=str(root / "results"), HARNESS_DATA=str(data_root), PYTHONPATH=str(REPO))
    e.pop("MLFLOW_TRACKING_URI", None)
    p = harness(e, "run", "cosmoflow", "--no-ingest", "--set", "steps=2", "--set", "warmup_steps=1")
    assert p.returncode == 0, p.stderr
    (d,) = run_dirs(e)
    return d


def _spoiled(good: Path, runs: Path) -> dict[str, str]:
    """A copy of `good` per spoil under runs/, each its own folder name; {folder: expected text}."""
    want = {}
    for i, (fname, spoil, says) in enumerate(SPOILS):
        d = runs / f"{good.name}-bad{i}"
        shutil.copytree(good, d)
        cfg = json.loads((d / "config.json").read_text())
        cfg["run_id"] = d.name
        (d / "config.json").write_text(json.dumps(cfg))
        (d / fname).write_text(json.dumps(spoil(json.loads((d / fname).read_text()))))
        want[d.name] = says
    return want


def test_each_malformed_record_is_named_and_the_rest_are_read(good_run, tmp_path):
    runs = tmp_path / "results" / "runs"
    shutil.copytree(good_run, runs / good_run.name)
    want = _spoiled(good_run, runs)
    df = report.records_frame(runs)  # raised KeyError/TypeError/AttributeError before
    assert (df["status"] == "finished").sum() == 1
    lines = report.skipped(df)
    assert len(lines) == len(SPOILS)
    for name, says in want.items():
        (line,) = [x for x in lines if f"/{name}:" in x]
        assert line.startswith("skipped: ") and says in line, (line, says)


def test_summary_and_ingest_go_on_past_malformed_records(good_run, tmp_path):
    import os
    results = tmp_path / "results"
    shutil.copytree(good_run, results / "runs" / good_run.name)
    want = _spoiled(good_run, results / "runs")
    env = dict(os.environ, HARNESS_RESULTS=str(results), PYTHONPATH=str(REPO))
    env.pop("MLFLOW_TRACKING_URI", None)
    s = subprocess.run([sys.executable, "-m", "results", "summary", "--sweep", "none"], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert s.returncode == 0, s.stderr
    assert sum(x.startswith("skipped: ") for x in s.stderr.splitlines()) == len(want), s.stderr
    i = subprocess.run([sys.executable, "-m", "results", "ingest"], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert i.returncode == 0, i.stderr  # malformed is not "rejected by the store"
    assert "1 added" in i.stdout and f"{len(want)} malformed" in i.stdout and "0 rejected" in i.stdout, i.stdout
    skipped = [x for x in i.stderr.splitlines() if x.startswith("  skipped: malformed record")]
    assert len(skipped) == len(want) and not any("KeyError" in x or "TypeError" in x for x in skipped), i.stderr


def test_a_sweep_runs_beside_malformed_records(good_run, tmp_path, data_root):
    """Every non-baseline cell used to exit 1 before running (the gate's reference lookup read
    the records); now the sweep runs, its summary names what it skipped."""
    import os
    results = tmp_path / "results"
    _spoiled(good_run, results / "runs")
    env = dict(os.environ, HARNESS_RESULTS=str(results), HARNESS_DATA=str(data_root), PYTHONPATH=str(REPO))
    env.pop("MLFLOW_TRACKING_URI", None)
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: beside\nworkloads: [cosmoflow]\nrepeats: 1\nmatrix: [baseline, add_one_in]\n"
                     "toggles: [channels_last]\nbase: {steps: 2, warmup_steps: 1}\n")
    p = harness(env, "sweep", str(sweep), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    df = report.records_frame(results / "runs")
    mine = df[df["sweep"].fillna("").str.startswith("beside@")]
    assert sorted(mine["status"]) == ["finished", "finished"]
    assert "skipped: " in p.stderr


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=12)
# a valid record's files with some keys replaced or dropped, so most examples get past the first check
VALID_CONFIG = {"run_id": "r", "variant": "v", "workload": "lm", "size": "tiny", "device": "cpu",
                "toggles": {"amp": "off"}, "parallel": {}, "sweep": "s@20260101T000000-1ab", "repeat": 0, "ranks": 1}
VALID_STATUS = {"status": "finished", "started": 1.0, "ended": 2.0, "reason": ""}


def _edited(valid: dict) -> st.SearchStrategy:
    keys = st.sampled_from(sorted(valid) + ["kind", "extra"])
    return st.builds(lambda over, drop: {k: v for k, v in {**valid, **over}.items() if k not in drop},
                     st.dictionaries(keys, JSON | st.just("comm"), max_size=2), st.sets(keys, max_size=1))


FIELDS = _edited(VALID_CONFIG)
STATUS = _edited(VALID_STATUS)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config=FIELDS | JSON, env=JSON, status=STATUS | JSON, summary=JSON | st.none(), raw=st.binary(max_size=40))
def test_any_json_in_any_record_file_is_a_record_or_a_record_error(tmp_path_factory, config, env, status, summary,
                                                                    raw):
    d = tmp_path_factory.mktemp("fuzz") / "runs" / "r"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(config))
    (d / "env.json").write_text(json.dumps(env))
    (d / "status.json").write_text(json.dumps(status))
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    (d / "metrics.jsonl").write_bytes(raw)
    not_a_run = False
    try:
        rec = schema.read_record(d, with_metrics=True)
    except schema.RecordError as e:
        assert str(e).startswith("r: ")
    else:
        assert isinstance(rec["config"], dict) and isinstance(rec["summary"], dict)
        not_a_run = rec["config"].get("kind", "run") != "run"  # a valid collectives record: not a run
    df = report.records_frame(d.parent)  # never raises: a bad record is a 'broken' row
    assert len(df) == (0 if not_a_run else 1)


def test_a_collectives_record_among_the_runs_is_not_read_as_a_run(tmp_path):
    """Found by the fuzz above: a valid `kind: comm` record (no device, variant, workload) in runs/
    made records_frame raise KeyError; it is left out, as load_runs leaves it out (kind = run)."""
    d = tmp_path / "runs" / "c"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"run_id": "c", "kind": "comm"}))
    (d / "env.json").write_text("{}")
    (d / "status.json").write_text(json.dumps({"status": "finished", "started": 1.0, "ended": 2.0}))
    assert schema.read_record(d)["config"]["kind"] == "comm"
    assert report.records_frame(tmp_path / "runs").empty
