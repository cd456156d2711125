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
    mods = _modules_after("import results, results.record.schema, results.stats.estimators, results.store.ingest, "
                          "results.store.frames, results.analysis.speedups, results.__main__, portal.data\n"
                          "from results.store.tracking import client\n"
                          f"client('sqlite:///{tmp_path}/s.db').search_experiments()\n"
                          f"results.load_runs('sqlite:///{tmp_path}/s.db')")
    assert {"results.store.frames", "portal.data", "mlflow"} <= mods
    for banned in ("torch", "harness", "workloads"):
        assert not any(m == banned or m.startswith(banned + ".") for m in mods), banned


def test_reading_where_there_is_no_store_creates_nothing(tmp_path):
    """A mistyped results folder: readers find no runs and leave the folder as it was."""
    from results.store.frames import load_runs
    assert load_runs(f"sqlite:///{tmp_path}/mlflow.db").empty
    assert list(tmp_path.iterdir()) == []


def test_training_loop_does_not_import_mlflow():
    mods = _modules_after("import harness.run.loop, harness.run.runner, harness.run.build, harness.run.data")
    assert "torch" in mods
    assert not any(m == "mlflow" or m.startswith("mlflow.") for m in mods)


def test_harness_cli_validation_does_not_import_torch():
    mods = _modules_after("import harness.config.run_config, harness.config.registry, harness.cli, workloads.cosmoflow")
    assert "torch" not in mods


# -- the whole import graph (every import, including those inside functions) --------------------
def test_import_graph_has_no_cycles_and_no_upward_imports():
    from tests.importgraph import edges, problems
    assert sum(map(len, edges(REPO).values())) > 150  # the graph was really read
    assert problems(REPO) == []


def _tree_copy(tmp_path):
    import shutil
    for pkg in ("harness", "workloads", "staging", "results", "portal"):
        shutil.copytree(REPO / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _inject(path, line):
    """Add an import inside a function at the end of a module (where cycles used to hide)."""
    path.write_text(path.read_text() + f"\n\ndef _injected():\n    {line}\n")


def test_import_graph_check_fails_on_an_injected_cycle(tmp_path):
    from tests.importgraph import problems
    root = _tree_copy(tmp_path)
    _inject(root / "harness" / "config" / "run_config.py", "from harness import cli")  # cli imports config
    found = problems(root)
    assert any(p.startswith("cycle:") and "harness.config.run_config" in p and "harness.cli" in p for p in found), found


def test_import_graph_check_fails_on_upward_imports(tmp_path):
    from tests.importgraph import problems
    root = _tree_copy(tmp_path)
    _inject(root / "workloads" / "npy_io.py", "from harness.config.errors import DataError")
    _inject(root / "harness" / "bench" / "driver.py", "from portal import perf")
    found = problems(root)
    assert "upward import: workloads.npy_io -> harness.config.errors" in found
    assert "upward import: harness.bench.driver -> portal.perf" in found
    assert "package cycle: harness <-> workloads" in found


def test_floor_check_fails_on_an_injected_back_import(tmp_path):
    """config (floor 1) reaching up into run (3), a store module (2) into analysis (3), a sibling
    folder of the same floor, and a new module left flat in harness/: each is named."""
    from tests.importgraph import problems
    root = _tree_copy(tmp_path)
    _inject(root / "harness" / "config" / "registry.py", "from harness.run import timing")
    _inject(root / "results" / "store" / "ingest.py", "from results.analysis import trends")
    _inject(root / "harness" / "measure" / "peak.py", "from harness.parallel import dist")
    _inject(root / "harness" / "comm" / "bench.py", "from harness.launch import site")  # a sibling of floor 5
    (root / "harness" / "helpers.py").write_text("X = 1\n")
    found = problems(root)
    assert any(p.startswith("floor: harness.config.registry -> harness.run") for p in found), found
    assert any(p.startswith("floor: results.store.ingest -> results.analysis.trends") for p in found), found
    assert any(p.startswith("floor: harness.measure.peak -> harness.parallel.dist") for p in found), found
    assert any(p.startswith("floor: harness.comm.bench -> harness.launch.site") for p in found), found
    assert "outside every folder: harness.helpers" in found


def test_every_folder_has_a_floor_and_nothing_else_is_flat():
    """The floors name exactly the folders on disk (a new folder must be placed)."""
    from tests.importgraph import FLOORS
    for pkg in ("harness", "results"):
        on_disk = {f"{pkg}.{d.name}" for d in (REPO / pkg).iterdir() if (d / "__init__.py").exists()}
        assert on_disk == {k for k in FLOORS if k.startswith(pkg + ".") and k.count(".") == 1
                           and not k.endswith(("__main__", ".cli"))}, on_disk
