"""One run, start to finish: record folder, signals, final status, ingest.

Status rules: finished (ran), unsupported (this machine can't run the configuration; the
reason says why), failed (an error; data errors name the file), killed (SIGTERM/SIGINT:
the samples so far are kept). Whatever happens, the record is finished before we return.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import signal
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.parallel import dist as dist_mod
from harness.measure import envinfo
from harness.measure import machine_state
from harness.parallel import cpu_quota as rank_cpu
from harness.config import registry
from harness.config.run_config import RunConfig
from harness.config.errors import BadInput, Killed, Unsupported
from harness.run.record import NullRecord, RunRecord
from results.record import schema
from results.record.paths import results_root

@dataclass
class Outcome:
    run_id: str
    dir: Path | None
    status: str
    reason: str
    bad_input: bool = False  # a missing/corrupt data file: the CLI exits 2, as for bad flags


@contextmanager
def signals_raise_killed():
    """SIGTERM (scancel, Slurm time limit) and SIGINT raise Killed in the main thread, so the
    loop unwinds through its finally blocks and the record keeps every finished step."""
    def handler(signum, _frame):
        raise Killed(f"killed by {signal.Signals(signum).name}")
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def execute(cfg: RunConfig, root: Path | None = None) -> Outcome:
    from harness.run import data
    from harness.run import loop
    from harness.run import build as optimize
    from harness.parallel import strategies as parallel  # torch from here on

    root = root or results_root()
    dist = dist_mod.from_env()
    workload = registry.get(cfg.workload)
    launched = cfg.ranks or dist.world
    cfg = dataclasses.replace(cfg, ranks=dist.world)  # the launched count is part of what was measured
    rec = RunRecord(root / "runs", cfg, envinfo.capture()) if dist.is_main else NullRecord()
    if os.environ.get("HARNESS_SLURM_SCRIPT"):  # the rendered #SBATCH script this task ran under
        rec.attach(Path(os.environ["HARNESS_SLURM_SCRIPT"]), schema.JOB_SCRIPT)
    status, reason, bad_input = schema.FAILED, "", False
    quota = None
    with signals_raise_killed():
        try:
            if launched != dist.world:
                raise BadInput(f"ranks={launched} but the launcher ({dist.launcher}) started {dist.world}")
            parallel.check(cfg, dist.world)  # an impossible layout: exit 2 before any work
            dist_mod.init(dist, cfg.device)
            quota = rank_cpu.apply(dist.rank, dist.world)  # HARNESS_RANK_CPU: ranks made unequal for real
            if quota:
                rec.info["rank_cpu"] = rank_cpu.record(dist.world)
            reason = optimize.check(cfg, workload) or ""
            if reason:
                raise Unsupported(reason)
            size = workload.sizes[cfg.size]
            data.ensure_dataset(workload, size, data.dataset_root(cfg), cfg.data_seed)
            machine = machine_state.begin() if dist.is_main else None
            try:
                loop.train(cfg, workload, rec, dist, engine=_engine(cfg, workload, dist, rec))
            finally:  # what else ran meanwhile, for the stability verdict (results/stats/stability.py)
                if machine is not None:
                    rec.info["machine"] = machine_state.end(machine, max(1, dist.world // rec.info.get("nodes", 1)))
            status = schema.FINISHED
            if cfg.reference_run and (cfg.toggles.enabled() or dist.world > 1) and dist.is_main:
                from harness.run import gate
                decided: dict = {}
                problem = gate.check(cfg, [s["loss"] for s in rec.steps], Path(cfg.reference_run), decided)
                rec.info.update(decided)  # what the gate compared and found, in the summary
                if problem:
                    status, reason = schema.FAIL_ACCURACY, problem
                problem = _gate_baseline_side(cfg, rec) if not problem else None
                if problem:
                    status, reason = schema.FAIL_ACCURACY, problem
        except Killed as e:
            status, reason = schema.KILLED, f"{e} after {len(rec.steps)} steps"
        except Unsupported as e:
            status, reason = schema.UNSUPPORTED, str(e)
        except BadInput as e:
            status, reason, bad_input = schema.FAILED, str(e), True
        except Exception as e:  # noqa: BLE001 - any crash still leaves a record
            status, reason = schema.FAILED, f"{type(e).__name__}: {e}".splitlines()[0]
            if dist.world > 1 and dist_mod.peer_lost(reason):
                reason = f"another rank died or hung: {reason}"
            if not (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)):  # a full disk is no bug
                traceback.print_exc(file=sys.stderr)
        finally:
            if quota:
                if dist.is_main:
                    rec.info["rank_cpu"]["rank0_throttled"] = quota.throttled()
                quota.release()
            rec.finish(status, reason)
            dist_mod.shutdown(finished=status in (schema.FINISHED, schema.FAIL_ACCURACY))
    return Outcome(rec.run_id, rec.dir, status, reason, bad_input)


def _engine(cfg: RunConfig, workload, dist, rec):
    """The interleaved A/B engine when the configuration asks for it and can have it; else None
    (the plain loop), with the reason recorded when it asked."""
    if not cfg.interleave:
        return None
    from harness.run import interleave
    reason = interleave.why_not(cfg)
    if reason:
        rec.info["ab_unavailable"] = reason
        return None
    return interleave.Interleaved(cfg, workload, dist)


def _gate_baseline_side(cfg: RunConfig, rec) -> str | None:
    """An interleaved run's baseline side must train as the baseline's own run did: its losses
    against the same reference (a difference means the two sides leaked into each other)."""
    side = rec.info.get("ab", {}).get("baseline")
    if not side:
        return None
    from harness.run import gate
    from harness.run.interleave import baseline_of
    decided: dict = {}
    problem = gate.check(baseline_of(cfg, rec.info.get("world", 1)), side["loss"], Path(cfg.reference_run), decided)
    rec.info["ab_baseline_gate_passed"] = decided.get("gate_passed", 0)
    return problem and f"interleaved baseline side: {problem}"


def ingest_quietly(run_dir: Path, root: Path) -> str | None:
    """Ingest right after the run. If the store can't be reached the record stays on disk and
    `make ingest` picks it up later; returns the problem, or None."""
    try:
        from results.store.ingest import ingest_run
        from results.store.tracking import default_tracking_uri
        ingest_run(run_dir, default_tracking_uri(root), attempts=2)  # fail fast: the record waits for `make ingest`
        return None
    except Exception as e:  # noqa: BLE001 - the record is the source of truth
        return f"{type(e).__name__}: {e}".splitlines()[0]
