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


@pytest.mark.parametrize("flag, value", [("--precision", "-0.1"), ("--precision", "nan"), ("--precision", "1"),
                                         ("--budget-s", "0"), ("--budget-s", "inf")])
def test_a_profile_precision_or_budget_out_of_range_is_refused(capsys, flag, value):
    line = refused(capsys, "profile", "lm", flag, value)
    assert "--precision must be in [0, 1)" in line and "--budget-s in (0, 3600]" in line


def test_a_data_root_that_is_a_file_fails_the_run_with_its_reason(capsys, tmp_path, monkeypatch):
    (tmp_path / "data").write_text("not a folder")
    monkeypatch.setenv("HARNESS_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path / "results"))
    assert main(["run", "lm", "--set", "steps=1"]) == 2
    err = capsys.readouterr().err
    assert "cannot make the dataset folder" in err and "Not a directory" in err and "Traceback" not in err


def test_more_threads_than_the_machine_has_are_refused(capsys, tmp_path, monkeypatch):
    """threads=100000 segfaulted in torch's thread pool (exit 139, the record left running)."""
    import os
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path / "results"))
    line = refused(capsys, "run", "lm", "--set", "threads=100000")
    assert f"1..{os.cpu_count()}" in line and "100000" in line
    assert not (tmp_path / "results").exists()


def test_an_unknown_set_key_names_the_nearest_keys_and_where_all_are(capsys):
    line = refused(capsys, "run", "lm", "--set", "tread=3")
    assert "did you mean threads?" in line and "python -m harness list" in line
    assert len(line) < 200  # never the whole key list, cut mid-word
    line = refused(capsys, "run", "lm", "--set", "zzzzzz=1")
    assert "did you mean" not in line and "python -m harness list" in line


@pytest.mark.parametrize("name", ["x" * 10_000, "a/b", "x@y", " sp", "-rf"])
def test_a_sweep_name_that_cannot_name_a_folder_is_refused(capsys, tmp_path, name):
    import json
    line = refused(capsys, "sweep", sweep_file(tmp_path, f"name: {json.dumps(name)}\nworkloads: [lm]\n"))
    assert "name:" in line and len(line) < 400, line


def test_a_results_folder_that_is_a_file_is_named(capsys, tmp_path, monkeypatch):
    f = tmp_path / "results"
    f.write_text("not a folder")
    monkeypatch.setenv("HARNESS_RESULTS", str(f))
    assert "is not a folder" in refused(capsys, "run", "lm")
    from results.__main__ import main as results_main
    assert results_main(["ingest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a folder" in err[0]


def test_no_arguments_list_the_commands(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    for cmd in ("run", "sweep", "demo", "compare", "doctor", "plan"):
        assert f"\n  {cmd} " in err, cmd


def test_a_sweep_named_like_an_instance_is_not_resumed_for_another():
    """`x@y`'s runs are never taken for runs of sweep `x` (the old prefix match did)."""
    from results.record import sweep_ids
    mine, other = sweep_ids.new_id("x"), sweep_ids.new_id("x@y")
    assert sweep_ids.name_of(mine) == "x" and sweep_ids.name_of(other) == "x@y"
    assert sweep_ids.latest([other, "x@y", "xy@20260101T000000-1ab"], "x") is None
    assert sweep_ids.latest([other, mine], "x") == mine and sweep_ids.resolve([mine], mine) == mine
