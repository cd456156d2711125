"""Hostile or careless input to the CLI: one bounded line naming the problem, exit 2, nothing
half-made on disk. In-process through harness.cli.main (the same path `python -m harness`
takes), since each case is refused before any run starts."""
from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO
from harness.cli import main


def refused(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: "), out.err
    return lines[0]


@pytest.mark.parametrize("setting, says", [
    ("data_seed=-1", "data_seed must be in 0..4294967295"),
    ("seed=100000000000000000000000", "seed must be in 1..4294967295"),
    ("seed=0", "seed must be in 1..4294967295"),
    ("max_seconds=nan", "max_seconds must be a finite number"),
    ("max_seconds=inf", "max_seconds must be a finite number"),
])
def test_meaningless_settings_are_refused(capsys, tmp_path, monkeypatch, setting, says):
    monkeypatch.setenv("HARNESS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path / "results"))
    assert says in refused(capsys, "run", "lm", "--set", setting)
    assert not (tmp_path / "data").exists() and not (tmp_path / "results").exists()  # no .partial dataset


def sweep_file(tmp_path: Path, text: str | bytes) -> str:
    p = tmp_path / "s.yaml"
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


def test_a_yaml_alias_bomb_is_refused_at_once(capsys, tmp_path):
    """Nine levels of nine-way aliases (9**9 values once expanded) in a few hundred bytes."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    line = refused(capsys, "sweep", sweep_file(tmp_path, "\n".join(lines) + "\n"))
    assert "aliases" in line and len(line) < 300


def test_a_huge_value_is_not_echoed_whole(capsys, tmp_path):
    line = refused(capsys, "sweep", sweep_file(tmp_path, f"name: x\nworkloads: [lm]\nrepeats: '{'y' * 100_000}'\n"))
    assert "repeats" in line and len(line) < 700


def test_a_binary_sweep_file_is_refused(capsys, tmp_path):
    assert "not a text file" in refused(capsys, "sweep", sweep_file(tmp_path, b"name: x\n\xff\xfe\x00: 1\n"))


@pytest.mark.parametrize("text, says", [
    ("workloads: [lm]\non_values: {not_a_toggle: 1}\n", "on_values for a toggle this sweep does not switch"),
    ("workloads: [lm]\ntoggles: [amp]\non_values: {compile: true}\n", "on_values for a toggle"),
    ("workloads: [lm, lm, lm]\n", "lm listed more than once"),
])
def test_meaningless_sweep_files_are_refused(capsys, tmp_path, text, says):
    assert says in refused(capsys, "sweep", sweep_file(tmp_path, text))


def test_negative_repeats_are_refused(capsys):
    demo = str(REPO / "harness" / "sweeps" / "demo.yaml")
    assert "--repeats must be >= 1" in refused(capsys, "sweep", demo, "--repeats", "-1")


def test_a_data_root_that_is_a_file_fails_the_run_with_its_reason(capsys, tmp_path, monkeypatch):
    (tmp_path / "data").write_text("not a folder")
    monkeypatch.setenv("HARNESS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path / "results"))
    assert main(["run", "lm", "--set", "steps=1"]) == 2
    err = capsys.readouterr().err
    assert "cannot make the dataset folder" in err and "Not a directory" in err and "Traceback" not in err
