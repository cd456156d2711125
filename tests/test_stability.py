"""A loaded machine is detected and named: every run records what else the machine was doing,
the stability verdict says why a configuration can't be trusted, and a sweep measured under
a real background load ends with a one-line warning naming the cause."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pandas as pd

from results.stats import stability
from tests.conftest import harness, run_dirs


def test_thresholds_and_reasons():
    rows = pd.DataFrame([{"others_cpu_frac": 0.02, "cpus": 2, "load_1m_end": 1.1, "steal_frac": 0.0, "cv_step": 0.03},
                         {"others_cpu_frac": 0.45, "cpus": 2, "load_1m_end": 4.5, "steal_frac": 0.07, "cv_step": 0.31}])
    assert stability.verdict(rows.iloc[:1]) == stability.STABLE
    v = stability.verdict(rows)  # the worst run's figures, one line per cause
    assert v == ("disturbed: other processes used 45% of the 2 CPUs during the run, load average 4.5 at its end; "
                 "the hypervisor took 7% of CPU time (steal); step times vary 31% within a run (CV above pyperf's 10%)")
    spread = stability.verdict(rows.iloc[:1], [[0.010] * 5, [0.0125] * 5])
    assert spread == "disturbed: repeat medians differ by 25% (10.0 to 12.5 ms)"
    noisy = stability.verdict(pd.DataFrame([{"others_cpu_frac": 0.02, "cpus": 2, "steal_frac": 0.0, "cv_step": 0.2}]))
    assert noisy == "noisy: step times vary 20% within a run (CV above pyperf's 10%)"  # measured, not suspect
    assert stability.verdict(pd.DataFrame([{"status": "finished"}])) == stability.STABLE  # old records: nothing to judge
    table = pd.DataFrame({"config": ["baseline", "+x", "+y"], "stability": [stability.STABLE, v, noisy]})
    assert stability.warning(table) == ("warning: 1 of 3 configurations measured on a disturbed machine (other "
                                        "processes used 45% of the 2 CPUs during the run, load average 4.5 at its "
                                        "end): these speedups can't be trusted; rerun on a quiet machine")
    assert stability.warning(table.iloc[[0, 2]]) is None  # noisy but measured: no warning


def test_the_store_judges_from_the_same_figures_as_the_records(tmp_path):
    """The portal reads the MLflow store, the CLI the record folders: every figure the verdict
    reads must reach the store, or the portal calls a run stable that the CLI calls unstable."""
    import random

    from results.analysis import speedups as report
    from results.store import frames as store
    from results.store.ingest import ingest_all
    from results.store.benchmark import write_record
    d = write_record(tmp_path / "runs", "judge@0001", "baseline", 0, random.Random(0))
    summary = json.loads((d / "summary.json").read_text())
    summary.update(cv_step=0.18, others_cpu_frac=0.45, steal_frac=0.07, cpu_per_wall=1.1, cpus=2,
                   load_1m_start=3.9, load_1m_end=4.5)
    (d / "summary.json").write_text(json.dumps(summary))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ingest_all(tmp_path / "runs", uri)
    for use_index in (True, False):
        frame = store.load_runs(uri, use_index=use_index)
        assert stability.verdict(frame) == stability.verdict(report.records_frame(tmp_path / "runs"))
    assert stability.verdict(frame).count("; ") == 2  # others (with the load average), steal and CV all seen


@contextmanager
def burners(n: int = 2):
    """n real processes spinning on the CPU, in their own session (not the run's group)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_run_records_the_machine_and_names_the_load(env):
    with burners() as procs:
        p = harness(env, "run", "lm", "--set", "steps=12", "--set", "warmup_steps=2", "--no-ingest")
    assert p.returncode == 0, p.stderr
    (d,) = run_dirs(env)
    summary = json.loads((d / "summary.json").read_text())
    for key in stability.RUN_FIGURES:  # every figure the verdict reads, so every one the store carries
        assert key in summary, key
    assert summary["others_cpu_frac"] > stability.OTHERS_MAX  # two spinning processes on this machine's CPUs
    start = summary["machine"]["start"]
    assert {b["pid"] for b in start["busiest"]} & {p.pid for p in procs}  # the burners named by pid
    reasons = stability.run_reasons(pd.Series(summary))
    assert reasons and reasons[0].startswith("other processes used")
    # `harness run` says so itself, as a sweep does: the figures, then the warning naming the load
    assert "median step" in p.stdout and "samples/s" in p.stdout and "disturbed: other processes used" in p.stdout
    assert any(x.startswith("warning: this run was measured on a disturbed machine (other processes used")
               for x in p.stderr.splitlines())


def test_a_sweep_under_load_ends_with_the_warning(env, tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(textwrap.dedent("""
        name: loaded
        workloads: [lm]
        repeats: 1
        matrix: [baseline]
        base: {steps: 10, warmup_steps: 2}
    """))
    with burners():
        p = harness(env, "sweep", str(sweep))
    assert p.returncode == 0, p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("warning: 1 of 1 configurations measured on a disturbed machine (other processes used"), last
    assert "disturbed:" in p.stdout  # the summary table's stability column
    assert Path(env["HARNESS_RESULTS"], "runs").is_dir()


def test_doctor_names_what_makes_the_machine_noisy(env):
    from harness.measure import doctor
    text, warnings = doctor.report([doctor.Check("steal", False, "hypervisor took 9.0% of CPU time", "a shared VM"),
                                    doctor.Check("memory", True, "97% available")])
    assert warnings == 1
    assert text.splitlines() == ["WARNING  steal: hypervisor took 9.0% of CPU time", "           -> a shared VM",
                                 "ok       memory: 97% available", text.splitlines()[-1]]
    assert text.splitlines()[-1].startswith("1 warning(s): numbers measured now may not be trusted")
    with burners() as procs:
        p = harness(env, "doctor")
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stdout.splitlines() if "CPU use by others" in x)
    assert line.startswith("WARNING")
    assert any(f"pid {q.pid}," in line for q in procs), line  # a burner named by pid
    assert "warning(s)" in p.stdout.splitlines()[-1]
    fixed = "ok       host allocator: glibc malloc thresholds fixed (mmap 32 MiB, trim 1024 MiB)"
    assert fixed in p.stdout.splitlines()


def test_doctor_warns_when_glibcs_adaptive_malloc_thresholds_are_kept(env):
    p = harness({**env, "HARNESS_MALLOC": "dynamic"}, "doctor", timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    i = lines.index("WARNING  host allocator: glibc's adaptive thresholds (HARNESS_MALLOC=dynamic: glibc's "
                    "adaptive thresholds)")
    assert lines[i + 1].startswith("           -> unset HARNESS_MALLOC")
