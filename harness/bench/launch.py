"""The one way a benchmark runs the harness and reads what it recorded: `python -m harness ARGS`
(under mpiexec for more than one rank), the new record folder found by difference, read through
results' validating reader. A failed launch raises with its last stderr line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.parallel.dist import mpiexec
from results.record import schema
from results.record.paths import REPO_ROOT


def harness_cmd(ranks: int, *args: str) -> list[str]:
    """The command line: mpiexec -n RANKS python -m harness ARGS (no mpiexec for one rank)."""
    return ([mpiexec(), "-n", str(ranks)] if ranks > 1 else []) + [sys.executable, "-m", "harness", *args]


def run_harness(env: dict, ranks: int, *args: str) -> str:
    """Run it; its stdout. RuntimeError naming the command's last stderr line when it fails."""
    p = subprocess.run(harness_cmd(ranks, *args), env=env, cwd=REPO_ROOT, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"harness {' '.join(args[:2])} failed (exit {p.returncode}): "
                           f"{(p.stderr.strip().splitlines() or ['no output'])[-1]}")
    return p.stdout


def run_recorded(env: dict, results: Path, ranks: int, *args: str, with_metrics: bool = False,
                 subdir: str = "runs") -> dict:
    """Run `harness ARGS` on `ranks` ranks and return the one record it added under
    results/<subdir>/ (schema.read_record's dict)."""
    before = set(schema.record_dirs(results / subdir))
    run_harness(env, ranks, *args)
    new = [d for d in schema.record_dirs(results / subdir) if d not in before]
    if len(new) != 1:
        raise RuntimeError(f"harness {' '.join(args[:2])} added {len(new)} records under {results / subdir}, not 1")
    return schema.read_record(new[0], with_metrics=with_metrics)


def run_interleaved(env: dict, results: Path, ranks: int, processes: int, *args: str,
                    with_metrics: bool = False) -> dict:
    """`harness run ARGS --set interleave=true` in `processes` separate processes (each measures
    its configuration against its other side in alternating blocks, harness/run/interleave.py),
    their estimates combined over the processes (results/stats/interleaved.combine): speedup of
    the configuration over the other side, ci95, per-process figures, and every record ("records")."""
    from results.stats import interleaved
    recs = [run_recorded(env, results, ranks, *args, "--set", "interleave=true", with_metrics=with_metrics)
            for _ in range(processes)]
    est = [(r["summary"]["ab_ratio"], r["summary"]["ab_lo"], r["summary"]["ab_hi"]) for r in recs]
    c = interleaved.combine(est) or {"ratio": float("nan"), "ci_lo": float("nan"), "ci_hi": float("nan"),
                                     "processes": 0, "tau": float("nan")}
    return {"speedup": c["ratio"], "ci95": [c["ci_lo"], c["ci_hi"]], "processes": len(recs),
            "process_tau": c["tau"],
            "per_process": [{"speedup": round(r, 4), "ci95": [round(lo, 4), round(hi, 4)],
                             "pairs": x["summary"]["ab_pairs"], "ended_by": x["summary"]["ab"]["ended_by"],
                             "sampled_s": round(x["summary"]["ab_seconds"], 1)}
                            for (r, lo, hi), x in zip(est, recs)],
            "records": recs}


def other_side_median(rec: dict) -> float:
    """An interleaved record's other side ("A"): the median of its timed (steady) steps, seconds."""
    import statistics
    base = rec["summary"]["ab"]["baseline"]
    return statistics.median(t for t, ph in zip(base["step_s"], base["phase"]) if ph == "steady")
