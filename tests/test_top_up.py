"""The process top-up (harness/experiments/top_up.py): which configurations get another process,
in what order, within what budget; a real sweep it tops up, whose extra process is gated against
the sweep's baseline and combined with the planned one; the calibration's demo groups. Its
sweep-file errors are with the others' (tests/test_sweep.py)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.config.run_config import RunConfig
from harness.experiments import sweep, top_up
from harness.launch.backend import Cell, SweepPlan, read_cells
from results.analysis import speedups as report
from results.stats import interleaved
from tests.conftest import harness

SPEC = top_up.TopUp(precision=0.05, max_repeats=4, budget_s=60)
AGREE = [(1.50, 1.47, 1.53), (1.51, 1.48, 1.54)]      # two modes alike, each +-2%
MODES = [(1.36, 1.32, 1.40), (1.05, 1.02, 1.08)]      # +amp=bf16's two modes (2026-12-04)


def test_agreeing_precise_processes_are_left_alone_and_disagreeing_ones_topped_up():
    got = top_up.wanting({"agree": AGREE, "modes": MODES}, SPEC)
    assert [k for k, _, _ in got] == ["modes"]
    key, hw, k = got[0]
    c = interleaved.combine(MODES)
    assert k == 2 and hw == pytest.approx(interleaved.half_width(c["ci_lo"], c["ci_hi"], c["ratio"])) and hw > 0.05


def test_imprecise_processes_that_agree_are_topped_up_too():
    wide = [(1.20, 1.10, 1.31), (1.21, 1.11, 1.32)]  # alike, but each +-9%: combined about +-6%
    assert [k for k, _, _ in top_up.wanting({"wide": wide}, SPEC)] == ["wide"]


def test_no_top_up_past_max_repeats_nor_without_a_finished_process():
    four = MODES * 2
    assert top_up.wanting({"four": four, "none": []}, SPEC) == []


def test_a_process_without_an_interval_counts_as_infinitely_wide():
    got = top_up.wanting({"x": [(1.2, float("nan"), float("nan"))]}, SPEC)
    assert got == [("x", float("inf"), 1)]


def test_the_wanting_keep_the_sweeps_order():
    got = top_up.wanting({"b": MODES, "a": AGREE, "c": MODES[::-1]}, SPEC)
    assert [k for k, _, _ in got] == ["b", "c"]


class _Fixed(top_up.Rounds):
    """Rounds over given estimates (the records' reading is the real sweep's test, below)."""

    def __init__(self, spec, estimates, clock):
        super().__init__(spec, Path("."), clock)
        self.estimates = estimates

    def _estimates(self, plan):
        return self.estimates


def _plan(tmp_path) -> SweepPlan:
    def cell(label, toggles, repeat):
        cfg = RunConfig.from_dict({"workload": "cosmoflow", "toggles": toggles, "interleave": bool(toggles),
                                   "repeat": repeat, "sweep": "s@1"})
        return Cell(label, cfg.to_dict(), cfg.variant_hash(), "")
    cells = [cell(lab, tog, r) for r in (0, 1) for lab, tog in
             (("baseline", {}), ("+channels_last", {"channels_last": True}), ("+amp=bf16", {"amp": "bf16"}))]
    return SweepPlan("s@1", cells, list(range(len(cells))), tmp_path / "results")


def test_rounds_add_one_process_each_in_turn_as_new_cells(tmp_path):
    plan = _plan(tmp_path)
    cl, amp = plan.cells[1].variant, plan.cells[2].variant
    t = [0.0]
    r = _Fixed(SPEC, {cl: MODES, amp: MODES}, lambda: t[0])
    first = r(plan)
    t[0] += 10
    second = r(plan)
    assert (first, second) == (6, 7) and plan.todo[-2:] == [6, 7]
    added = read_cells(plan.cells_file)[6:]  # written for `harness cell FILE I` to read back
    assert [(c.label, c.repeat, c.variant) for c in added] == [("+channels_last", 2, cl), ("+amp=bf16", 2, amp)]
    assert added[0].config == {**plan.cells[1].config, "repeat": 2}


def test_a_round_goes_widest_first(tmp_path):
    """Under a budget the next process goes where the interval is widest (+amp=bf16 at +-22.6% was
    left without one behind +compile at +-8.5% when rounds went in the sweep's order)."""
    plan = _plan(tmp_path)
    cl, amp = plan.cells[1].variant, plan.cells[2].variant
    wide = [(1.36, 1.30, 1.42), (0.95, 0.91, 0.99)]
    r = _Fixed(SPEC, {cl: MODES, amp: wide}, lambda: 0.0)
    assert [plan.cells[r(plan)].label, plan.cells[r(plan)].label] == ["+amp=bf16", "+channels_last"]


def test_rounds_stop_when_the_budget_or_the_time_for_one_more_process_is_spent(tmp_path, capsys):
    plan = _plan(tmp_path)
    t = [0.0]
    r = _Fixed(SPEC, {plan.cells[1].variant: MODES, plan.cells[2].variant: MODES}, lambda: t[0])
    assert r(plan) is not None
    t[0] += 35          # that process took 35 s: 25 s are left, less than one more such process
    assert r(plan) is None and len(plan.cells) == 7
    assert "spent" in capsys.readouterr().out


def test_rounds_end_when_every_configuration_is_precise(tmp_path):
    plan = _plan(tmp_path)
    r = _Fixed(SPEC, {plan.cells[1].variant: AGREE}, lambda: 0.0)
    assert r(plan) is None and len(plan.cells) == 6


def _write(tmp_path, text):
    p = tmp_path / "s.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_a_sweep_tops_up_the_imprecise_toggle_and_gates_the_extra_process(env, tmp_path):
    """A target no process can reach (+-0.01%): the toggle gets its one extra process (max 2), as
    cell 2 of cells.json at repeat 1, gated against repeat 0's baseline (it has none of its own),
    and the verdict combines both processes."""
    f = _write(tmp_path, """
        name: t
        workloads: [cosmoflow]
        repeats: 1
        top_up: {precision: 0.0001, max_repeats: 2, budget_s: 600}
        matrix: [baseline, add_one_in]
        toggles: [channels_last]
        base: {steps: 3, warmup_steps: 1, interleave: true, budget_s: 2, profile_steps: 0}
    """)
    p = harness(env, "sweep", str(f), timeout=900)
    assert p.returncode == 0, p.stderr
    assert "top-up: +channels_last" in p.stdout and "over 1 process(es), target +-0.01%: one more (repeat 1)" in p.stdout
    frame = report.records_frame(Path(env["HARNESS_RESULTS"], "runs"))
    labels = report.label_configs(frame)
    assert sorted(frame.loc[labels == "baseline", "repeat"]) == [0]
    toggled = frame[labels == "+channels_last"].set_index("repeat")
    assert sorted(toggled.index) == [0, 1] and (toggled["gate_passed"] == 1).all()
    base_dir = frame.loc[labels == "baseline", "record_dir"].iloc[0]
    extra = json.loads((Path(toggled.loc[1, "record_dir"]) / "config.json").read_text())
    assert Path(extra["reference_run"]).name == Path(base_dir).name
    cells = read_cells(next(Path(env["HARNESS_RESULTS"], "sweeps").glob("t*/cells.json")))
    assert [(c.label, c.repeat) for c in cells] == [("baseline", 0), ("+channels_last", 0), ("+channels_last", 1)]
    row = report.speedup_table(frame).set_index("config").loc["+channels_last"]
    assert row["processes"] == 2 and "(i x2)" in p.stdout


def test_the_calibration_groups_a_a_trials_as_the_demos_top_up_does():
    """The A/A figure covers the demo's whole rule: trials in order, 2 at a time, one more while the
    combined interval is wider than +-5% (at most 4); the constants are the demo file's."""
    import pandas as pd

    from results.analysis import calibration
    from results.record import schema
    demo = sweep.load(Path(__file__).parents[1] / "harness" / "sweeps" / "demo.yaml")
    assert (calibration.DEMO_PROCESSES, calibration.DEMO_TOP_UP_PRECISION, calibration.DEMO_TOP_UP_MOST) == \
        (demo.repeats, demo.top_up.precision, demo.top_up.max_repeats)
    tight, wide = (1.0, 0.98, 1.02), (1.0, 0.85, 1.18)
    est = [tight, tight, wide, wide, wide, wide, tight, tight, wide, wide, wide]
    groups = interleaved.topped_up_groups(est, 2, 0.05, 4)
    assert [len(g) for g in groups] == [2, 4, 2]  # the last three still want a fourth: not a group
    assert interleaved.wants_more([wide, wide], 0.05, 4) == (True, pytest.approx(
        interleaved.half_width(*(lambda c: (c["ci_lo"], c["ci_hi"], c["ratio"]))(interleaved.combine([wide, wide])))))
    assert interleaved.wants_more([wide] * 4, 0.05, 4)[0] is False and interleaved.wants_more([], 0.05, 4)[0] is False
    df = pd.DataFrame([{"sweep": "calibrate@20261204T000000-1a2b", "status": schema.FINISHED, "repeat": i,
                        "workload": "cosmoflow", "size": "tiny", "ab_ratio": r, "ab_lo": lo, "ab_hi": hi}
                       for i, (r, lo, hi) in enumerate(est)])
    cal = calibration.latest(df)
    assert (cal["topped_groups"], cal["topped_false_positives"], cal["topped_sizes"]) == (3, 0, [2, 4, 2])
    assert "0 of 3 demo groups (2-4 processes, topped up as the demo is)" in calibration.line(cal)
    # the three groups' combined intervals, every two: each holds the others' estimate of 1.0
    assert (cal["replication_inside"], cal["replication_pairs"]) == (3, 3)
    assert "their intervals held each other's estimate in 3 of 3 pairs (100%; two valid 95% intervals: about 83%)" \
        in calibration.line(cal)
    even = calibration.latest(df.iloc[:2])
    assert "0 of 1 demo groups (2 processes each, none topped up)" in calibration.line(even)


def test_a_dry_run_says_the_top_up_may_add_cells(env):
    p = harness(env, "sweep", str(Path(__file__).parents[1] / "harness" / "sweeps" / "demo.yaml"), "--dry-run",
                timeout=300)
    assert p.returncode == 0, p.stderr
    assert ("14 cells in 14 job(s) + 1 ingest job (and, here, top-up cells once figures exist: up to 4 processes "
            "a configuration while its interval is wider than +-5%, started within 45 s)") in p.stdout


def test_a_multi_rank_top_up_cell_runs_under_mpiexec_as_its_planned_cells_do(tmp_path):
    from harness.launch import local
    plan = _plan(tmp_path)
    cfg = {**plan.cells[1].config, "ranks": 2}
    plan.cells.append(Cell("fsdp@2", cfg, plan.cells[1].variant, ""))
    plan.todo.append(len(plan.cells) - 1)
    got = local._command(plan, len(plan.cells) - 1)
    assert " -n 2 " in got and got.endswith(plan.cell_command(str(len(plan.cells) - 1)))
    assert local._command(plan, 1) == plan.cell_command("1")
    rendered = {j.cells[0]: j.script for j in local.LocalBackend().render(plan) if j.cells}
    assert rendered[len(plan.cells) - 1] == got  # the same line render gives a planned cell
