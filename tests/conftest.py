"""Shared fixtures: every test writes records, stores and datasets under temp dirs, never the
repo's results/ or data/. The tiny datasets are generated once per session."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture
def env(tmp_path, data_root) -> dict[str, str]:
    e = dict(os.environ)
    e.pop("MLFLOW_TRACKING_URI", None)
    e.update(HARNESS_RESULTS=str(tmp_path / "results"), HARNESS_DATA=str(data_root),
             HARNESS_STAGE_DIR=str(tmp_path / "stage"),
             PYTHONPATH=str(REPO), OMP_NUM_THREADS=e.get("OMP_NUM_THREADS", "2"))
    return e


def harness(env: dict[str, str], *args: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, **kw)


def tiny_dataset(data_root: Path, name: str) -> Path:
    """The workload's default tiny dataset under the session's data root, generated once."""
    from harness import data, registry
    from harness.config import RunConfig
    cfg = RunConfig(workload=name)
    wl = registry.get(name)
    root = data.dataset_root(cfg, base=data_root)
    data.ensure_dataset(wl, wl.sizes["tiny"], root, cfg.data_seed)
    return root


def run_dirs(env: dict[str, str]) -> list[Path]:
    return sorted((Path(env["HARNESS_RESULTS"]) / "runs").glob("*"))


def sweep_store(base: Path, data_root: Path, sweep_yaml: str) -> tuple[Path, subprocess.CompletedProcess]:
    """(results folder, the sweep's process): a store seeded by running a real sweep file."""
    import textwrap
    root = base / "results"
    env = dict(os.environ, HARNESS_RESULTS=str(root), HARNESS_DATA=str(data_root), PYTHONPATH=str(REPO))
    env.pop("MLFLOW_TRACKING_URI", None)
    sweep = base / "sweep.yaml"
    sweep.write_text(textwrap.dedent(sweep_yaml))
    p = harness(env, "sweep", str(sweep), timeout=900)
    assert p.returncode == 0, p.stderr
    return root, p
