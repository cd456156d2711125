"""Processes to a precision target: after a sweep's planned repeats, more separate-process
repeats of each interleaved configuration whose combined interval is still wider than a target.

Why: the in-process engine (harness/run/interleave.py) measures each process's speedup to +-3%,
but on this project's VMs the level itself belongs to the process. Measured (2026-12-04, an
EPYC VM, nothing else running): +channels_last came out 1.34x, 1.49x and 1.65x in three
consecutive processes, +amp=bf16 1.05x in one and 1.36x in the next, each steady over its 37 s.
Two processes cannot say which level a third lands in: their random-effects interval
(results/stats/interleaved.combine) is wide, and a sweep whose two processes happened to land
in the same mode gives a tight interval that the next sweep's contradicts. Only more processes
narrow that; pyperf spawns 20 processes per benchmark by default for the same reason (address
space layout and other per-process state). A fixed 4 processes for every toggle would nearly
double the demo (about 6 minutes against 3 here); this spends a bounded time only where the
processes disagreed or ended imprecise.

Policy (`top_up:` in a sweep file; `TopUp`):
- after the planned repeats, in rounds: each round gives every interleaved configuration whose
  combined 95% half-width is above `precision`, and which has fewer than `max_repeats`
  processes, one more process, the widest interval first (under the budget the process goes
  where it narrows most: in a fresh-clone demo on 2026-12-04 the sweep's order gave +channels_last
  at +-15.6% and +compile at +-8.5% their third processes and left +amp=bf16 at +-22.6% without);
- the top-up starts no process once `budget_s` seconds of it are spent, nor one that the longest
  top-up process so far would not fit in what is left (the running one always finishes);
- a top-up process is an ordinary cell (cells.json), repeat number after the planned ones; its
  correctness gate reads the sweep's latest finished baseline (harness/cli.cmd_cell).
The local scheduler runs it (harness/launch/local.py); a batch scheduler has submitted its whole
array before any figure exists, so under one the sweep says the top-up is not applied.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from harness.config.run_config import brief
from harness.launch.backend import Cell, SweepPlan
from results.stats import interleaved

KEYS = ("precision", "max_repeats", "budget_s")


@dataclass(frozen=True)
class TopUp:
    precision: float = 0.05
    """The combined interval's half-width to reach, relative (0.05 = +-5%)."""
    max_repeats: int = 4
    """Processes per configuration at most, planned ones included."""
    budget_s: float = 60.0
    """Wall seconds the top-up may start processes in."""


def parse(d, repeats: int, interleaved: bool, bad) -> TopUp | None:
    """A sweep file's `top_up` mapping (None when absent); `bad(key, msg)` raises the file's error."""
    if d is None:
        return None
    if not isinstance(d, dict):
        raise bad("top_up", f"expected a mapping with keys {', '.join(KEYS)}; got {brief(d)}")
    for k in d:
        if k not in KEYS:
            raise bad("top_up", f"unknown key {brief(k)}; valid keys: {', '.join(KEYS)}")
    spec = TopUp(**d)
    if not isinstance(spec.precision, (int, float)) or isinstance(spec.precision, bool) or not 0 < spec.precision < 1:
        raise bad("top_up", f"precision is a relative half-width between 0 and 1 (0.05 = +-5%); "
                            f"got {brief(spec.precision)}")
    if not isinstance(spec.max_repeats, int) or isinstance(spec.max_repeats, bool) or spec.max_repeats <= repeats:
        raise bad("top_up", f"max_repeats: expected an integer above the sweep's repeats ({repeats}); "
                            f"got {brief(spec.max_repeats)}")
    if not isinstance(spec.budget_s, (int, float)) or isinstance(spec.budget_s, bool) or not spec.budget_s > 0:
        raise bad("top_up", f"budget_s: expected seconds > 0; got {brief(spec.budget_s)}")
    if not interleaved:
        raise bad("top_up", "needs `base: {interleave: true}` (it tops up the in-process interleaved estimates)")
    return spec


def wanting(estimates: dict[str, list[tuple[float, float, float]]], spec: TopUp) -> list[tuple[str, float, int]]:
    """(key, combined half-width, processes) of each configuration, in the mapping's order, that
    wants one more process by results/stats/interleaved.wants_more (fewer than max_repeats and a
    combined 95% half-width above the target). `estimates` maps a key to its processes'
    (ratio, ci_lo, ci_hi)."""
    out = []
    for key, est in estimates.items():
        more, hw = interleaved.wants_more(est, spec.precision, spec.max_repeats)
        if more:
            out.append((key, hw, len(est)))
    return out


class Rounds:
    """The top-up as SweepPlan.top_up: each call appends the next cell to run to the plan (and
    to cells.json) and returns its index, or None when the top-up is done."""

    def __init__(self, spec: TopUp, runs_root: Path, clock=time.monotonic):
        self.spec, self.runs_root, self.clock = spec, Path(runs_root), clock
        self.started: float | None = None
        self.longest = 0.0   # the longest top-up process so far, seconds
        self._last: float | None = None
        self._queue: list[tuple[str, float, int]] = []

    def __str__(self) -> str:
        s = self.spec
        return (f"up to {s.max_repeats} processes a configuration while its interval is wider than "
                f"+-{s.precision * 100:g}%, started within {s.budget_s:g} s")

    def _estimates(self, plan: SweepPlan) -> dict[str, list[tuple[float, float, float]]]:
        from results.analysis.speedups import records_frame
        df = records_frame(self.runs_root)
        variants = [c.variant for c in plan.cells if not c.is_baseline and c.config.get("interleave")]
        out = {v: [] for v in dict.fromkeys(variants)}
        if df.empty or "ab_ratio" not in df:
            return out
        done = df[(df["sweep"] == plan.sweep_id) & (df["status"] == "finished") & df["ab_ratio"].notna()]
        for v in out:
            rows = done[done["variant"] == v]
            out[v] = list(zip(rows["ab_ratio"].astype(float), rows["ab_lo"].astype(float), rows["ab_hi"].astype(float)))
        return out

    def __call__(self, plan: SweepPlan) -> int | None:
        now = self.clock()
        if self.started is None:
            self.started = now
        elif self._last is not None:
            self.longest = max(self.longest, now - self._last)
        left = self.spec.budget_s - (now - self.started)
        if not self._queue:  # a new round, the widest first (sorted is stable: ties keep the sweep's order)
            self._queue = sorted(wanting(self._estimates(plan), self.spec), key=lambda w: -w[1])
        if not self._queue:
            return None
        if left <= 0 or left < self.longest:
            print(f"top-up: {len(self._queue)} configuration(s) still wider than +-{self.spec.precision * 100:g}%; "
                  f"its {self.spec.budget_s:g} s are spent")
            self._queue = []
            return None
        variant, hw, k = self._queue.pop(0)
        cells = [c for c in plan.cells if c.variant == variant]
        repeat = max(c.repeat for c in cells) + 1
        first = cells[0]
        plan.cells.append(Cell(first.label, {**first.config, "repeat": repeat}, first.variant, first.baseline_variant))
        plan.todo.append(len(plan.cells) - 1)
        plan.write_cells()
        width = "no interval" if hw == float("inf") else f"+-{hw:.1%}"
        print(f"top-up: {first.label} {width} over {k} process(es), target +-{self.spec.precision * 100:g}%: "
              f"one more (repeat {repeat})")
        self._last = self.clock()
        return len(plan.cells) - 1
