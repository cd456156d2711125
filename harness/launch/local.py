"""The `local` scheduler: every cell on this machine, one process after another, in the sweep's
interleaved order (A B C ... A B C ...: drift hits every configuration alike), with a progress
bar. `submit` runs a job to its end before it returns, so a job's dependencies have always
ended when it starts, `poll` finds nothing running and `cancel` has nothing to stop.

Each cell is its own process (clean memory, no compile cache shared between configurations);
one failing or unsupported cell never stops the sweep. A hung cell is stopped after
RUN_TIMEOUT_S with SIGTERM (its run writes a `killed` record); a process that dies without
closing its record gets it closed as `failed` here.

A cell runs in its own process group. SIGTERM, SIGINT (Ctrl-C) or SIGHUP to the sweep is
forwarded to that group as SIGTERM (a second one as SIGKILL): the cell records itself `killed`,
no later cell starts, what finished is ingested and summarized, and the sweep exits 128+signal.
Without this, `kill <sweep pid>` left the cell running, re-parented to PID 1 and never ingested.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from harness.launch.backend import Cell, Job, SweepPlan
from harness.parallel.dist import mpiexec
from results.record import schema
from results.record.paths import results_root

RUN_TIMEOUT_S = 1800  # one configuration; a hung run is killed and recorded by its own handler
_RESULT = re.compile(r"^(\w+): (\S+) \((.+?)\)")  # the last line `harness cell` prints


class LocalBackend:
    name = "local"
    runs_here = True
    site_requires: tuple[str, ...] = ()

    def __init__(self, site=None):
        self.site = site
        self._plan: SweepPlan | None = None
        self._bar = None
        self.statuses: list[str] = []
        self.stopped_by = 0  # the signal that stopped the sweep; 0 while it runs

    # -- the protocol ------------------------------------------------------------------------
    def check(self) -> None:
        pass

    def render(self, plan: SweepPlan) -> list[Job]:
        self._plan = plan
        jobs, names = [], {}
        for i in plan.todo:
            b = plan.baseline_cell(i)
            after = (names[b],) if b in names else ()  # a baseline finished earlier needs no wait
            names[i] = f"cell-{i}"
            jobs.append(Job(names[i], _command(plan, i), plan.dir / f"cell-{i}{plan.suffix()}.sh", (i,), after))
        jobs.append(Job("ingest", "\n".join(plan.ingest_commands()), plan.dir / f"ingest{plan.suffix()}.sh",
                        (), tuple(names.values())))
        return jobs

    def submit_command(self, job: Job, after: list[str]) -> str:
        wait = f"  # after {', '.join(after)}" if after else ""
        return f"bash {job.path}{wait}"

    def submit(self, job: Job, after: list[str]) -> str:
        if job.cells:
            if not self.stopped_by:  # after a stop, the cells left are not started
                self._run_cell(job.cells[0], job.script)
        else:
            self._top_up()
            self._close_bar()
            self._ingest_and_summarize()
            self._exit_if_stopped()
        return f"local:{job.name}"

    def _exit_if_stopped(self) -> None:
        if self.stopped_by:
            left = len(self._plan.todo) - len(self.statuses)
            print(f"sweep {self._plan.sweep_id} stopped by {signal.Signals(self.stopped_by).name}: the running cell "
                  f"recorded as killed, {left} cell(s) not started; `--rerun-failed` resumes it", file=sys.stderr)
            raise SystemExit(128 + self.stopped_by)

    def poll(self, ids: list[str]) -> set[str]:
        return set()

    def cancel(self, ids: list[str]) -> None:
        pass

    # -- running ------------------------------------------------------------------------------
    def _progress(self):
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[cell]}"))
            self._bar.start()
            self._task = self._bar.add_task("sweep", total=len(self._plan.todo), cell="")
        return self._bar

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _run_cell(self, i: int, command: str) -> None:
        plan = self._plan
        cell = plan.cells[i]
        cfg = cell.config
        bar = self._progress()
        what = f"{cell.label} r{cfg['repeat']}"
        bar.update(self._task, cell=f"{cfg['workload']}/{cfg['size']} {what}")
        env = {**os.environ, "HARNESS_SCHEDULER": self.name, "HARNESS_JOB_ID": f"{plan.sweep_id}#{i}"}
        status, self.stopped_by = _run(command, env, cell, bar.console, what)
        self.statuses.append(status)
        bar.advance(self._task)

    def _top_up(self) -> None:
        """The plan's top-up cells, one at a time, before the ingest (they are the sweep's cells too)."""
        plan = self._plan
        while plan.top_up is not None and not self.stopped_by:
            i = plan.top_up(plan)
            if i is None:
                break
            self._progress().update(self._task, total=len(plan.todo))
            self._run_cell(i, _command(plan, i))

    def run_cells(self, plan: SweepPlan) -> list[str]:
        """Only the cells, no ingest job (a time-to-train campaign scores its own runs)."""
        plan.write_cells()
        for job in self.render(plan)[:-1]:
            self.submit(job, [])  # cells only: their baselines come first in plan order
        self._close_bar()
        self._exit_if_stopped()
        return self.statuses

    def _ingest_and_summarize(self) -> None:
        """The ingest job's two commands (`python -m results ingest`, `... summary`), in-process."""
        from results.store.ingest import ingest_all
        from results.analysis.sweep_summary import print_sweep_summary
        from results.store.tracking import default_tracking_uri
        root = self._plan.results
        uri = default_tracking_uri(root)
        try:
            res = ingest_all(root / "runs", uri)
            print(f"ingested {len(res['added'])} new records into {uri}")
            for line in res["failed"]:
                print(f"warning: record not ingested: {line}", file=sys.stderr)
        except Exception as e:  # noqa: BLE001 - records stay; `make ingest` retries
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            print(f"warning: could not ingest into {uri} ({why}); records kept, run `make ingest`", file=sys.stderr)
        print_sweep_summary(root / "runs", self._plan.sweep_id)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _command(plan: SweepPlan, i: int) -> str:
    """Cell i's command line; a multi-rank cell (parallel strategies) under mpiexec, its ranks on this machine."""
    command = plan.cell_command(str(i))
    ranks = plan.cells[i].config.get("ranks", 1)
    return f"{mpiexec()} -n {ranks} {command}" if ranks > 1 else command


def _run(command: str, env: dict, cell: dict, console, what: str) -> tuple[str, int]:
    """One cell's process (group) to its end: (its record's status, the signal that asked the
    sweep to stop meanwhile, or 0)."""
    proc = subprocess.Popen(command, shell=True, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own group: mpiexec and every rank get the signal
    stops: list[int] = []

    def forward(signum, _frame):  # runs in the main thread between syscalls; communicate() resumes after
        stops.append(signum)
        _signal_group(proc, signal.SIGTERM if len(stops) == 1 else signal.SIGKILL)

    main_thread = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = {s: signal.signal(s, forward) for s in STOP_SIGNALS} if main_thread else {}
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:  # SIGTERM first: the run writes its `killed` record
        _signal_group(proc, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            out, err = proc.communicate()
        console.print(f"  {what}: timed out after {RUN_TIMEOUT_S}s")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return _status(proc, out, err, cell, console, what), (stops[0] if stops else 0)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:  # already gone
        pass


def _status(proc: subprocess.Popen, out: str, err: str, cell: dict, console, what: str) -> str:
    m = _RESULT.match((out.strip().splitlines() or [""])[-1])
    last_err = (err.strip().splitlines() or ["no output"])[-1]
    if m is None or proc.returncode not in (0, 2):
        console.print(f"  {what}: exit {proc.returncode}: {last_err}")
    if m is None:  # the process died without finishing its record: close it as failed
        how = f"signal {-proc.returncode}" if proc.returncode and proc.returncode < 0 else f"exit {proc.returncode}"
        for d in _running_records(cell):
            schema.finalize_orphan(d, f"run process died ({how}): {last_err}"[:500])
        return schema.FAILED
    return m.group(1)


def _running_records(cell: Cell) -> list[Path]:
    """Records of this cell (variant, sweep, repeat) still marked running."""
    out = []
    for d, rec, _ in schema.scan_records(results_root() / "runs", f"{cell.config['workload']}-"
                                         f"{cell.config['size']}-{cell.variant}-*"):
        if rec is not None and rec["status"]["status"] == schema.RUNNING and \
                rec["config"].get("sweep") == cell.config["sweep"] and \
                rec["config"].get("repeat") == cell.repeat:
            out.append(d)
    return out
