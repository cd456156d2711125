"""Ablation sweeps: a YAML file -> configurations -> interleaved runs -> summary table.

Matrix sets (any subset, in this order):
  baseline       all toggles off
  add_one_in     each toggle alone
  all_on         every toggle that can run here
  leave_one_out  all_on minus each toggle
Repeats are interleaved (A B C ... A B C ...) so machine drift hits every configuration alike.
Each run is its own process (clean memory, no compile cache shared between configurations);
one failing or unsupported configuration never stops the sweep. Records are ingested at the end.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from harness.config import TOGGLE_NAMES, RunConfig, Toggles, UsageError, read_yaml_mapping
from results import schema
from results import toggles as toggle_decl

MATRIX_SETS = ("baseline", "add_one_in", "all_on", "leave_one_out")
SWEEP_KEYS = {"name", "workloads", "sizes", "repeats", "toggles", "on_values", "matrix", "base"}
DEFAULT_REPEATS = 5
RUN_TIMEOUT_S = 1800  # one configuration; a hung run is killed and recorded by its own handler


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


def _line_of(text: str, key: str) -> int:
    """1-based line where `key` first appears as a whole word (block or flow YAML style)."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(key)}(?![\w.-])")
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
    sweep = Sweep(name=str(d.get("name") or path.stem), workloads=tuple(listy["workloads"] or ()),
                  sizes=tuple(listy["sizes"] or ("tiny",)), repeats=repeats, toggles=toggles,
                  on_values=on_values, matrix=matrix, base=base)
    if not sweep.workloads:
        raise bad("workloads", "at least one workload is required")
    from harness import registry
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
        items = value.items() if key == "toggles" and isinstance(value, dict) else [(None, value)]
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
    if "baseline" in sweep.matrix:
        cells.append(("baseline", cfg([])))
    if "add_one_in" in sweep.matrix:
        cells += [(f"+{t}", cfg([t])) for t in sweep.toggles]
    if "all_on" in sweep.matrix and len(all_on) > 1:
        cells.append(("all_on", cfg(all_on)))
    if "leave_one_out" in sweep.matrix and len(all_on) > 2:
        cells += [(f"all_on-{t}", cfg([x for x in all_on if x != t])) for t in all_on]
    return cells


def interleave(cells: list[tuple[str, RunConfig]], repeats: int) -> list[tuple[str, RunConfig]]:
    """A B C ... A B C ...: repeat r of every cell before repeat r+1 of any."""
    return [(label, dataclasses.replace(c, repeat=r)) for r in range(repeats) for label, c in cells]


def plan(sweep: Sweep, device: str) -> list[tuple[str, RunConfig]]:
    from harness import optimize, registry

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


def _set_args(cfg: RunConfig) -> list[str]:
    return [a for k, v in cfg.flat().items() if k not in ("workload", "size")
            for a in ("--set", f"{k}={v}")]


_RESULT = re.compile(r"^(\w+): (\S+) \((.+?)\)")
DONE = ("finished", "fail_accuracy")  # statuses a resumed sweep does not run again


def existing_records(runs_root: Path, sweep_id: str) -> dict[tuple[str, int], tuple[str, str]]:
    """(variant, repeat) -> (status, record dir) of the latest record of this sweep instance."""
    from results.report import records_frame

    df = records_frame(runs_root)
    out: dict[tuple[str, int], tuple[str, str]] = {}
    if df.empty or "sweep" not in df:
        return out
    for _, r in df[df["sweep"] == sweep_id].iterrows():  # sorted by start: later ones win
        out[(r["variant"], int(r["repeat"]))] = (r["status"], r["record_dir"])
    return out


def run_all(runs: list[tuple[str, RunConfig]], done: dict | None = None) -> list[str]:
    """Run every configuration in its own process, with a progress bar. Cells whose record in
    `done` already finished are skipped (resume / rerun-failed). Every non-baseline cell gets
    its repeat's baseline as the correctness-gate reference. Returns the statuses."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    done = done or {}
    baselines: dict[tuple, str] = {}  # (workload, size, repeat) -> baseline record dir
    statuses = []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.fields[cell]}")) as bar:
        task = bar.add_task("sweep", total=len(runs), cell="")
        for label, cfg in runs:
            key = (cfg.workload, cfg.size, cfg.repeat)
            prior = done.get((cfg.variant_hash(), cfg.repeat))
            if prior and prior[0] in DONE:
                statuses.append(prior[0])
                if label == "baseline":
                    baselines[key] = prior[1]
                bar.advance(task)
                continue
            if label != "baseline" and key in baselines:
                cfg = dataclasses.replace(cfg, reference_run=baselines[key])
            bar.update(task, cell=f"{cfg.workload}/{cfg.size} {label} r{cfg.repeat}")
            status = _run_one(cfg, bar.console, label)
            if label == "baseline" and status[0] == "finished":
                baselines[key] = status[1]
            statuses.append(status[0])
            bar.advance(task)
    return statuses


def _run_one(cfg: RunConfig, console, label: str) -> tuple[str, str]:
    cmd = [sys.executable, "-m", "harness", "run", cfg.workload, "--size", cfg.size, "--no-ingest",
           *_set_args(cfg)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # SIGTERM first: the run writes its `killed` record
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        console.print(f"  {label} r{cfg.repeat}: timed out after {RUN_TIMEOUT_S}s")
    p = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    m = _RESULT.match((p.stdout.strip().splitlines() or [""])[-1])
    last_err = (p.stderr.strip().splitlines() or ["no output"])[-1]
    if m is None or p.returncode not in (0, 2):
        console.print(f"  {label} r{cfg.repeat}: exit {p.returncode}: {last_err}")
    if m is None:  # the process died without finishing its record: close it as failed
        how = f"signal {-p.returncode}" if p.returncode and p.returncode < 0 else f"exit {p.returncode}"
        for d in _running_records(cfg):
            schema.finalize_orphan(d, f"run process died ({how}): {last_err}"[:500])
        return "failed", ""
    return m.group(1), m.group(3)


def _running_records(cfg: RunConfig) -> list[Path]:
    from results.paths import results_root
    out = []
    for d in (results_root() / "runs").glob(f"{cfg.workload}-{cfg.size}-{cfg.variant_hash()}-*"):
        try:
            rec = schema.read_record(d)
        except schema.RecordError:
            continue
        if rec["status"]["status"] == schema.RUNNING and rec["config"].get("sweep") == cfg.sweep \
                and rec["config"].get("repeat") == cfg.repeat:
            out.append(d)
    return out


def latest_instance(runs_root: Path, name: str) -> str | None:
    from results.report import records_frame

    df = records_frame(runs_root)
    if df.empty or "sweep" not in df:
        return None
    ids = sorted(i for i in df["sweep"].dropna().unique() if str(i).startswith(f"{name}@"))
    return ids[-1] if ids else None


def main(path: Path, repeats: int = 0, rerun_failed: bool = False) -> int:
    import time

    from harness.dist import default_device
    from results.paths import results_root
    from results.ingest import ingest_all
    from results.tracking import default_tracking_uri
    from results.report import print_sweep_summary

    sweep = load(path)
    if repeats:
        sweep = dataclasses.replace(sweep, repeats=repeats)
    root = results_root()
    sweep_id = f"{sweep.name}@{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    done = {}
    if rerun_failed:
        sweep_id = latest_instance(root / "runs", sweep.name) or ""
        if not sweep_id:
            raise UsageError(f"no earlier run of sweep {sweep.name!r} under {root / 'runs'} to rerun")
        done = existing_records(root / "runs", sweep_id)
    runs = plan(dataclasses.replace(sweep, name=sweep_id), default_device())
    todo = sum(1 for _, c in runs if done.get((c.variant_hash(), c.repeat), ("",))[0] not in DONE)
    print(f"sweep {sweep_id}: {len(runs) // sweep.repeats} configurations x {sweep.repeats} repeats, "
          f"interleaved; {todo} to run")
    run_all(runs, done)
    uri = default_tracking_uri(root)
    try:
        res = ingest_all(root / "runs", uri)
        print(f"ingested {len(res['added'])} new records into {uri}")
    except Exception as e:  # noqa: BLE001 - records stay; `make ingest` retries
        print(f"warning: could not ingest into {uri} ({e}); records kept, run `make ingest`", file=sys.stderr)
    print_sweep_summary(root / "runs", sweep_id)
    print("Browse the results: make portal  (then open http://127.0.0.1:8501)")
    return 0
