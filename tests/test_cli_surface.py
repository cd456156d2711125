"""The CLI surface is frozen (torchtitan's test_no_new_cli_options): every subcommand and flag
is listed here. A new feature is a config field set with --set, not a new flag; if a flag is
truly needed, add it here on purpose."""
from __future__ import annotations

import argparse

from harness.cli import build_parser

FROZEN = {
    "run": ["--mode", "--no-ingest", "--set", "--size", "workload"],
    "list": [],
    "info": ["workload"],
    "sweep": ["--dry-run", "--repeats", "--rerun-failed", "file"],
    "demo": [],
    "submit": ["--dry-run", "--repeats", "--rerun-failed", "--site", "--wait", "file"],
    "ttt": ["--runs", "--set", "--size", "workload"],
    "weak": ["--instance-size", "--set", "--size", "workload"],
    "check-logs": ["logs"],
    "cell": ["cells", "index"],
    "calibrate": ["--file", "--trials"],
    # the collectives benchmark is not a RunConfig run: its flags are nccl-tests' own (-b -e -f -n -w -c)
    # (--via host: the host relay between vendors, which the planner issue names `harness comm --via host`)
    "comm": ["--backends", "--check", "--collectives", "--dtypes", "--iters", "--maxbytes", "--minbytes", "--no-ingest",
             "--stepfactor", "--via", "--warmup-iters"],
    # the planner's two commands are not RunConfig runs either: a profile of this device, and a plan
    # from an inventory file (the issue names these flags)
    "profile": ["--budget-s", "--cell-s", "--cpus", "--microbatches", "--precision", "--repeats", "--shards", "--size",
                "--threads", "workload"],
    # the roofline's ceilings of one device (the issue names the command)
    "roofline": ["--device"],
    "plan": ["--cell", "--devices", "--global-batch", "--schedule", "--size", "--strategy", "--workload"],
    # the regression gate over recorded runs (the portal issue names `harness compare BASE HEAD`)
    "compare": ["base", "head"],
    # what makes this machine noisy now (issue 15 names `python -m harness doctor`, as pyperf system show)
    "doctor": [],
}


def _surface(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, p in sub.choices.items():
        flags = []
        for a in p._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            flags.append(max(a.option_strings, key=len) if a.option_strings else a.dest)
        out[name] = sorted(flags)
    return out


def test_cli_surface_is_frozen():
    assert _surface(build_parser()) == FROZEN
