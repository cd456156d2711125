"""One backend contract for every scheduler (harness/launch/backend.py): what it renders for a
planned sweep, the dependencies it submits with, and a real submission through it. The local
scheduler runs here; the Slurm one against the real single-node Slurm that `make test` starts."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.experiments import sweep
from harness.launch import schedulers
from harness.launch.backend import SweepPlan, launch
from harness.launch.site import Site
from results.record import schema
from tests.conftest import tiny_dataset

SWEEP = """name: contract
workloads: [cosmoflow]
repeats: {repeats}
toggles: [channels_last, dali]
matrix: [baseline, add_one_in]
base: {{steps: 2, warmup_steps: 1}}
"""


def _site(tmp_path: Path, data_root: Path, name: str) -> Site | None:
    if name == "local":
        return None
    return Site(partition="debug", results_dir=str(tmp_path / "results"), data_dir=str(data_root),
                stage_dir=str(tmp_path / "stage"), poll_seconds=1, python=sys.executable, time="00:10:00")


def _plan(tmp_path: Path, repeats: int, todo: list[int] | None = None) -> SweepPlan:
    path = tmp_path / "contract.yaml"
    path.write_text(SWEEP.format(repeats=repeats))
    sw = sweep.load(path)
    sweep_id = "contract@20261130T000000"
    import dataclasses
    cells = sweep.plan_cells(dataclasses.replace(sw, name=sweep_id), "cpu", 1)
    return SweepPlan(sweep_id, cells, list(range(len(cells))) if todo is None else todo,
                     tmp_path / "results", python=sys.executable)


@pytest.mark.parametrize("name", list(schedulers.SCHEDULERS))
@pytest.mark.parametrize("rerun", [False, True])
def test_rendered_jobs_keep_every_cell_and_dependency(name, rerun, tmp_path, data_root):
    plan = _plan(tmp_path, repeats=2)
    if rerun:  # --rerun-failed: only some cells, one of them a baseline
        plan.todo, plan.rerun = [0, 2, 5], True
    backend = schedulers.get(name, _site(tmp_path, data_root, name))
    jobs = backend.render(plan)
    names = [j.name for j in jobs]
    assert len(set(names)) == len(names)
    ingest = jobs[-1]
    assert not ingest.cells and set(ingest.after) == set(names[:-1])  # the ingest job waits for all
    ran = [c for j in jobs for c in j.cells]
    assert sorted(ran) == sorted(plan.todo)  # every cell to run, exactly once
    where = {c: j for j in jobs for c in j.cells}
    for k, j in enumerate(jobs):
        assert set(j.after) <= set(names[:k])  # only earlier jobs: submission order is valid
        assert (j.path.name.endswith("-rerun" + j.path.suffix)) == rerun
    for c in plan.todo:
        b = plan.baseline_cell(c)
        if b is not None and b in where:  # a planned baseline: the gate's reference exists first
            assert where[b].name in where[c].after
    for j in jobs:  # the printed submit command names the script and every dependency
        cmd = backend.submit_command(j, [f"<{a}>" for a in j.after])
        assert str(j.path) in cmd and all(f"<{a}>" in cmd for a in j.after)
        for c in j.cells:
            assert plan.cells_file.name in j.script


@pytest.mark.parametrize("name", list(schedulers.SCHEDULERS))
def test_dry_run_prints_scripts_and_submit_commands_with_dependencies(name, tmp_path, data_root, capsys):
    plan = _plan(tmp_path, repeats=1)
    backend = schedulers.get(name, _site(tmp_path, data_root, name))
    assert launch(backend, plan, dry_run=True) == 0
    out = capsys.readouterr().out
    jobs = backend.render(plan)
    assert all(f"# ---- {j.path}" in out for j in jobs)
    lines = out.split("# submit commands, in order (<name> stands for that job's id):\n")[1].splitlines()
    for j, line in zip(jobs, lines):
        assert str(j.path) in line and all(f"<{a}>" in line for a in j.after)
    assert "dry run: 3 cells" in out
    assert not plan.dir.exists()  # nothing written, nothing submitted


def _slurm_up() -> bool:
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "local" else n  # local: test_sweep's
                                  for n in schedulers.SCHEDULERS])                               # SIGTERM case covers it
def test_submit_poll_and_cancel_through_the_real_scheduler(name, tmp_path, data_root, monkeypatch):
    if name == "slurm" and not _slurm_up():
        pytest.skip("no Slurm here (`make test` starts one: make slurm-up)")
    tiny_dataset(data_root, "cosmoflow")
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("HARNESS_DATA", str(data_root))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path = tmp_path / "two.yaml"
    path.write_text(SWEEP.format(repeats=1).replace("toggles: [channels_last, dali]", "toggles: [channels_last]"))
    backend = schedulers.get(name, _site(tmp_path, data_root, name))
    assert sweep.main(path, site=_site(tmp_path, data_root, name), wait=True) == 0
    (sweep_dir,) = (tmp_path / "results" / "sweeps").iterdir()
    jobs = json.loads((sweep_dir / "jobs.json").read_text())
    assert jobs["scheduler"] == name and jobs["ingest"]
    ids = [*jobs["arrays"], jobs["ingest"]]
    if name != "local":
        backend.check()
    assert backend.poll(ids) == set()  # all ended
    backend.cancel(ids)  # cancelling ended jobs is harmless
    recs = [rec for _, rec, _ in schema.scan_records(tmp_path / "results" / "runs")]
    assert sorted(r["status"]["status"] for r in recs) == ["finished", "finished"]
    assert all(r["env"]["scheduler"]["name"] == name and r["env"]["scheduler"]["job_id"] for r in recs)
    gated = [r for r in recs if r["config"]["toggles"]["channels_last"]]
    assert gated[0]["config"]["reference_run"]  # the cell found its baseline for the gate
