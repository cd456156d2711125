"""Many ranks for real: 2-rank DDP (with staging) matches one rank on the same global batch, and
a rank that dies ends the job in bounded time with a failed record, under mpiexec and without a
launcher that cleans up (srun's default)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, harness, run_dirs
from tests.helpers import mpirun as mpiexec


def _losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "step"]


def test_two_rank_ddp_matches_one_rank_with_the_same_global_batch(env, tmp_path):
    """Same global batch, same seed: DDP's averaged gradients equal the one-rank gradients, so
    the loss curves agree (float reduction order aside). The 2-rank run also stages its data."""
    sets = ["--set", "steps=6", "--set", "warmup_steps=1"]
    one = harness(env, "run", "lm", "--no-ingest", *sets)
    assert one.returncode == 0, one.stderr
    env2 = {**env, "HARNESS_STAGE_DIR": str(tmp_path / "stage")}
    two = mpiexec(env2, 2, "-m", "harness", "run", "lm", "--no-ingest", *sets, "--set", "toggles.mpi_staging=true")
    assert two.returncode == 0, two.stderr
    runs = run_dirs(env)
    assert len(runs) == 2  # rank 1 wrote no record
    by_world = {json.loads((r / "summary.json").read_text())["world"]: r for r in runs}
    assert _losses(by_world[2]) == pytest.approx(_losses(by_world[1]), rel=1e-4)
    s2 = json.loads((by_world[2] / "summary.json").read_text())
    assert s2["staging"]["files_staged"] > 0 and s2["staged_dir"].startswith(str(tmp_path / "stage"))
    assert json.loads((by_world[2] / "config.json").read_text())["ranks"] == 2
    rows = [json.loads(x) for x in (by_world[2] / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if r["kind"] == "step")
    assert step["step_s"] == max(step["rank_step_s"]) and len(step["rank_step_s"]) == 2
    log = (by_world[2] / "mlperf.log").read_text()
    assert '"key": "staging_start"' in log and '"key": "staging_stop"' in log
    # MFU over the ranks' own peaks: each measured at the rank's threads, as many as the cores hold
    s1 = json.loads((by_world[1] / "summary.json").read_text())
    assert s1["peak_devices"] == 1
    want = min(2, max(1, s2["cpus"] // s2["torch_threads"]))
    assert s2["peak_devices"] == want
    if want == 2:  # and the run says over what
        assert f"of 2 ranks' measured peaks ({s2['torch_threads']} thread" in two.stdout, two.stdout
    assert s2["mfu_measured_pct"] == pytest.approx(
        100 * s2["flops_per_sample"] * s2["samples_per_s"] / (want * s2["peak_flop_per_s_measured"]))


SUICIDE = """import os, signal, threading
if os.environ.get("DIE_RANK") == os.environ.get("RANK", os.environ.get("PMI_RANK")):
    threading.Timer(float(os.environ["DIE_AFTER"]), lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
"""


def _doomed_env(env, tmp_path, die_after: float) -> dict:
    (tmp_path / "sc").mkdir()
    (tmp_path / "sc" / "sitecustomize.py").write_text(SUICIDE)
    return {**env, "PYTHONPATH": f"{tmp_path / 'sc'}:{env['PYTHONPATH']}", "DIE_RANK": "1",
            "DIE_AFTER": str(die_after), "HARNESS_DIST_TIMEOUT": "30"}


def test_a_dead_rank_under_mpiexec_ends_the_job_and_leaves_a_failed_record(env, tmp_path):
    """mpiexec SIGKILLs the surviving ranks when one dies, so rank 0 cannot close its record;
    the next ingest finds the orphan and closes it as failed."""
    e = _doomed_env(env, tmp_path, 8)
    t0 = time.monotonic()
    out = mpiexec(e, 2, "-m", "harness", "run", "lm", "--no-ingest", "--set", "steps=2000", timeout=120)
    assert out.returncode != 0 and time.monotonic() - t0 < 60
    ing = subprocess.run([sys.executable, "-m", "results", "ingest"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert ing.returncode == 0, ing.stderr
    (run,) = run_dirs(env)
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and status["reason"]


def test_a_dead_rank_without_launcher_cleanup_makes_rank_0_fail_its_record(env, tmp_path):
    """srun (no --kill-on-bad-exit) leaves the survivors running: rank 0's next collective
    fails, and it writes a failed record itself, in bounded time."""
    e = {**_doomed_env(env, tmp_path, 8), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29700 + os.getpid() % 200),
         "WORLD_SIZE": "2"}
    cmd = [sys.executable, "-m", "harness", "run", "lm", "--no-ingest", "--set", "steps=2000"]
    t0 = time.monotonic()
    procs = [subprocess.Popen(cmd, env={**e, "RANK": str(r)}, cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    rc0 = procs[0].wait(timeout=120)
    procs[1].wait(timeout=30)
    assert rc0 == 1 and time.monotonic() - t0 < 90
    (run,) = run_dirs(env)
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and status["reason"].startswith("another rank died or hung")
