"""Slurm submission: rendered scripts checked as directive sets (as ReFrame does), then
integration against the real single-node Slurm that `make test` starts (harness.launch.local_slurm)."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from conftest import harness, tiny_dataset

SWEEP4 = """name: {name}
workloads: [cosmoflow]
repeats: 1
toggles: [channels_last, dali, cuda_graphs]
matrix: [baseline, add_one_in]
base: {{steps: {steps}, warmup_steps: 1}}
"""


def directives(script: str) -> set[str]:
    return {line.split(None, 1)[1] for line in script.splitlines() if line.startswith("#SBATCH")}


def scripts_of(dry_run_stdout: str) -> dict[str, str]:
    """{script file name: text} from `submit --dry-run` output."""
    out, name = {}, None
    for line in dry_run_stdout.splitlines():
        if line.startswith("# ---- "):
            name = Path(line[7:]).name
            out[name] = ""
        elif name and not line.startswith("# dry run"):
            out[name] += line + "\n"
    return out


def write_site(tmp_path: Path, data_root: Path, **extra) -> Path:
    lines = {"partition": "debug", "time": "00:10:00", "results_dir": str(tmp_path / "results"),
             "data_dir": str(data_root), "stage_dir": str(tmp_path / "stage"), "poll_seconds": 1, **extra}
    path = tmp_path / "site.yaml"
    path.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in lines.items()) + "\n")
    return path


def write_sweep(tmp_path: Path, name: str, steps: int = 3, text: str = SWEEP4) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text.format(name=name, steps=steps))
    return path


# -- rendering (no Slurm needed) ------------------------------------------------------------------
def test_rendered_scripts_carry_every_site_setting(env, tmp_path):
    out = harness(env, "submit", str(write_sweep(tmp_path, "render")), "--site", "example-cluster", "--dry-run")
    assert out.returncode == 0, out.stderr
    scripts = scripts_of(out.stdout)
    p1 = next(t for n, t in scripts.items() if n.startswith("array-p1"))
    p2 = next(t for n, t in scripts.items() if n.startswith("array-p2"))
    common = {"--partition=gpu", "--account=my-project", "--time=01:00:00", "--nodes=1", "--ntasks-per-node=4",
              "--gpus-per-node=4", "--cpus-per-task=16", "--exclusive", "--open-mode=append", "--signal=B:TERM@60"}
    assert common <= directives(p1) and common <= directives(p2)
    assert "--array=0" in directives(p1) and "--array=1-3" in directives(p2)
    assert "module load cuda/12.4" in p1 and "srun --mpi=pmi2" in p1 and "exec srun" in p1
    assert "export HARNESS_DATA=/shared/scratch/$USER/harness-data" in p1
    ingest = scripts["ingest.sbatch"]
    assert "--array" not in " ".join(directives(ingest)) and "-m results ingest" in ingest
    assert "-m results summary --sweep render@" in ingest
    assert "dry run: 4 cells" in out.stdout


def test_arrays_longer_than_max_array_size_are_split(env, tmp_path):
    site = write_site(tmp_path, tmp_path, max_array_size=3)
    out = harness(env, "submit", str(write_sweep(tmp_path, "split")), "--site", str(site), "--dry-run",
                  "--repeats", "2")
    assert out.returncode == 0, out.stderr
    scripts = scripts_of(out.stdout)
    arrays = {n: directives(t) for n, t in scripts.items() if n.startswith("array")}
    # 8 cells: baselines 0, 4 -> p1 at offsets 0 and 3; others 1-3, 5-7 -> offsets 0, 3, 6
    assert arrays["array-p1-o0.sbatch"] >= {"--array=0"} and arrays["array-p1-o3.sbatch"] >= {"--array=1"}
    assert arrays["array-p2-o0.sbatch"] >= {"--array=1-2"} and arrays["array-p2-o3.sbatch"] >= {"--array=0,2"}
    assert arrays["array-p2-o6.sbatch"] >= {"--array=0-1"}
    assert "$((SLURM_ARRAY_TASK_ID + 6))" in scripts["array-p2-o6.sbatch"]


def test_unknown_site_key_is_one_line_exit_2(env, tmp_path):
    site = tmp_path / "badsite.yaml"
    site.write_text("partition: debug\nqueue: fast\n")
    out = harness(env, "submit", str(write_sweep(tmp_path, "ok")), "--site", str(site), "--dry-run")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "badsite.yaml:2: queue: unknown site key" in out.stderr and "partition" in out.stderr


def test_sbatch_missing_is_one_line_exit_2(env, tmp_path):
    e = {**env, "PATH": "/nonexistent"}
    out = harness(e, "submit", str(write_sweep(tmp_path, "nosb")), "--site", str(write_site(tmp_path, tmp_path)))
    assert out.returncode == 2 and "sbatch not found" in out.stderr and out.stderr.strip().count("\n") == 0


# -- against the real local Slurm -----------------------------------------------------------------
@pytest.fixture(scope="module")
def slurm():
    from harness.launch import local_slurm
    if subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0:
        local_slurm.up()  # `make test` already did; this covers a bare `pytest`
    yield
    subprocess.run(["scancel", "--partition=debug"], capture_output=True)


def squeue_empty() -> bool:
    return subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout.strip() == ""


def wait_for(pred, timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not pred():
        assert time.monotonic() - t0 < timeout, f"{what} not within {timeout} s"
        time.sleep(1)


def records(results: Path) -> list[dict]:
    out = []
    for d in sorted((results / "runs").glob("*")):
        rec = {f: json.loads((d / f"{f}.json").read_text()) for f in ("config", "env", "status")}
        out.append({**rec, "dir": d})
    return out


def test_sweep_as_array_then_dependent_ingest(slurm, env, tmp_path, data_root):
    """4 cells (one unsupported, i.e. a failed array task) -> 4 records in MLflow with their job
    ids; the ingest job ran after the failed task; rerun-failed would resubmit only that cell."""
    tiny_dataset(data_root, "cosmoflow")
    site = write_site(tmp_path, data_root)
    sweep = write_sweep(tmp_path, "four")
    out = harness(env, "submit", str(sweep), "--site", str(site), "--wait", timeout=900)
    assert out.returncode == 0, out.stderr
    assert "4 added" in out.stdout and "+cuda_graphs" in out.stdout  # the ingest job's own output
    recs = records(tmp_path / "results")
    assert sorted(r["status"]["status"] for r in recs) == ["finished"] * 3 + ["unsupported"]
    assert all(r["env"]["slurm"]["SLURM_ARRAY_JOB_ID"] for r in recs)
    assert all((r["dir"] / "job.sbatch").read_text().count("#SBATCH --array=") == 1 for r in recs)
    gated = [r for r in recs if r["config"]["toggles"]["channels_last"]]
    assert gated[0]["config"]["reference_run"]  # phase 2 found its baseline for the gate

    import mlflow
    from results.store.frames import load_runs
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    df = load_runs(f"sqlite:///{tmp_path / 'results' / 'mlflow.db'}")
    assert len(df) == 4 and df["slurm_job_id"].astype(str).str.len().min() > 0

    again = harness(env, "submit", str(sweep), "--site", str(site), "--rerun-failed", "--dry-run")
    assert again.returncode == 0, again.stderr
    scripts = scripts_of(again.stdout)
    assert [n for n in scripts if n.startswith("array")] == ["array-p2-o0-rerun.sbatch"]
    assert "--array=3" in directives(scripts["array-p2-o0-rerun.sbatch"])


def test_scancel_leaves_a_killed_record(slurm, env, tmp_path, data_root):
    tiny_dataset(data_root, "cosmoflow")
    text = "name: {name}\nworkloads: [cosmoflow]\nrepeats: 1\nmatrix: [baseline]\nbase: {{steps: {steps}}}\n"
    sweep = write_sweep(tmp_path, "long", steps=100000, text=text)
    out = harness(env, "submit", str(sweep), "--site", str(write_site(tmp_path, data_root)))
    assert out.returncode == 0, out.stderr
    jobs = json.loads(next((tmp_path / "results" / "sweeps").glob("*/jobs.json")).read_text())

    def stepping() -> bool:
        runs = list((tmp_path / "results" / "runs").glob("*/metrics.jsonl"))
        return bool(runs) and runs[0].read_text().count("\n") >= 5
    wait_for(stepping, 180, "the run's first steps")
    subprocess.run(["scancel", jobs["arrays"][0]], check=True)
    wait_for(squeue_empty, 120, "the cancelled job and the ingest job")
    (rec,) = records(tmp_path / "results")
    assert rec["status"]["status"] == "killed" and "SIGTERM" in rec["status"]["reason"]


def test_two_rank_job_through_srun_with_mpi(slurm, env, tmp_path, data_root):
    tiny_dataset(data_root, "lm")
    text = ("name: {name}\nworkloads: [lm]\nrepeats: 1\nmatrix: [baseline, add_one_in]\ntoggles: [mpi_staging]\n"
            "base: {{steps: {steps}, warmup_steps: 1}}\n")
    site = write_site(tmp_path, data_root, ntasks_per_node=2)
    out = harness(env, "submit", str(write_sweep(tmp_path, "ddp", text=text)), "--site", str(site), "--wait",
                  timeout=600)
    assert out.returncode == 0, out.stderr
    recs = records(tmp_path / "results")
    assert [r["status"]["status"] for r in recs] == ["finished", "finished"], [r["status"] for r in recs]
    for r in recs:
        summary = json.loads((r["dir"] / "summary.json").read_text())
        assert summary["world"] == 2 and r["config"]["ranks"] == 2 and summary["launcher"] == "PMI_RANK"
    staged = [json.loads((r["dir"] / "summary.json").read_text()) for r in recs
              if r["config"]["toggles"]["mpi_staging"]]
    assert staged[0]["staged_dir"].startswith(str(tmp_path / "stage"))


def test_missing_partition_and_rejected_submission(slurm, env, tmp_path, data_root):
    out = harness(env, "submit", str(write_sweep(tmp_path, "nopart")), "--site",
                  str(write_site(tmp_path, data_root, partition="nope")))
    assert out.returncode == 2 and "partition 'nope' not found; partitions: debug" in out.stderr

    # MaxArraySize is 1001 here; claiming 5000 lets phase 1 (baselines at cells 0..1000) through
    # and gets phase 2 (cells up to 1003) rejected by Slurm itself: phase 1 must be cancelled.
    before = set(subprocess.run(["squeue", "-h", "-o", "%A"], capture_output=True, text=True).stdout.split())
    site = write_site(tmp_path, data_root, max_array_size=5000)
    out = harness(env, "submit", str(write_sweep(tmp_path, "reject")), "--site", str(site), "--repeats", "251")
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0
    assert "sbatch rejected array-p2-o0.sbatch" in out.stderr and "array" in out.stderr.lower()
    wait_for(lambda: set(subprocess.run(["squeue", "-h", "-o", "%A"], capture_output=True,
                                        text=True).stdout.split()) <= before, 60, "cancellation of phase 1")
