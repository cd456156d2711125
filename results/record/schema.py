"""The run record on disk: file names, statuses and a reader. Shared by the harness (writer)
and results/ (ingest, portal). Pure Python: no torch, no harness import."""
from __future__ import annotations

import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

RECORD_VERSION = 1
CONFIG = "config.json"      # RunConfig as a dict, plus run_id and variant
ENV = "env.json"            # environment: versions, CPU/GPU, host, Slurm, command line
METRICS = "metrics.jsonl"   # one JSON object per line: kind=step|eval, raw per-step samples
MLPERF_LOG = "mlperf.log"   # :::MLLOG lines written through mlperf_logging.mllog
SUMMARY = "summary.json"    # figures derived from metrics.jsonl at the end of the run
JOB_SCRIPT = "job.sbatch"   # the rendered #SBATCH script, for runs submitted to Slurm
STATUS = "status.json"      # {"status", "reason", "started", "ended"}; written last

RUNNING = "running"
FINISHED, FAILED, KILLED, UNSUPPORTED, FAIL_ACCURACY = (
    "finished", "failed", "killed", "unsupported", "fail_accuracy")
FINAL_STATUSES = (FINISHED, FAILED, KILLED, UNSUPPORTED, FAIL_ACCURACY)
# MLflow has no 'unsupported': such runs end FINISHED and carry the real status as a tag
MLFLOW_STATUS = {FINISHED: "FINISHED", UNSUPPORTED: "FINISHED", FAIL_ACCURACY: "FINISHED",
                 FAILED: "FAILED", KILLED: "KILLED"}


class RecordError(ValueError):
    """A run folder that is missing files or holds unreadable JSON (named in the message)."""


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise RecordError(f"{path.parent.name}: missing {path.name}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordError(f"{path.parent.name}: unreadable {path.name} ({e})") from None


# Summary keys renamed to carry their unit; records written before the rename are read with
# the new names, so every reader sees one spelling.
RENAMED = {"peak_flops_measured": "peak_flop_per_s_measured", "peak_flops_vendor": "peak_flop_per_s_vendor",
           **{f"share_{c}": f"time_frac_{c}" for c in
              ("data_wait", "compute_bound", "memory_bound", "optimizer", "other")}}  # as written then
RENAMED_FROM = {new: old for old, new in RENAMED.items()}


# The shape every reader relies on, checked once here (the one reader of records): a record
# whose JSON parses but has the wrong shape is a RecordError naming the folder and the problem,
# never a KeyError or TypeError in whoever walks the records next.
RUN_CONFIG_KEYS = {"run_id": str, "variant": str, "workload": str, "size": str, "device": str}
COMM_KIND = "comm"  # results/record/comm.py's KIND: a collectives record has no variant/workload
PROFILE_KIND = "profile"  # harness/planning/profile.py's layer profiles
CONFIG_KEYS = {"run": RUN_CONFIG_KEYS, COMM_KIND: {"run_id": str},
               PROFILE_KIND: {"run_id": str, "workload": str, "size": str}}  # per config "kind" (none: run)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _shape_problem(name: str, config: Any, env: Any, status: Any, summary: Any) -> str:
    """What is wrong with a record's parsed files, or "" when each has the shape readers expect."""
    for fname, obj in ((CONFIG, config), (ENV, env), (STATUS, status), (SUMMARY, summary)):
        if not isinstance(obj, dict):
            return f"{fname} is {type(obj).__name__}, not an object"
    kind = config.get("kind", "run")
    if not isinstance(kind, str) or kind not in CONFIG_KEYS:
        return f"{CONFIG}: kind {kind!r:.60} is not one of {', '.join(CONFIG_KEYS)}"
    required = CONFIG_KEYS[kind]
    for key, typ in required.items():
        if not isinstance(config.get(key), typ) or not config.get(key):
            return f"{CONFIG}: {key} is {'missing' if key not in config else repr(config[key])[:60]}"
    if config["run_id"] != name:
        return f"{CONFIG}: run_id {config['run_id'][:60]!r} is not the folder's name"
    for key in ("toggles", "parallel"):
        if key in config and not isinstance(config[key], dict):
            return f"{CONFIG}: {key} is {type(config[key]).__name__}, not an object"
    if "sweep" in config and not isinstance(config["sweep"], str):
        return f"{CONFIG}: sweep is {type(config['sweep']).__name__}, not a string"
    if "repeat" in config and not (isinstance(config["repeat"], int) and not isinstance(config["repeat"], bool)):
        return f"{CONFIG}: repeat is {config['repeat']!r:.60}, not an integer"
    if "ranks" in config and not (isinstance(config["ranks"], int) and not isinstance(config["ranks"], bool)):
        return f"{CONFIG}: ranks is {config['ranks']!r:.60}, not an integer"
    if status.get("status") not in (RUNNING, *FINAL_STATUSES):
        return f"{STATUS}: status {status.get('status')!r:.60} is not one of {', '.join((RUNNING, *FINAL_STATUSES))}"
    for key in ("started", "ended"):
        if (key == "started" or key in status) and not _number(status.get(key)):
            return f"{STATUS}: {key} is {'missing' if key not in status else repr(status[key])[:60]}, not a time in seconds"
    if not isinstance(status.get("reason", ""), str):
        return f"{STATUS}: reason is {type(status['reason']).__name__}, not a string"
    return ""


def read_record(run_dir: Path, *, with_metrics: bool = False) -> dict[str, Any]:
    """The record as one dict: config, env, status, summary (empty until finished), metrics.
    Raises RecordError (folder: what is wrong) for a missing or unreadable file, or one whose
    shape is not a record's."""
    run_dir = Path(run_dir)
    rec = {"dir": str(run_dir), "config": _json(run_dir / CONFIG), "env": _json(run_dir / ENV),
           "status": _json(run_dir / STATUS)}
    summary = _json(run_dir / SUMMARY) if (run_dir / SUMMARY).exists() else {}
    problem = _shape_problem(run_dir.name, rec["config"], rec["env"], rec["status"], summary)
    if problem:
        raise RecordError(f"{run_dir.name}: {problem}")
    rec["summary"] = {RENAMED.get(k, k): v for k, v in summary.items()}
    if isinstance(summary.get("staging"), dict) and "read_GBps" in summary["staging"]:
        st = dict(summary["staging"])
        st["read_gb_per_s"] = st.pop("read_GBps")
        rec["summary"]["staging"] = st
    if with_metrics:
        rec["metrics"] = read_metrics(run_dir)
    return rec


def summary_figures(summary: dict[str, Any]) -> dict[str, float]:
    """The summary's figures: every top-level value that is a finite number (a bool as 0/1).
    What reaches MLflow as a run's metrics is derived from this, so a new figure a run writes
    needs no list kept in step elsewhere (nested blocks - staging, roofline, pipeline events -
    stay in the record's files)."""
    return {k: float(v) for k, v in summary.items() if isinstance(k, str) and (isinstance(v, bool) or _number(v))}


def mllog_events(run_dir: Path) -> list[dict[str, Any]]:
    """The run's MLLOG events ({time_ms, key, value, metadata, event_type}), read with the MLPerf
    checker's own parser (mlperf_logging's mlp_parser, HPC 3.0.0); lines it cannot parse are
    left out, as the checker leaves them. [] when the run wrote no log."""
    log = Path(run_dir) / MLPERF_LOG
    if not log.is_file():
        return []
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    lines, _errors = parse_file(str(log), ruleset="3.0.0")
    out = []
    for ll in lines:
        try:  # the parser keeps the line whole; its event type is only there
            raw = json.loads(ll.full_string.split(":::MLLOG ", 1)[1])
        except (IndexError, ValueError):
            continue
        if isinstance(raw, dict):
            out.append({"time_ms": ll.timestamp, "key": ll.key, "value": ll.value.get("value"),
                        "metadata": ll.value.get("metadata") or {}, "event_type": raw.get("event_type", "")})
    return out


def record_dirs(runs_root: Path, pattern: str = "*") -> list[Path]:
    """The run folders under runs_root (matching a glob pattern), sorted by name."""
    return sorted(p for p in Path(runs_root).glob(pattern) if p.is_dir())


def scan_records(runs_root: Path, pattern: str = "*"):
    """(folder, record, problem) per run folder: record None and the RecordError's message
    when the folder is unreadable. The one walk over the records (reports, resume, checks)."""
    for d in record_dirs(runs_root, pattern):
        try:
            yield d, read_record(d), ""
        except RecordError as e:
            yield d, None, str(e)


# what each kind of metrics row must carry as numbers (loss may be NaN: a diverged run is a result)
METRIC_FIELDS = {"step": ("step", "step_s"), "eval": ("step", "quality"), "size": ("bytes",)}


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl lines that are JSON objects; a torn last line (killed mid-write) or any other
    line that is not one (bytes that are not text, a bare value) is left out."""
    out = []
    path = Path(run_dir) / METRICS
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            out.append(row)
    for i, row in enumerate(out):
        need = METRIC_FIELDS.get(row.get("kind"))
        if need is None:
            raise RecordError(f"{Path(run_dir).name}: {METRICS}: row {i + 1} has kind {str(row.get('kind'))[:40]!r}, "
                              f"not one of {', '.join(METRIC_FIELDS)}")
        bad = [k for k in need if not _number(row.get(k))]
        if bad:
            raise RecordError(f"{Path(run_dir).name}: {METRICS}: row {i + 1} ({row['kind']}) has no number for "
                              f"{', '.join(bad)}")
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def orphaned(status: dict) -> bool:
    """A `running` record whose process (on this host) is gone: it crashed or was SIGKILLed
    before it could finish its record."""
    return (status.get("status") == RUNNING and status.get("host") == socket.gethostname()
            and isinstance(status.get("pid"), int) and not _pid_alive(status["pid"]))


def open_record(run_dir: Path, started: float) -> None:
    """A record's status while its process runs: who and where (an orphan is found by them)."""
    write_json(Path(run_dir) / STATUS, {"status": RUNNING, "reason": "", "started": started,
                                        "pid": os.getpid(), "host": socket.gethostname()})


def close_record(run_dir: Path, summary: dict, status: str, reason: str, started: float) -> None:
    """A record's last two writes: its summary, then its final status (last, so a reader that
    sees a final status also sees the summary). On a full disk the status still says what
    happened when it can (see _status_in_place), and the OSError is raised."""
    try:
        write_json(Path(run_dir) / SUMMARY, summary)
    except OSError as e:
        if status != FAILED:
            reason = f"the run was {status}, then {SUMMARY} could not be written: {e.strerror or e}"
        _status_in_place(Path(run_dir) / STATUS, {"status": FAILED, "reason": reason, "started": started,
                                                  "ended": time.time()})
        raise
    write_json(Path(run_dir) / STATUS, {"status": status, "reason": reason, "started": started, "ended": time.time()})


def _status_in_place(path: Path, st: dict) -> None:
    """Write a final status even on a full disk: atomically if a new file fits, else over the
    running status in place (its block is already allocated and a status is ~150 bytes).
    Gives up quietly when neither works: the dead pid in the running status still marks the
    record orphaned, and the next ingest closes it."""
    try:
        write_json(path, st)
        return
    except OSError:
        pass
    try:
        with open(path, "r+") as f:
            f.write(json.dumps(st, indent=1))
            f.truncate()
    except OSError:
        pass


def finalize_orphan(run_dir: Path, reason: str) -> None:
    """Close a dead run's record as failed (the only write ever made to another's record)."""
    path = Path(run_dir) / STATUS
    st = json.loads(path.read_text())
    st.update(status=FAILED, reason=reason, ended=time.time())
    write_json(path, st)


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically: a temporary file beside it (per process, so concurrent writers
    never share one), then os.replace, so readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(obj, indent=1, default=str))
        os.replace(tmp, path)
    except BaseException:  # a full disk: no half-written temporary file left beside the record
        tmp.unlink(missing_ok=True)
        raise


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts to dotted keys ({"toggles": {"amp": "bf16"}} -> {"toggles.amp": "bf16"}): the
    config's `--set` keys, its MLflow params and the portal's diffs use the same spelling."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
