"""One-way data flow: results/ and portal/ never import torch, harness or workloads; the
training loop never imports mlflow. Checked in fresh subprocesses."""
from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO


def _modules_after(code: str) -> set[str]:
    p = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return set(p.stdout.split())


def test_results_and_portal_do_not_import_torch_harness_workloads(tmp_path):
    mods = _modules_after("import results, results.schema, results.stats, results.ingest, "
                          "results.store, results.report, results.__main__, portal.data\n"
                          f"results.load_runs('sqlite:///{tmp_path}/s.db')")
    assert {"results.store", "portal.data", "mlflow"} <= mods
    for banned in ("torch", "harness", "workloads"):
        assert not any(m == banned or m.startswith(banned + ".") for m in mods), banned


def test_training_loop_does_not_import_mlflow():
    mods = _modules_after("import harness.loop, harness.runner, harness.optimize, harness.data")
    assert "torch" in mods
    assert not any(m == "mlflow" or m.startswith("mlflow.") for m in mods)


def test_harness_cli_validation_does_not_import_torch():
    mods = _modules_after("import harness.config, harness.registry, harness.cli, workloads.cosmoflow")
    assert "torch" not in mods
