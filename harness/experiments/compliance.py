"""MLLOG compliance with the unmodified MLPerf checker (mlperf_logging.compliance_checker).

CosmoFlow and DeepCAM are checked against the HPC 3.0.0 rules (`--usage hpc --ruleset 3.0.0`;
synthetic data makes them open-division runs). The LM has no HPC ruleset, so the project ships
its own rules file (harness/rules/lm_open.yaml, passed with `--config`), written in the
checker's own rule language.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

RULES_DIR = Path(__file__).resolve().parents[1] / "rules"  # harness/rules
HPC = "hpc"  # a workload's mlperf_rules for the checker's own HPC 3.0.0 ruleset


def rules_of(workload: str) -> str:
    """The workload's rules (workloads/base.py mlperf_rules): "hpc", a rules file name, or ""."""
    from harness.config import registry
    return registry.get(workload).mlperf_rules


def checker_command(log: Path, workload: str, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "hpc", "--ruleset", "3.0.0",
           "--log_output", str(out)]
    rules = rules_of(workload)
    if rules != HPC:
        cmd += ["--config", str(RULES_DIR / rules)]
    return [*cmd, str(log)]


def check(log: Path, workload: str) -> tuple[bool, str]:
    """(passed, the checker's own words: its warnings and errors, or its verdict)."""
    if not rules_of(workload):
        return False, f"{workload} declares no MLPerf rules (mlperf_rules is empty): nothing to check against"
    with tempfile.TemporaryDirectory() as tmp:
        # in a scratch directory, so nothing the checker writes lands in the caller's folder
        p = subprocess.run(checker_command(Path(log).resolve(), workload, Path(tmp) / "checker.log"), cwd=tmp,
                           capture_output=True, text=True)
    lines = [ln for ln in (p.stdout + p.stderr).splitlines()
             if ln.startswith(("WARNING", "ERROR", "failed test:", "Required", "Failed checks"))
             or "SUCCESS" in ln]
    return p.returncode == 0 and any("SUCCESS" in ln for ln in lines), "; ".join(lines) or f"exit {p.returncode}"


def benchmark_of(log: Path) -> str:
    """The log's submission_benchmark (which rules apply), read with the checker's own parser."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    from harness.config.run_config import UsageError
    lines, _ = parse_file(str(log), ruleset="3.0.0")
    for ll in lines:
        if ll.key == "submission_benchmark":
            return ll.value["value"]
    raise UsageError(f"{log}: no submission_benchmark line: not an MLLOG file written by this harness")


def ttt_logs(runs_root: Path) -> list[tuple[Path, str]]:
    """(mlperf.log, workload) of every finished time-to-train record."""
    from results.record import schema
    out = []
    for d, rec, _ in schema.scan_records(runs_root):
        if rec is not None and rec["config"].get("mode") == "ttt" and rec["status"]["status"] == schema.FINISHED:
            out.append((d / schema.MLPERF_LOG, rec["config"]["workload"]))
    return out


def main(paths: list[str], runs_root: Path) -> int:
    """`harness check-logs [LOG...]`: every given log, or every time-to-train log on record."""
    from harness.config.run_config import UsageError
    if paths:
        targets = []
        for p in map(Path, paths):
            if not p.is_file():
                raise UsageError(f"no such log file: {p}")
            targets.append((p, benchmark_of(p)))
    else:
        targets = ttt_logs(runs_root)
        if not targets:
            raise UsageError(f"no time-to-train records under {runs_root}; run `make ttt` first")
    failed = 0
    for log, workload in targets:
        ok, msg = check(log, workload)
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {workload:<9} {log}" + ("" if ok else f"\n     {msg}"))
    print(f"{len(targets) - failed}/{len(targets)} logs pass the MLPerf compliance checker")
    return 1 if failed else 0
