"""History across commits: a real regression, made by a real commit, is flagged by `harness
compare` and the Trends page; a no-change rerun is not.

The project's sources are copied into a fresh git repository; one sweep runs at its first
commit, a second sweep reruns the same commit, then a commit that makes the LM run every
block's forward ten more times and discard it (a slower step, same function) is made and
measured. Records carry the copy's git shas, as they would a real checkout's.

How big the regression must be: the rule's threshold is the series' own drift between the two
sweeps of the first commit, and on the 2-core CI machine those drifted 1.23x once (16.6 vs 13.5
ms median steps, the first sweep's runs falling 18.4, 16.9, 14.7 ms) while three extra forwards
made the step only 1.17x the first sweep's, so the rule rightly called it noise. Ten extra
forwards add ~20 ms to a ~14 ms step: well beyond any drift seen here."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from streamlit.testing.v1 import AppTest

from results.analysis import speedups as report
from results.analysis import trends
from tests.conftest import REPO

SOURCES = ["harness", "workloads", "staging", "results", "pyproject.toml"]
SWEEP = """
    name: trend
    workloads: [lm]
    sizes: [tiny]
    repeats: 2
    matrix: [baseline]
    base: {steps: 30, warmup_steps: 5}
"""
BLOCK_LOOP = "            x = block(x)\n"
WASTE = BLOCK_LOOP + ("            for _ in range(10):  # injected regression: each block's forward 10x more, discarded\n"
                      "                block(x.detach()).sum()\n")


def _git(repo, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def _harness(repo, env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def history(tmp_path_factory, data_root):
    base = tmp_path_factory.mktemp("trends")
    repo = base / "repo"
    for name in SOURCES:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(src, repo / name)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    env = dict(os.environ, HARNESS_RESULTS=str(base / "results"), HARNESS_DATA=str(data_root), PYTHONPATH=str(repo))
    env.pop("MLFLOW_TRACKING_URI", None)
    (base / "sweep.yaml").write_text(textwrap.dedent(SWEEP))
    sweeps = []
    for step in ("first", "rerun", "slow"):
        if step == "slow":
            model = repo / "workloads" / "lm" / "model.py"
            text = model.read_text()
            assert text.count(BLOCK_LOOP) == 1  # the patch lands where meant
            model.write_text(text.replace(BLOCK_LOOP, WASTE))
            _git(repo, "commit", "-qam", "slow: discarded block forwards")
        p = _harness(repo, env, "sweep", str(base / "sweep.yaml"))
        assert p.returncode == 0, p.stderr
        runs = report.records_frame(base / "results" / "runs")
        sweeps.append(sorted(set(runs["sweep"]) - {s for s in sweeps})[0])
    return {"repo": repo, "env": env, "root": base / "results", "sweeps": sweeps,
            "shas": [_git(repo, "rev-parse", "HEAD~1"), _git(repo, "rev-parse", "HEAD")]}


def test_compare_flags_the_slow_commit(history):
    """By git sha and by git ref (resolved in the repository the records came from)."""
    base_sha, head_sha = history["shas"]
    for base, head in ((base_sha[:8], head_sha[:8]), ("HEAD~1", "HEAD")):
        p = _harness(history["repo"], history["env"], "compare", base, head)
        assert p.returncode == 1, p.stdout + p.stderr
        row = next(line for line in p.stdout.splitlines() if line.startswith("lm/tiny/cpu baseline"))
        assert row.endswith("REGRESSION"), row
        assert "1 regression(s) in 1 series" in p.stdout
        assert f"commit {head_sha[:12]}" in p.stdout and "4 runs" in p.stdout  # BASE pools both sweeps at its commit


def test_compare_does_not_flag_a_rerun(history):
    first, rerun, slow = history["sweeps"]
    p = _harness(history["repo"], history["env"], "compare", first, rerun)
    assert p.returncode == 0, p.stdout + p.stderr
    row = next(line for line in p.stdout.splitlines() if line.startswith("lm/tiny/cpu baseline"))
    assert row.endswith("same commit: drift, not a regression") and "no regression in 1 series" in p.stdout
    # the same pair through the library: the figures the CLI printed come from trends.compare
    df = trends.labelled(report.records_frame(history["root"] / "runs"))
    t = trends.compare(df, df["sweep"] == first, df["sweep"] == slow)
    assert t["verdict"].tolist() == [trends.REGRESSION] and t["ratio"].iloc[0] > t["threshold"].iloc[0]
    # the threshold is the series' measured drift between the two sweeps of the first commit, if above asv's 1.10
    first_two = [trends.decide(trends._samples(df[df["sweep"] == a]), trends._samples(df[df["sweep"] == b]))
                 for a, b in ((first, rerun),)][0]
    drift = max(first_two["ratio"], 1 / first_two["ratio"])
    assert t["threshold"].iloc[0] == pytest.approx(max(trends.RATIO, drift))
    assert (t[["base_runs", "head_runs"]].iloc[0] == [2, 2]).all()


def test_compare_bad_ref_is_one_line(history):
    p = _harness(history["repo"], history["env"], "compare", "nosuchsweep", "HEAD")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "'nosuchsweep' is not a sweep or commit" in p.stderr and "sweeps: trend" in p.stderr


def test_trends_page_marks_the_regression(history, monkeypatch):
    monkeypatch.setenv("HARNESS_RESULTS", str(history["root"]))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    at = AppTest.from_file(str(REPO / "portal" / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/trends.py").run()
    assert not at.exception, [e.value for e in at.exception]
    head = history["shas"][1][:10]
    assert [e.value for e in at.error] == [
        f"1 regression(s): lm/tiny/cpu baseline at {head} "
        f"({at.dataframe[0].value.set_index('commit').loc[head, 'vs_previous']:.2f}× the previous commit's step time)"]
    table = at.dataframe[0].value.set_index("commit")
    assert table.loc[history["shas"][0][:10], "verdict"] == "first" and table.loc[head, "verdict"] == "regression"
    assert table.loc[history["shas"][0][:10], "runs"] == 4 and table.loc[head, "runs"] == 2
    assert at.query_params["series"] in ("lm/tiny/cpu", ["lm/tiny/cpu"])


def _runs(rng, medians_ms, n=40, spread=0.03):
    return [list(m / 1e3 * (1 + spread * rng.standard_normal(n))) for m in medians_ms]


def test_the_rule_needs_size_significance_and_agreeing_runs():
    """asv's two conditions, and the run-level interval that keeps one busy run from deciding."""
    import numpy as np
    rng = np.random.default_rng(0)
    base = _runs(rng, [10, 10.2, 9.9])
    assert trends.decide(base, _runs(rng, [15, 15.3, 14.8]))["verdict"] == trends.REGRESSION
    assert trends.decide(base, _runs(rng, [6, 6.1, 5.9]))["verdict"] == trends.IMPROVEMENT
    assert trends.decide(base, _runs(rng, [10.1, 9.9, 10.0]))["verdict"] == trends.SAME
    small = trends.decide(base, _runs(rng, [10.6, 10.7, 10.5]))  # significant, but only 6%
    assert small["p"] < trends.P_MAX and small["verdict"] == trends.SAME
    busy = trends.decide(base, _runs(rng, [10, 10.1, 40]))  # one rerun on a loaded machine
    assert busy["p"] < trends.P_MAX and busy["ratio_lo"] < 1 < busy["ratio_hi"]
    assert busy["verdict"] in (trends.SAME, trends.BEYOND_NOISE)
