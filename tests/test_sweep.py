"""Sweep files: validation (file, line and key named), matrix expansion, interleaving, and a
small real sweep where an unsupported configuration does not stop the others."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.experiments import sweep
from results.analysis import speedups as report
from results.store.frames import step_samples
from results.stats import estimators as stats
from results.stats import interleaved
from harness.config.run_config import RunConfig, UsageError
from tests.conftest import REPO, harness, run_dirs


def _write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_expansion_sets_and_labels(tmp_path):
    s = sweep.load(_write(tmp_path, """
        workloads: [cosmoflow]
        toggles: [channels_last, compile, amp, cuda_graphs]
    """))
    base = RunConfig(workload="cosmoflow")
    cells = sweep.expand(s, base, applicable={"channels_last", "compile", "amp"})
    labels = [label for label, _ in cells]
    # one name per configuration: the sweep's labels are results' (labels.config_label), amp's value shown
    assert labels == ["baseline", "+channels_last", "+compile", "+amp=bf16", "+cuda_graphs", "all_on",
                      "all_on-channels_last", "all_on-compile", "all_on-amp"]
    by = dict(cells)
    assert by["baseline"].toggles.enabled() == []
    assert by["+amp=bf16"].toggles.amp == "bf16"  # default on-value for amp
    assert by["all_on"].toggles.enabled() == ["channels_last", "compile", "amp"]  # cuda_graphs can't run here
    assert by["all_on-compile"].toggles.enabled() == ["channels_last", "amp"]


SWEEP_FILES = sorted((REPO / "harness" / "sweeps").glob("*.yaml"))


def test_the_bundled_sweep_files_are_found():
    assert len(SWEEP_FILES) >= 5  # the parametrized check below is not vacuous


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.stem)
def test_bundled_sweep_files_load_and_plan(path):
    """The shipped sweeps (demo, gpu-check, gpu-graphs ...) validate and expand; a typo in one
    would otherwise surface only on the machine it is meant for."""
    s = sweep.load(path)
    runs = sweep.plan(s, "cuda" if path.stem.startswith("gpu") else "cpu")
    assert runs and {c.workload for _, c in runs} == set(s.workloads)


def test_interleaving_is_round_robin():
    base = RunConfig(workload="cosmoflow")
    cells = [("A", base), ("B", base), ("C", base)]
    order = [(label, c.repeat) for label, c in sweep.interleave(cells, 3)]
    assert order == [("A", 0), ("B", 0), ("C", 0), ("A", 1), ("B", 1), ("C", 1), ("A", 2), ("B", 2), ("C", 2)]


def test_default_repeats_at_least_five(tmp_path):
    assert sweep.load(_write(tmp_path, "workloads: [cosmoflow]\n")).repeats >= 5


TOP_UP = "workloads: [cosmoflow]\nrepeats: 2\nbase: {interleave: true}\n"


@pytest.mark.parametrize("text, fragment", [
    ("workloads: [cosmoflow]\nrepeat: 3\n", "s.yaml:2: repeat: unknown key"),
    ("workloads: [cosmoflow]\ntoggles: [nhwc]\n", "nhwc: unknown toggle; valid toggles: dali, channels_last"),
    ("workloads: [bert]\n", "unknown workload 'bert'; valid workloads: cosmoflow, deepcam, lm"),
    ("workloads: [cosmoflow]\nrepeats: two\n", "s.yaml:2: repeats: expected an integer >= 1"),
    ("workloads: [cosmoflow]\nbase:\n  stepz: 3\n", "s.yaml:3: stepz: unknown config key(s) ['stepz']"),
    ("workloads: [cosmoflow]\nbase:\n  toggles: {compile: sure}\n", "s.yaml:3: compile: toggles.compile expects a bool"),
    ("workloads: [cosmoflow]\non_values: {amp: fp8}\n", "s.yaml:2: on_values: toggles.amp must be one of"),
    ("workloads: [cosmoflow]\nbase:\n  steps: many\n", "s.yaml:3: steps: steps expects int"),
    ("workloads: [cosmoflow]\nmatrix: [everything]\n", "everything: unknown matrix set"),
    ("workloads: [cosmoflow\n", "not valid YAML"),
    # the process top-up (harness/experiments/top_up.py)
    (TOP_UP + "top_up: {precision: 0}\n", "s.yaml:4: top_up: precision is a relative half-width between 0 and 1"),
    (TOP_UP + "top_up: {max_repeats: 2}\n",
     "s.yaml:4: top_up: max_repeats: expected an integer above the sweep's repeats (2)"),
    (TOP_UP + "top_up: {budget_s: .nan}\n", "s.yaml:4: top_up: budget_s: expected seconds > 0"),
    (TOP_UP + "top_up: {processes: 4}\n", "unknown key 'processes'; valid keys: precision, max_repeats, budget_s"),
    (TOP_UP + "top_up: 4\n", "top_up: expected a mapping"),
    ("workloads: [cosmoflow]\nrepeats: 2\ntop_up: {}\n", "top_up: needs `base: {interleave: true}`"),
])
def test_bad_sweep_files_name_line_and_key(tmp_path, text, fragment):
    with pytest.raises(UsageError) as e:
        sweep.load(_write(tmp_path, text))
    assert fragment in str(e.value)


def test_bad_sweep_file_cli_exit_2_before_running(env, tmp_path):
    p = harness(env, "sweep", str(_write(tmp_path, "workloads: [cosmoflow]\ntoggles: [warp]\n")), timeout=120)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "warp" in p.stderr
    assert not run_dirs(env)


def test_small_sweep_records_every_cell_and_prints_table(env, tmp_path):
    f = _write(tmp_path, """
        name: t
        workloads: [cosmoflow]
        repeats: 2
        matrix: [baseline, add_one_in]
        toggles: [channels_last, cuda_graphs]
        base: {steps: 3, warmup_steps: 1}
    """)
    p = harness(env, "sweep", str(f), timeout=900)
    assert p.returncode == 0, p.stderr
    statuses = {}
    for d in run_dirs(env):
        cfg = json.loads((d / "config.json").read_text())
        st = json.loads((d / "status.json").read_text())["status"]
        statuses.setdefault(tuple(cfg["toggles"][t] for t in ("channels_last", "cuda_graphs")), []).append(
            (cfg["repeat"], st))
    assert sorted(statuses[(False, False)]) == [(0, "finished"), (1, "finished")]
    assert sorted(statuses[(True, False)]) == [(0, "finished"), (1, "finished")]
    assert sorted(statuses[(False, True)]) == [(0, "unsupported"), (1, "unsupported")]
    assert "ingested 6 new records" in p.stdout
    for text in ("+channels_last", "+cuda_graphs", "cuda_graphs needs a CUDA device", "baseline", "paired = what ran together",
                 "verdicts on: paired = separate processes paired by repeat", "A/A calibration: none yet"):
        assert text in p.stdout
    # the paired speedup: each repeat's baseline run against the same repeat's +channels_last run
    runs_root = Path(env["HARNESS_RESULTS"], "runs")
    # one name per configuration: each cell's label (cells.json) is the label results gives its runs
    frame = report.records_frame(runs_root)
    by_variant = dict(zip(frame["variant"], report.label_configs(frame)))
    (cells_file,) = Path(env["HARNESS_RESULTS"], "sweeps").glob("*/cells.json")
    cells = json.loads(cells_file.read_text())
    assert {c["variant"]: c["label"] for c in cells} == by_variant
    table = report.speedup_table(frame).set_index("config")
    med = {}
    for d in run_dirs(env):
        cfg = json.loads((d / "config.json").read_text())
        samples = step_samples(d)
        if samples:
            med[(cfg["toggles"]["channels_last"], cfg["repeat"])] = float(np.median(samples))
    ratios = [med[(False, r)] / med[(True, r)] for r in (0, 1)]
    row = table.loc["+channels_last"]
    assert row["pairs"] == 2 and row["paired_method"] == "t on log ratios"  # 2 pairs: geometric mean, Student's t
    assert row["paired_speedup"] == pytest.approx(float(np.exp(np.mean(np.log(ratios)))))
    assert row["paired_lo"] <= row["paired_speedup"] <= row["paired_hi"]
    assert row["verdict_on"] == "paired"  # two pairs: the verdict is on their t interval, not the pooled bootstrap
    assert row["verdict"] == stats.verdict(row["paired_lo"], row["paired_hi"], row["paired_speedup"])
    assert pd.isna(table.loc["+cuda_graphs"].get("paired_speedup"))  # unsupported: nothing to pair


def test_an_interleaved_sweep_judges_each_toggle_on_its_in_process_blocks(env, tmp_path):
    """interleave: true - each toggle cell measures its baseline in the same process; the baseline
    cell stays a plain run (the gate's reference); the verdict is on the processes' combined
    interleaved interval, and the summary says so."""
    f = _write(tmp_path, """
        name: t
        workloads: [cosmoflow]
        repeats: 2
        matrix: [baseline, add_one_in]
        toggles: [channels_last]
        base: {steps: 3, warmup_steps: 1, interleave: true, budget_s: 2, profile_steps: 0}
    """)
    p = harness(env, "sweep", str(f), timeout=900)
    assert p.returncode == 0, p.stderr
    frame = report.records_frame(Path(env["HARNESS_RESULTS"], "runs"))
    labels = report.label_configs(frame)
    assert frame.loc[labels == "baseline", "ab_ratio"].isna().all()  # the plain reference runs
    assert frame.loc[labels == "+channels_last", "ab_ratio"].notna().all()
    assert (frame.loc[labels == "+channels_last", "gate_passed"] == 1).all()
    row = report.speedup_table(frame).set_index("config").loc["+channels_last"]
    assert row["paired_method"] == interleaved.COMBINED and row["processes"] == 2 and row["verdict_on"] == "interleaved"
    got = interleaved.combine(list(zip(*(frame.loc[labels == "+channels_last", k] for k in ("ab_ratio", "ab_lo", "ab_hi")))))
    assert row["paired_speedup"] == pytest.approx(got["ratio"])
    assert row["verdict"] == stats.verdict(row["paired_lo"], row["paired_hi"], row["paired_speedup"])
    assert "(i x2)" in p.stdout and "verdicts on: interleaved = in-process interleaved blocks" in p.stdout


FAULT = '''
import harness.run.loop as _loop
_train = _loop.train
def train(cfg, *a, **k):
    if cfg.toggles.channels_last:
        raise RuntimeError("injected fault for the channels_last cell")
    return _train(cfg, *a, **k)
_loop.train = train
'''


def test_injected_failure_does_not_stop_sweep_and_rerun_failed_reruns_only_it(env, tmp_path):
    f = _write(tmp_path, """
        name: inject
        workloads: [cosmoflow]
        repeats: 1
        matrix: [baseline, add_one_in]
        toggles: [channels_last, dali]
        base: {steps: 2, warmup_steps: 1}
    """)
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(FAULT)  # imported by every child python at start-up
    faulty = dict(env, PYTHONPATH=f"{hook}:{env['PYTHONPATH']}")
    p = harness(faulty, "sweep", str(f), timeout=900)
    assert p.returncode == 0, p.stderr

    def by_status():
        out = {}
        for d in run_dirs(env):
            cfg = json.loads((d / "config.json").read_text())
            st = json.loads((d / "status.json").read_text())
            out.setdefault(st["status"], []).append((cfg["toggles"]["channels_last"], cfg["toggles"]["dali"], st["reason"]))
        return out

    first = by_status()
    assert len(first["failed"]) == 1 and all(cl and "injected fault" in r for cl, _, r in first["failed"])
    assert len(first["finished"]) == 2  # baseline and +dali, despite the failure
    assert "injected fault" in p.stdout  # the failure's reason is in the summary
    p2 = harness(env, "sweep", str(f), "--rerun-failed", timeout=900)
    assert p2.returncode == 0, p2.stderr
    assert "1 to run" in p2.stdout
    second = by_status()
    assert len(run_dirs(env)) == 4 and len(second["finished"]) == 3  # only the failed cell ran again


def test_sigterm_to_the_sweep_stops_its_cell_records_it_killed_and_ingests(env, tmp_path):
    """`kill <sweep pid>`: the running cell gets SIGTERM too (own process group), records
    itself `killed` and is ingested; the next cell never starts; the sweep exits 143."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import REPO, tiny_dataset
    tiny_dataset(Path(env["HARNESS_DATA"]), "lm")  # generated beforehand: the cell starts training at once
    path = _write(tmp_path, """
        name: stopme
        workloads: [lm]
        toggles: [amp]
        matrix: [baseline, add_one_in]
        repeats: 1
        base: {steps: 100000, warmup_steps: 1, profile_steps: 0}
    """)
    sweep = subprocess.Popen([sys.executable, "-m", "harness", "sweep", str(path)], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = Path(env["HARNESS_RESULTS"]) / "runs"
    deadline = time.monotonic() + 300
    while not list(runs.glob("*/metrics.jsonl")) or not list(runs.glob("*/metrics.jsonl"))[0].stat().st_size:
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        time.sleep(0.5)
    (running,) = runs.iterdir()
    pid = json.loads((running / "status.json").read_text())["pid"]  # the cell's run process
    sweep.send_signal(signal.SIGTERM)
    out, err = sweep.communicate(timeout=180)
    assert sweep.returncode == 128 + signal.SIGTERM, err[-600:]
    (rec,) = runs.iterdir()  # the second cell never started
    status = json.loads((rec / "status.json").read_text())
    assert status["status"] == "killed"
    with pytest.raises(ProcessLookupError):  # the cell's process is gone, not re-parented and running on
        os.kill(pid, 0)
    assert "ingested 1 new records" in out and "stopped by SIGTERM" in err and "1 cell(s) not started" in err
    from results.store.frames import load_runs
    assert load_runs(f"sqlite:///{Path(env['HARNESS_RESULTS']) / 'mlflow.db'}")["status"].tolist() == ["killed"]
