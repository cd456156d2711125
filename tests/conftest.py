"""Shared fixtures: every test writes records, stores and datasets under temp dirs, never the
repo's results/ or data/. The tiny datasets are generated once per session."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
XSS = "<script>alert(1)</script>"  # a hostile string the portal must show as text, never run


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


def tiny_dataset(data_root: Path, name: str, size: str = "tiny") -> Path:
    """The workload's default dataset of `size` under the session's data root, generated once."""
    from harness.run import data
    from harness.config import registry
    from harness.config.run_config import RunConfig
    cfg = RunConfig(workload=name, size=size)
    wl = registry.get(name)
    root = data.dataset_root(cfg, base=data_root)
    data.ensure_dataset(wl, wl.sizes[size], root, cfg.data_seed)
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


@pytest.fixture(scope="session")
def seeded(tmp_path_factory, data_root):
    """A store seeded by a real tiny CosmoFlow sweep plus a crafted failed run with a hostile
    sweep name and reason; read-only, shared by the portal test files (one sweep, not one each)."""
    import json
    import shutil

    from results.store.ingest import ingest_all
    root, _ = sweep_store(tmp_path_factory.mktemp("portal"), data_root, """
        name: portal
        workloads: [cosmoflow]
        repeats: 2
        matrix: [baseline, add_one_in, all_on]
        toggles: [channels_last, dali, cuda_graphs]
        base: {steps: 4, warmup_steps: 1, eval_batches: 2}
    """)
    real = sorted((root / "runs").glob("*"))[0]
    crafted = real.with_name(real.name + "-crafted")  # a failed run with a hostile sweep name and reason
    shutil.copytree(real, crafted)
    cfg = json.loads((crafted / "config.json").read_text())
    cfg.update(run_id=crafted.name, sweep=XSS)
    (crafted / "config.json").write_text(json.dumps(cfg))
    st = json.loads((crafted / "status.json").read_text())
    st.update(status="failed", reason=f"RuntimeError: {XSS}")
    (crafted / "status.json").write_text(json.dumps(st))
    assert len(ingest_all(root / "runs", f"sqlite:///{root / 'mlflow.db'}")["added"]) == 1
    return root, crafted.name


def copy_record(src, dst: Path, config: dict, summary: dict | None = None) -> Path:
    """Record folder `src` copied to `dst` as a run of its own (run_id = dst's name), its config.json
    and summary.json updated with these keys: a store shaped for a test from real records."""
    import json
    import shutil
    shutil.copytree(src, dst)
    for name, extra in (("config.json", {**config, "run_id": dst.name}), ("summary.json", summary or {})):
        if extra:
            (dst / name).write_text(json.dumps({**json.loads((dst / name).read_text()), **extra}))
    return dst


MODES = [(1.07, 1.04, 1.10), (1.30, 1.26, 1.34)]  # two processes' +channels_last (ratio, lo, hi): each faster


@pytest.fixture(scope="session")
def modes_store(seeded, tmp_path_factory):
    """(results folder, sweep): the seeded sweep copied under a sweep of its own, its two
    +channels_last processes interleaved at MODES (the two modes +amp=bf16 showed on a Zen 4
    EPYC): their combined interval holds 1 while each process called it faster."""
    from results.analysis import speedups as report
    from results.store.ingest import ingest_all
    frame = report.records_frame(seeded[0] / "runs")
    sweep = frame.loc[frame["sweep"].astype(str).str.startswith("portal@"), "sweep"].iloc[0]
    modes = sweep.replace("portal@", "modes@", 1)
    root = tmp_path_factory.mktemp("modes") / "results"
    (root / "runs").mkdir(parents=True)
    processes = iter(MODES)
    for (_, row), label in zip(frame.iterrows(), report.label_configs(frame)):
        if row["sweep"] != sweep:
            continue
        summary = None
        if label == "+channels_last":
            r, lo, hi = next(processes)
            summary = {"ab_ratio": r, "ab_lo": lo, "ab_hi": hi, "ab_pairs": 12}
        copy_record(row["record_dir"], root / "runs" / (Path(row["record_dir"]).name + "-modes"), {"sweep": modes},
                    summary)
    assert next(processes, None) is None  # both +channels_last processes carry one
    ingest_all(root / "runs", f"sqlite:///{root / 'mlflow.db'}")
    return root, modes
