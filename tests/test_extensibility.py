"""A fourth workload touches only its own package and the registry: a toy workload from a
temporary package (tests/assets/toywl), named in HARNESS_WORKLOADS, runs through the generated
contract tests, the loader benchmark and `harness info` with no edit anywhere else."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, harness


@pytest.fixture
def toy_env(env, tmp_path):
    pkgs = tmp_path / "pkgs"
    shutil.copytree(REPO / "tests" / "assets" / "toywl", pkgs / "toywl")
    return {**env, "PYTHONPATH": f"{REPO}:{pkgs}", "HARNESS_WORKLOADS": "toy=toywl"}


def test_toy_workload_is_listed_and_described(toy_env):
    p = harness(toy_env, "list")
    assert p.returncode == 0, p.stderr
    assert "toy" in p.stdout
    p = harness(toy_env, "info", "toy")
    assert p.returncode == 0, p.stderr
    assert "tiny   input (8,)  params 9" in p.stdout and "target MAE 0.05" in p.stdout


def test_contract_tests_run_on_the_toy_workload(toy_env, tmp_path):
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "toy",
                        "tests/test_workloads.py", f"--basetemp={tmp_path / 'pt'}"],
                       cwd=REPO, env=toy_env, capture_output=True, text=True, timeout=600)
    summary = p.stdout.strip().splitlines()[-1]
    assert p.returncode == 0, p.stdout[-3000:]
    # build/train/eval, overfitting, parameter count, FLOPs (tiny and larger) ran and passed;
    # DALI agreement and golden losses skip with the workload's own reasons
    assert "5 passed" in summary and "2 skipped" in summary, summary


def test_loader_benchmark_runs_on_the_toy_workload(toy_env, tmp_path):
    code = ("import json; from harness.bench import loader as perf_loader; "
            "print(json.dumps(perf_loader.loader_throughput(rounds=1, workloads=['toy'])))")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=toy_env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    figures = json.loads(p.stdout.strip().splitlines()[-1])["toy"]
    assert figures["samples_per_pass"] > 0 and figures["torch"]["gb_per_s"] > 0
    assert "dali_cpu" not in figures  # the toy declares no DALI pipeline
    assert figures["sample_bytes"]["torch"] == 128 + 36  # a 9-float32 .npy: 128-byte header + 36
