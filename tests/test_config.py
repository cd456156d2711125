"""RunConfig / Toggles validation and the CLI's answers to bad input (one line, exit 2)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from harness.config.run_config import RunConfig, Toggles, UsageError, parse_assignment
from tests.conftest import harness, run_dirs


def test_defaults_are_valid_and_frozen():
    cfg = RunConfig(workload="cosmoflow")
    assert cfg.toggles == Toggles() and cfg.toggles.enabled() == []
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps = 3  # type: ignore[misc]


def test_variant_hash_covers_measurement_not_labels():
    a = RunConfig(workload="cosmoflow")
    assert a.variant_hash() == RunConfig(workload="cosmoflow").variant_hash()
    assert a.variant_hash() == dataclasses.replace(a, sweep="s", repeat=3).variant_hash()
    assert a.variant_hash() != a.with_overrides(["toggles.compile=true"]).variant_hash()
    assert a.variant_hash() != a.with_overrides(["steps=21"]).variant_hash()
    assert a.variant_hash() == a.with_overrides(["eval_batches=2"]).variant_hash()  # evaluated after the clock


def test_eval_samples_counts_each_ranks_first_batches():
    from harness.run.loop import _max_eval_batches, eval_samples
    assert eval_samples(96, 8, 1) == eval_samples(96, 8, 1, 0) == 96
    assert eval_samples(96, 8, 1, 2) == 16 and eval_samples(96, 8, 2, 2) == 32
    assert eval_samples(97, 8, 2, 100) == 97 and eval_samples(5, 4, 2, 1) == 5  # ranks hold 3 and 2
    assert _max_eval_batches(96, 8, 2) == 6 and _max_eval_batches(96, 8, 2, 2) == 2


def test_overrides_are_typed():
    cfg = RunConfig(workload="cosmoflow").with_overrides(
        ["toggles.compile=true", "toggles.amp=bf16", "steps=7", "max_seconds=1.5", "compile_mode=max-autotune"])
    assert cfg.toggles.compile is True and cfg.toggles.amp == "bf16"
    assert cfg.steps == 7 and cfg.max_seconds == 1.5 and cfg.compile_mode == "max-autotune"
    assert cfg.flat()["toggles.compile"] is True


@pytest.mark.parametrize("kwargs, fragment", [
    ({"workload": "nope"}, "valid workloads: cosmoflow, deepcam, lm"),
    ({"workload": "cosmoflow", "size": "huge"}, "valid sizes: tiny, small, full"),
    ({"workload": "cosmoflow", "mode": "fast"}, "mode must be one of throughput, ttt"),
    ({"workload": "cosmoflow", "steps": 0}, "steps must be >= 1"),
    ({"workload": "cosmoflow", "seed": 0}, r"seed must be in 1\.\."),
    ({"workload": "cosmoflow", "steps": "3"}, "steps expects int"),
    ({"workload": "cosmoflow", "eval_batches": -1}, "eval_batches must be >= 0"),
    ({"workload": "cosmoflow", "mode": "ttt", "eval_batches": 2}, "eval_batches applies to throughput runs"),
])
def test_invalid_configs_raise_with_choices(kwargs, fragment):
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(")):
        RunConfig(**kwargs)


def test_toggle_types_checked():
    with pytest.raises(UsageError, match="toggles.compile expects a bool"):
        Toggles(compile="yes")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="toggles.amp must be one of off, bf16, fp16"):
        Toggles(amp="fp8")


@pytest.mark.parametrize("text, fragment", [
    ("toggles.compile", "malformed --set 'toggles.compile': expected KEY=VALUE"),
    ("toggles.warp=true", "unknown key 'toggles.warp'"),
    ("toggles.compile=maybe", "toggles.compile expects a bool (true/false); got 'maybe'"),
    ("steps=ten", "steps expects int; got 'ten'"),
])
def test_parse_assignment_errors(text, fragment):
    with pytest.raises(UsageError) as e:
        parse_assignment(text)
    assert fragment in str(e.value)


@pytest.mark.parametrize("args, fragment", [
    (["run", "resnet"], "unknown workload 'resnet'; valid workloads: cosmoflow, deepcam, lm"),
    (["run", "cosmoflow", "--size", "xl"], "unknown size 'xl' for cosmoflow; valid sizes: tiny, small, full"),
    (["run", "cosmoflow", "--set", "toggles.nhwc=true"], "unknown key 'toggles.nhwc' in --set; did you mean toggles.amp"),
    (["run", "cosmoflow", "--set", "steps"], "malformed --set 'steps': expected KEY=VALUE"),
    (["run", "cosmoflow", "--set", "toggles.compile=3"], "toggles.compile expects a bool (true/false); got '3'"),
    (["run", "cosmoflow", "--set", "toggles.amp=fp64"], "toggles.amp must be one of off, bf16, fp16; got 'fp64'"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_cli_bad_input_one_line_exit_2(env, args, fragment):
    p = harness(env, *args, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert fragment in lines[0]
    assert not run_dirs(env)  # bad input is refused before any record exists


def test_gpu_only_toggle_on_cpu_records_unsupported_and_exits_2(env):
    p = harness(env, "run", "cosmoflow", "--set", "device=cpu", "--set", "toggles.cuda_graphs=true",
                "--no-ingest", timeout=120)
    assert p.returncode == 2
    assert "cuda_graphs needs a CUDA device" in p.stderr.strip().splitlines()[-1]
    (d,) = run_dirs(env)
    status = json.loads((d / "status.json").read_text())
    assert status["status"] == "unsupported" and "cuda_graphs needs a CUDA device" in status["reason"]


def test_list_names_workloads_sizes_toggles(env):
    p = harness(env, "list", timeout=60)
    assert p.returncode == 0
    assert "cosmoflow" in p.stdout and "tiny, small, full" in p.stdout
    for t in ("dali", "channels_last", "cuda_graphs", "compile", "mpi_staging", "amp"):
        assert t in p.stdout
