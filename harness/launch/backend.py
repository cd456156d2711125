"""One launcher protocol for every scheduler (ReFrame's scheduler registry: each backend
renders, submits, polls and cancels; the site file names which one).

A sweep is planned once (harness/experiments/sweep.py) into cells; `launch` writes them to
results/sweeps/<sweep id>/cells.json, asks the backend to render jobs for the cells still to
run, and submits the jobs in order with their dependencies:

  every cell runs `python -m harness cell cells.json I`, which finds its repeat's baseline
  record for the correctness gate, so a non-baseline cell's job waits for its baseline's job;
  one ingest job waits for all of them: it ingests every record and prints the sweep summary.

Backends: `local` (this machine, one cell after another in interleaved order;
harness/launch/local.py) and `slurm` (job arrays and sbatch dependencies; harness/launch/slurm.py),
registered by name in harness/launch/schedulers.py.
"""
from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from harness.config.errors import UsageError

CELLS = "cells.json"
JOBS = "jobs.json"


@dataclass(frozen=True)
class Job:
    name: str
    """Unique within a submission; also the script's file name stem."""
    script: str
    """What runs: a batch script (Slurm) or a shell command line (local)."""
    path: Path
    """Where the script is written before it is submitted."""
    cells: tuple[int, ...] = ()
    """Cell indices the job runs (none for the ingest job)."""
    after: tuple[str, ...] = ()
    """Names of earlier jobs it starts after, whatever their outcome (Slurm's afterany)."""


BASELINE = "baseline"


@dataclass(frozen=True)
class Cell:
    """One run slot of a planned sweep (the sweep's word for it; a configuration is its label,
    and cells.json is the file that holds them). Written to cells.json and read back by every
    job that runs one (`harness cell FILE I`)."""
    label: str
    """The configuration's name, results/record/labels.config_label: baseline, +channels_last, fsdp@2 ..."""
    config: dict
    """RunConfig.to_dict() of the run."""
    variant: str
    """The config's variant hash (what it measures)."""
    baseline_variant: str = ""
    """The variant of its repeat's baseline, whose record its correctness gate reads ("" for none)."""

    @property
    def is_baseline(self) -> bool:
        return self.label == BASELINE

    @property
    def repeat(self) -> int:
        return self.config["repeat"]

    def to_json(self) -> dict:
        return {"label": self.label, "config": self.config, "variant": self.variant,
                "baseline_variant": self.baseline_variant}

    @classmethod
    def from_json(cls, d, where: str = "cells.json") -> "Cell":
        """A cell read back; UsageError naming `where` for anything that is not one."""
        if not isinstance(d, dict) or not isinstance(d.get("label"), str) or not isinstance(d.get("config"), dict) \
                or not isinstance(d.get("variant"), str) or not isinstance(d.get("baseline_variant", ""), str):
            raise UsageError(f"{where}: not a sweep cell (label, config, variant, baseline_variant): {str(d)[:80]}")
        return cls(d["label"], d["config"], d["variant"], d.get("baseline_variant", ""))


def read_cells(path: Path) -> list[Cell]:
    """cells.json as cells; UsageError naming the file when it is unreadable or malformed."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    if not isinstance(raw, list):
        raise UsageError(f"{path}: expected a list of cells")
    return [Cell.from_json(d, f"{path}[{i}]") for i, d in enumerate(raw)]


@dataclass
class SweepPlan:
    sweep_id: str
    cells: list[Cell]
    """Every cell of the sweep, in interleaved order."""
    todo: list[int]
    """Cells to run now (all of them, or the unfinished ones on --rerun-failed)."""
    results: Path
    rerun: bool = False
    python: str = ""
    top_up: Callable[["SweepPlan"], int | None] | None = None
    """Asked after the planned cells, until it returns None, for the next cell to add and run (it
    appends the cell to `cells` and `todo` and rewrites cells.json): harness/experiments/top_up.py.
    Only a backend that runs here asks; a batch scheduler has submitted everything before."""

    @property
    def dir(self) -> Path:
        return self.results / "sweeps" / safe(self.sweep_id)

    @property
    def cells_file(self) -> Path:
        return self.dir / CELLS

    @property
    def logs(self) -> Path:
        return self.results / "slurm" / safe(self.sweep_id)

    def write_cells(self) -> None:
        """cells.json: every cell, read back by each job (`harness cell FILE I`, read_cells)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cells_file.write_text(json.dumps([c.to_json() for c in self.cells], indent=1))

    def suffix(self) -> str:
        return "-rerun" if self.rerun else ""

    def cell_command(self, index: str) -> str:
        return f"{self.python} -m harness cell {shlex.quote(str(self.cells_file))} {index}"

    def ingest_commands(self) -> list[str]:
        return [f"{self.python} -m results ingest",
                f"{self.python} -m results summary --sweep {shlex.quote(self.sweep_id)}"]

    def baseline_cell(self, i: int) -> int | None:
        """Index of the cell whose record cell i's correctness gate reads, if it is planned."""
        c = self.cells[i]
        if c.is_baseline:
            return None
        cfg = c.config
        for j, b in enumerate(self.cells):
            bc = b.config
            if b.is_baseline and (bc["workload"], bc["size"], bc["repeat"]) == (cfg["workload"], cfg["size"], cfg["repeat"]):
                return j
        return None


class SubmitError(UsageError):
    """The scheduler refused a job: what was already submitted is cancelled, exit 2."""


class Backend(Protocol):
    name: str
    runs_here: bool
    """True when submit runs every cell on this machine, one after another (it prints its own
    progress, uses this machine's device and lets a sweep choose its own rank counts); False
    for a batch scheduler, whose jobs run elsewhere at the site's ranks. Generic code asks this,
    never a scheduler's name."""
    site_requires: tuple[str, ...]
    """Site-file keys this scheduler cannot do without (Slurm: its partition)."""

    def check(self) -> None:
        """Can the scheduler take jobs (its commands found, the partition there)? Called before
        anything is written or submitted; not in a dry run. UsageError if not."""

    def render(self, plan: SweepPlan) -> list[Job]:
        """Jobs for plan.todo, each after the jobs it depends on, in submission order; the
        ingest job last."""

    def submit_command(self, job: Job, after: list[str]) -> str:
        """The command `submit` runs, as a shell line (printed by --dry-run)."""

    def submit(self, job: Job, after: list[str]) -> str:
        """Start the job once the jobs with these scheduler ids have ended; its scheduler id."""

    def poll(self, ids: list[str]) -> set[str]:
        """The ids among these that have not ended yet."""

    def cancel(self, ids: list[str]) -> None:
        """Stop these jobs (ended ones are ignored)."""


def safe(sweep_id: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in sweep_id)


def launch(backend: Backend, plan: SweepPlan, dry_run: bool = False, wait: bool = False) -> int:
    """Render, then submit every job with its dependencies (or print them: dry run). A refused
    submission cancels what this call submitted and raises SubmitError."""
    if not dry_run:
        backend.check()
    jobs = backend.render(plan)
    if dry_run:
        ids = {j.name: f"<{j.name}>" for j in jobs}
        for j in jobs:
            print(f"# ---- {j.path}\n{j.script}")
        print("# submit commands, in order (<name> stands for that job's id):")
        for j in jobs:
            print(backend.submit_command(j, [ids[a] for a in j.after]))
        more = f" (and, here, top-up cells once figures exist: {plan.top_up})" if plan.top_up and backend.runs_here else ""
        print(f"# dry run: {len(plan.todo)} cells in {len(jobs) - 1} job(s) + 1 ingest job{more}; nothing submitted")
        return 0
    if not plan.todo:
        print(f"sweep {plan.sweep_id}: every cell already has a finished record; nothing to submit")
        return 0
    plan.dir.mkdir(parents=True, exist_ok=True)
    if not plan.rerun:
        plan.write_cells()
    ids: dict[str, str] = {}
    try:
        for j in jobs:
            j.path.write_text(j.script)
            ids[j.name] = backend.submit(j, [ids[a] for a in j.after])
    except SubmitError:
        backend.cancel(list(ids.values()))  # nothing half-submitted left behind
        raise
    ingest = jobs[-1].name
    (plan.dir / JOBS).write_text(json.dumps({"scheduler": backend.name, "arrays": [ids[j.name] for j in jobs[:-1]],
                                             "ingest": ids[ingest]}))
    if not backend.runs_here:  # a backend that runs here ran everything inside submit, with its own output
        print(f"sweep {plan.sweep_id}: {len(plan.todo)} cells as job(s) {', '.join(ids[j.name] for j in jobs[:-1])}; "
              f"ingest + summary job {ids[ingest]} (output under {plan.logs})")
    if wait:
        while backend.poll(list(ids.values())):
            pass
        for out in sorted(plan.logs.glob(f"ingest-{ids[ingest]}.out")):
            print(out.read_text())
    return 0
