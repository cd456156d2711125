"""Ablation sweeps: a YAML file -> configurations -> interleaved runs -> summary table.

Matrix sets (any subset, in this order):
  baseline       all toggles off
  add_one_in     each toggle alone
  all_on         every toggle that can run here
  leave_one_out  all_on minus each toggle
A sweep may also list parallel strategies (`parallel: [{data: fsdp}, {tp: 2}, ...]`) and the
rank counts to run them at (`ranks: [2, 4]`): each strategy x ranks is a cell of its own,
launched with mpiexec by the local scheduler, and gated against the one-rank baseline.
Repeats are interleaved (A B C ... A B C ...) so machine drift hits every configuration alike.
Cells are planned once and run through the launcher protocol (harness/launch/backend.py): the
local scheduler (`harness sweep`) runs each cell as its own process on this machine, Slurm
(`harness submit --site`) as job arrays; either way one failing or unsupported cell never
stops the sweep, and records are ingested at the end.
"""
from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from harness.config.run_config import TOGGLE_NAMES, RunConfig, Toggles, UsageError, brief
from harness.config.yaml_file import read_yaml_mapping
from harness.experiments import top_up
from harness.experiments.top_up import TopUp
from harness.launch.backend import BASELINE, Cell, read_cells
from results.record import sweep_ids
from results.record.labels import config_label, toggle_item
from results.record import toggles as toggle_decl

MATRIX_SETS = ("baseline", "add_one_in", "all_on", "leave_one_out")
NAME_MAX = 100
SWEEP_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_MAX - 1}}}")
SWEEP_KEYS = {"name", "workloads", "sizes", "repeats", "toggles", "on_values", "matrix", "base", "parallel", "ranks",
              "top_up"}
DEFAULT_REPEATS = 5
BIG_SWEEP = 200  # runs; past this the sweep says how long a road it starts on


@dataclass(frozen=True)
class Sweep:
    name: str
    workloads: tuple[str, ...]
    sizes: tuple[str, ...]
    repeats: int
    toggles: tuple[str, ...]
    on_values: dict[str, Any]
    matrix: tuple[str, ...]
    base: dict[str, Any]
    parallel: tuple[dict, ...] = ()
    """Parallel strategies (RunConfig.parallel mappings), each a cell at every `ranks` count."""
    ranks: tuple[int, ...] = ()
    top_up: TopUp | None = None
    """More processes where the combined interleaved interval is still wide (harness/experiments/top_up.py)."""


def _line_of(text: str, key: str) -> int:
    """1-based line where `key` first appears as a whole word (block or flow YAML style)."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(str(key))}(?![\w.-])")  # YAML keys may be null, ints
    for n, line in enumerate(text.splitlines(), 1):
        if pattern.search(line.split("#", 1)[0]):
            return n
    return 0


def load(path: Path) -> Sweep:
    """Parse and validate a sweep file; every error names the file, line and key."""
    d, text = read_yaml_mapping(path, "sweep file")

    def bad(key: str, msg: str) -> UsageError:
        return UsageError(f"{path}:{_line_of(text, key)}: {key}: {msg}")

    for key in d:
        if key not in SWEEP_KEYS:
            raise bad(key, f"unknown key; valid keys: {', '.join(sorted(SWEEP_KEYS))}")
    listy = {k: d.get(k) for k in ("workloads", "sizes", "toggles", "matrix")}
    for k, v in listy.items():
        if v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise bad(k, f"expected a list of names; got {v!r}")
    for k in ("workloads", "sizes", "toggles"):
        dup = sorted({x for x in listy[k] or () if list(listy[k]).count(x) > 1})
        if dup:
            raise bad(k, f"{', '.join(dup)} listed more than once (each would be run again, not measured better; "
                         "use `repeats`)")
    toggles = tuple(listy["toggles"] or TOGGLE_NAMES)
    for t in toggles:
        if t not in TOGGLE_NAMES:
            raise bad(t, f"unknown toggle; valid toggles: {', '.join(TOGGLE_NAMES)}")
    matrix = tuple(listy["matrix"] or MATRIX_SETS)
    for m in matrix:
        if m not in MATRIX_SETS:
            raise bad(m, f"unknown matrix set; valid sets: {', '.join(MATRIX_SETS)}")
    repeats = d.get("repeats", DEFAULT_REPEATS)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise bad("repeats", f"expected an integer >= 1; got {repeats!r}")
    on_values = d.get("on_values") or {}
    base = d.get("base") or {}
    if not isinstance(on_values, dict) or not isinstance(base, dict):
        raise bad("base" if not isinstance(base, dict) else "on_values", "expected a mapping")
    for key in on_values:
        if key not in toggles:
            raise bad(str(key), f"on_values for a toggle this sweep does not switch; its toggles: {', '.join(toggles)}")
    name = str(d.get("name") or path.stem)
    if not SWEEP_NAME.fullmatch(name):
        raise bad("name", f"expected 1-{NAME_MAX} letters, digits, '.', '_' or '-' (it names folders and "
                          f"the sweep id NAME@STAMP); got {brief(name)}")
    sweep = Sweep(name=name, workloads=tuple(listy["workloads"] or ()),
                  sizes=tuple(listy["sizes"] or ("tiny",)), repeats=repeats, toggles=toggles,
                  on_values=on_values, matrix=matrix, base=base,
                  parallel=_parallel_cells(d, bad), ranks=_rank_counts(d, bad),
                  top_up=top_up.parse(d.get("top_up"), repeats, bool(base.get("interleave")), bad))
    if not sweep.workloads:
        raise bad("workloads", "at least one workload is required")
    from harness.config import registry
    for wl in sweep.workloads:
        try:
            sizes = registry.get(wl).sizes
        except UsageError as e:
            raise bad("workloads", str(e)) from None
        for size in sweep.sizes:
            if size not in sizes:
                raise bad("sizes", f"unknown size {size!r} for {wl}; valid sizes: {', '.join(sizes)}")
    probe = {"workload": sweep.workloads[0], "size": sweep.sizes[0]}
    for key, value in base.items():  # one key at a time, so the error names the line
        items = value.items() if key in ("toggles", "parallel") and isinstance(value, dict) else [(None, value)]
        for sub, v in items:
            try:
                RunConfig.from_dict({**probe, key: {sub: v} if sub else v})
            except (UsageError, TypeError) as e:
                raise bad(sub or key, str(e)) from None
    for t in toggles:
        try:
            dataclasses.replace(Toggles(), **{t: _on_value(sweep, t)})
        except UsageError as e:
            raise bad("on_values", str(e)) from None
    return sweep


def _parallel_cells(d: dict, bad) -> tuple[dict, ...]:
    from harness.config.run_config import Parallel
    cells = d.get("parallel") or []
    if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
        raise bad("parallel", "expected a list of mappings, e.g. [{data: fsdp}, {tp: 2, sp: true}]")
    for c in cells:
        strategy = {k: v for k, v in c.items() if k != "ranks"}
        try:
            Parallel(**strategy)
        except (UsageError, TypeError) as e:
            raise bad("parallel", str(e)) from None
        least = 2 if Parallel(**strategy).needs_ranks() else 1  # recomputation alone runs on one rank
        _rank_counts({"ranks": c.get("ranks", [2])}, bad, least)
        if not (c.get("ranks") or d.get("ranks")):
            raise bad("parallel", "parallel strategies need `ranks: [N, ...]` (for the sweep or the strategy)")
    return tuple(cells)


def _rank_counts(d: dict, bad, least: int = 2) -> tuple[int, ...]:
    ranks = d.get("ranks") or []
    if not isinstance(ranks, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= least
                                              for r in ranks):
        raise bad("ranks", f"expected a list of rank counts >= {least}; got {ranks!r}")
    return tuple(ranks)


def _on_value(sweep: Sweep, toggle: str) -> Any:
    return sweep.on_values.get(toggle, toggle_decl.BY_NAME[toggle].on)


def expand(sweep: Sweep, base_cfg: RunConfig, applicable: set[str]) -> list[tuple[str, RunConfig]]:
    """(label, config) per matrix cell for one workload/size. Toggles that can't run here still
    get their add-one-in cell (it records `unsupported` with the reason) but stay out of all_on."""
    def cfg(on: list[str]) -> RunConfig:
        tog = dataclasses.replace(Toggles(), **{t: _on_value(sweep, t) for t in on})
        return dataclasses.replace(base_cfg, toggles=tog)

    cells: list[tuple[str, RunConfig]] = []
    all_on = [t for t in sweep.toggles if t in applicable]
    items = {t: toggle_item(t, _on_value(sweep, t)) for t in sweep.toggles}

    def cell(on: list[str]) -> tuple[str, RunConfig]:  # named as its recorded runs will be (labels.config_label)
        return config_label([items[t] for t in on], [items[t] for t in all_on]), cfg(on)
    if "baseline" in sweep.matrix:
        label, c = cell([])
        # the baseline interleaves against itself only in a baseline-only sweep (the A/A
        # calibration); elsewhere it is the plain reference run the other cells are gated on
        cells.append((label, c if sweep.matrix == ("baseline",)
                      else dataclasses.replace(c, interleave=False, probe_microbatch=0)))
    if "add_one_in" in sweep.matrix:
        cells += [cell([t]) for t in sweep.toggles]
    if "all_on" in sweep.matrix and len(all_on) > 1:
        cells.append(cell(all_on))
    if "leave_one_out" in sweep.matrix and len(all_on) > 2:
        cells += [cell([x for x in all_on if x != t]) for t in all_on]
    from harness.config.run_config import Parallel
    for p in sweep.parallel:  # toggles off, the strategy at each of its rank counts
        par = Parallel(**{k: v for k, v in p.items() if k != "ranks"})
        cells += [(config_label((), (), f"{par.label()}@{n}"), dataclasses.replace(base_cfg, parallel=par, ranks=n))
                  for n in p.get("ranks", sweep.ranks)]
    return cells


def interleave(cells: list[tuple[str, RunConfig]], repeats: int) -> list[tuple[str, RunConfig]]:
    """A B C ... A B C ...: repeat r of every cell before repeat r+1 of any."""
    return [(label, dataclasses.replace(c, repeat=r)) for r in range(repeats) for label, c in cells]


def plan(sweep: Sweep, device: str) -> list[tuple[str, RunConfig]]:
    from harness.run import build as optimize
    from harness.config import registry

    runs: list[tuple[str, RunConfig]] = []
    for wl_name in sweep.workloads:
        wl = registry.get(wl_name)
        for size in sweep.sizes:
            # ranks explicit (a local sweep runs one process per cell): the planned variant hash
            # is then the recorded one, which resume and the gate look records up by
            base_cfg = RunConfig.from_dict({"device": device, "ranks": 1, **sweep.base, "workload": wl_name,
                                            "size": size, "sweep": sweep.name})
            applicable = {t for t in sweep.toggles if optimize.check(
                dataclasses.replace(base_cfg, toggles=dataclasses.replace(
                    Toggles(), **{t: _on_value(sweep, t)})), wl) is None}
            runs += interleave(expand(sweep, base_cfg, applicable), sweep.repeats)
    return runs


DONE = ("finished", "fail_accuracy")  # statuses a resumed sweep does not run again


def plan_cells(sw: Sweep, device: str, ranks: int) -> list[Cell]:
    """Every (label, config) of the sweep, with its variant and its baseline's variant (the
    correctness-gate lookup of `harness cell`), in interleaved order. `ranks` is the
    scheduler's rank count for toggle cells; parallel cells keep their own."""
    cells, baseline_of = [], {}
    for label, cfg in plan(sw, device):
        if cfg.parallel.is_default() and not (sw.ranks and "@" in label):
            cfg = dataclasses.replace(cfg, ranks=ranks)
        key = (cfg.workload, cfg.size)
        if label == BASELINE:
            baseline_of[key] = cfg.variant_hash()
        cells.append(Cell(label, cfg.to_dict(), cfg.variant_hash(), baseline_of.get(key, "")))
    return cells


def existing_records(runs_root: Path, sweep_id: str) -> dict[tuple[str, int], tuple[str, str]]:
    """(variant, repeat) -> (status, record dir) of the latest record of this sweep instance."""
    from results.analysis.speedups import records_frame

    df = records_frame(runs_root)
    out: dict[tuple[str, int], tuple[str, str]] = {}
    if df.empty or "sweep" not in df:
        return out
    for _, r in df[df["sweep"] == sweep_id].iterrows():  # sorted by start: later ones win
        out[(r["variant"], int(r["repeat"]))] = (r["status"], r["record_dir"])
    return out


def baseline_record(runs_root: Path, sweep_id: str, variant: str, repeat: int) -> str | None:
    """The record folder a cell's correctness gate reads: its repeat's finished baseline, else the
    sweep's latest finished one (a top-up repeat, harness/experiments/top_up.py, has no baseline of
    its own; the seed and data order are not per repeat, so any repeat's baseline is the reference)."""
    recs = existing_records(runs_root, sweep_id)
    own = recs.get((variant, repeat))
    if own and own[0] == "finished":
        return own[1]
    done = sorted((r, d) for (v, r), (status, d) in recs.items() if v == variant and status == "finished")
    return done[-1][1] if done else None


def latest_instance(runs_root: Path, name: str) -> str | None:
    from results.analysis.speedups import records_frame

    df = records_frame(runs_root)
    if df.empty or "sweep" not in df:
        return None
    return sweep_ids.latest(df["sweep"].dropna().unique(), name)


def main(path: Path, repeats: int = 0, rerun_failed: bool = False, site=None, dry_run: bool = False,
         wait: bool = False) -> int:
    """`harness sweep` (site None: the local scheduler on this machine) and `harness submit
    --site` (the site's scheduler): one planning path, one launcher protocol."""

    from harness.launch import schedulers
    from harness.launch.backend import SweepPlan, launch, safe
    from results.record.paths import results_root

    if repeats < 0:
        raise UsageError(f"--repeats must be >= 1 (0 = the sweep file's own); got {repeats}")
    sw = load(path)
    if repeats:
        sw = dataclasses.replace(sw, repeats=repeats)
    backend = schedulers.get(site.scheduler if site else schedulers.DEFAULT, site)
    if sw.ranks and not backend.runs_here:
        raise UsageError(f"{path}: a sweep with its own `ranks` runs under the local scheduler (mpiexec) for "
                         f"now; under {backend.name} every cell runs at the site's ranks")
    results = Path(site.results_dir).expanduser() if site and site.results_dir else results_root()
    runs_root = results / "runs"
    if rerun_failed:
        sweep_id = latest_instance(runs_root, sw.name) or ""
        if not sweep_id:
            raise UsageError(f"no earlier run of sweep {sw.name!r} under {runs_root} to rerun")
        cells_file = results / "sweeps" / safe(sweep_id) / "cells.json"
        cells = (read_cells(cells_file) if cells_file.exists()  # else: a sweep from before cells.json
                 else plan_cells(dataclasses.replace(sw, name=sweep_id), _device(backend, site), _ranks(backend, site)))
        done = existing_records(runs_root, sweep_id)
        todo = [i for i, c in enumerate(cells)
                if done.get((c.variant, c.repeat), ("",))[0] not in DONE]
    else:
        # UTC second, then pid and random bits: two sweeps started in one second never share an id
        sweep_id = sweep_ids.new_id(sw.name)
        cells = plan_cells(dataclasses.replace(sw, name=sweep_id), _device(backend, site), _ranks(backend, site))
        todo = list(range(len(cells)))
    print(f"sweep {sweep_id}: {len(cells) // sw.repeats} configurations x {sw.repeats} repeats, "
          f"interleaved; {len(todo)} to run")
    if len(todo) > BIG_SWEEP and backend.runs_here and not dry_run:
        print(f"note: {len(todo)} runs on this machine one after another; --dry-run lists them, Ctrl-C stops "
              "the sweep (finished runs stay recorded and `--rerun-failed` resumes)", file=sys.stderr)
    python = site.python if site else sys.executable
    more = None
    if sw.top_up and backend.runs_here:
        more = top_up.Rounds(sw.top_up, runs_root)
    elif sw.top_up:
        print(f"note: {path}'s top_up is not applied under {backend.name} (its jobs are all submitted before any "
              f"figure exists); raise `repeats` instead", file=sys.stderr)
    launch(backend, SweepPlan(sweep_id, cells, todo, results, rerun=rerun_failed, python=python, top_up=more),
           dry_run=dry_run, wait=wait)
    if backend.runs_here and not dry_run:
        print("Browse the results: make portal  (then open http://127.0.0.1:8501)")
        from results.analysis.sweep_summary import stability_warning
        unstable = stability_warning(results / "runs", sweep_id)
        if unstable:  # the last line: the figures above came from a machine that was not quiet
            print(unstable)
    return 0


def calibrate(path: Path, trials: int) -> int:
    """`harness calibrate`: the A/A sweep (every cell the baseline interleaved against itself),
    then its false-positive rate (results/analysis/calibration.py)."""
    from results.analysis import calibration
    from results.analysis.speedups import records_frame
    from results.record.paths import results_root
    if trials < 2:
        raise UsageError(f"--trials must be >= 2 (a rate needs trials; 20 gives 1-in-20 resolution); got {trials}")
    sw = load(path)
    if sw.name != calibration.NAME or sw.matrix != ("baseline",) or not sw.base.get("interleave"):
        raise UsageError(f"{path}: a calibration sweep is named {calibration.NAME!r}, has matrix [baseline] and "
                         "base interleave: true (the baseline against itself)")
    code = main(path, repeats=trials)
    print(calibration.line(calibration.latest(records_frame(results_root() / "runs"))))
    return code


def _device(backend, site) -> str:
    """This machine's device for cells that run here; the site's (GPUs or not) for a cluster's."""
    if backend.runs_here:
        from harness.parallel.dist import default_device
        return default_device()
    return "cuda" if site.gpus_per_node else "cpu"


def _ranks(backend, site) -> int:
    return 1 if backend.runs_here else site.ranks
