"""`python -m harness ...`: a thin entry point. Few flags; everything else is `--set KEY=VALUE`
on the one RunConfig (keys listed by `python -m harness list`).

Bad input gets one line naming the problem and the valid choices, and exit status 2.
"""
from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from harness.config.run_config import RunConfig, UsageError, settable_keys
from harness.config.errors import one_line
from harness.measure import allocator
from harness.parallel.dist import default_device
from results.record import toggles as toggle_decl
from results.record.comm import COLLECTIVES
from results.record.paths import results_root, results_root_problem


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage + error)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness", description="MLPerf-style benchmark harness")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    r = sub.add_parser("run", help="run one configuration and record it")
    r.add_argument("workload")
    r.add_argument("--size", default="tiny")
    r.add_argument("--mode", default="throughput", help="throughput | ttt")
    r.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field, e.g. toggles.compile=true (repeatable)")
    r.add_argument("--no-ingest", action="store_true", help="leave the record for `make ingest`")

    sub.add_parser("list", help="workloads, sizes, toggles and settable keys")
    i = sub.add_parser("info", help="sizes of a workload: input shape, parameters, FLOPs, target, data format")
    i.add_argument("workload")

    s = sub.add_parser("sweep", help="run an ablation sweep file")
    s.add_argument("file")
    s.add_argument("--repeats", type=int, default=0, help="override the file's repeats")
    s.add_argument("--rerun-failed", action="store_true",
                   help="resume the latest run of this sweep: only cells without a finished record")
    s.add_argument("--dry-run", action="store_true", help="print the cells' commands and their order; run nothing")
    sub.add_parser("demo", help="the CPU ablation demo (harness/sweeps/demo.yaml)")

    b = sub.add_parser("submit", help="run a sweep through a site's scheduler (Slurm: job arrays + a dependent ingest job)")
    b.add_argument("file")
    b.add_argument("--site", default="local", help="site file: a name in harness/sites/ or a path")
    b.add_argument("--dry-run", action="store_true",
                   help="print the rendered job scripts and the submit commands with their dependencies; submit nothing")
    b.add_argument("--rerun-failed", action="store_true", help="resubmit only cells without a finished record")
    b.add_argument("--wait", action="store_true", help="wait for the jobs (rate-limited polling), print the summary")
    b.add_argument("--repeats", type=int, default=0, help="override the file's repeats")
    t = sub.add_parser("ttt", help="N seeded time-to-train runs and their MLPerf olympic score")
    t.add_argument("workload")
    t.add_argument("--size", default="tiny")
    t.add_argument("--runs", type=int, default=5)
    t.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    w = sub.add_parser("weak", help="(under mpiexec/srun) concurrent instances to target: TTTa, models/min")
    w.add_argument("workload")
    w.add_argument("--size", default="tiny")
    w.add_argument("--instance-size", type=int, default=1, help="ranks per instance")
    w.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    k = sub.add_parser("check-logs", help="run the MLPerf compliance checker on time-to-train logs")
    k.add_argument("logs", nargs="*", help="mlperf.log files (default: every finished ttt record)")
    m = sub.add_parser("comm", help="(under mpiexec/srun/torchrun) collectives benchmark, nccl-tests semantics: "
                       "gloo, MPI and NCCL on the same ranks, recorded under results/comm/")
    m.add_argument("--collectives", default="all", help="comma list or all: " + ", ".join(COLLECTIVES))
    m.add_argument("--backends", default="all", help="comma list or all: gloo, mpi, nccl")
    m.add_argument("--dtypes", default="float32", help="comma list: float32, bfloat16, float16")
    m.add_argument("-b", "--minbytes", default="8", help="smallest size (8, 64K, 1M ...)")
    m.add_argument("-e", "--maxbytes", default="256M", help="largest size")
    m.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplier between steps")
    m.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size")
    m.add_argument("-w", "--warmup-iters", type=int, default=1, help="untimed iterations per size")
    m.add_argument("-c", "--check", type=int, default=1, help="1: verify every result by value (0: don't)")
    m.add_argument("--no-ingest", action="store_true", help="leave the records for `make ingest`")
    m.add_argument("--via", default="direct", help="direct | host: the host relay (device -> host, the collective "
                   "on host buffers with gloo or MPI, host -> device), the planner's host_relay link")
    f = sub.add_parser("profile", help="per-layer forward/backward time and memory on this device, for the planner")
    f.add_argument("workload")
    f.add_argument("--size", default="tiny")
    f.add_argument("--microbatches", default="1,2,4", help="microbatch sizes to time, comma list")
    f.add_argument("--repeats", type=int, default=5, help="timed passes per layer and size (median kept)")
    f.add_argument("--cpus", type=float, default=None, help="hold this process to Q CPUs (cgroup cpu quota)")
    f.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    f.add_argument("--cell-s", type=float, default=1.0,
                   help="under a launcher: seconds each measurement lasts at least, all ranks together")
    f.add_argument("--precision", type=float, default=0.02,
                   help="sample each measurement until its median's 95%% interval is within +-this (0: just --repeats)")
    f.add_argument("--budget-s", type=float, default=4.0,
                   help="... or until this many seconds a measurement (all timed in rounds together) have gone by")
    f.add_argument("--shards", default="tp2,cp2",
                   help="also time one tensor/context-parallel member's share of the block: tpN, cpN, comma list; none")
    n = sub.add_parser("plan", help="heterogeneous planner: split DP/PP work over unequal devices, simulated")
    n.add_argument("--devices", required=True, help="device inventory (YAML; see results/planner/inventory.py)")
    n.add_argument("--workload", default="lm")
    n.add_argument("--size", default="tiny", help="a workload size, or a what-if shape (llama2-70b)")
    n.add_argument("--global-batch", type=int, required=True)
    n.add_argument("--strategy", default="auto", help="auto | dp | pp | kinds (data parallel over each kind's own job)")
    n.add_argument("--schedule", default="1f1b", help="1f1b | gpipe (pipeline plans)")
    n.add_argument("--cell", default=None, help="write a sweep file that runs the plan here")
    r = sub.add_parser("roofline", help="this device's roofline ceilings: peak FLOP/s, memory bandwidth, ridge")
    r.add_argument("--device", default=None, help="cpu | cuda (default: cuda if present)")
    g = sub.add_parser("compare", help="HEAD against BASE (git shas, refs or sweep names): median step times with "
                                        "asv's regression rule; exit 1 on a regression")
    g.add_argument("base")
    g.add_argument("head")
    sub.add_parser("doctor", help="what makes this machine noisy for benchmarks now, and what to do (pyperf system show)")
    a = sub.add_parser("calibrate", help="A/A check: the baseline against itself in the interleaved engine, N trials; "
                                          "the verdict rule's false-positive rate on this machine")
    a.add_argument("--trials", type=int, default=20, help="trials, one process each (default 20)")
    a.add_argument("--file", default=str(Path(__file__).parent / "sweeps" / "calibrate.yaml"),
                   help="the calibration sweep (workload, sampling settings)")
    c = sub.add_parser("cell", help="(used by Slurm array tasks) run cell INDEX of a submitted sweep")
    c.add_argument("cells")
    c.add_argument("index", type=int)
    return p


def cmd_run(args) -> int:
    # default device from torch; an explicit --set device=... still wins
    cfg = RunConfig(workload=args.workload, size=args.size, mode=args.mode,
                    device=default_device()).with_overrides(args.sets)
    return _execute(cfg, ingest=not args.no_ingest)


def cmd_cell(args) -> int:
    """One array task: the cell's config, with its repeat's baseline record (written by the
    phase-1 array; for a top-up repeat the sweep's latest) as the correctness-gate reference.
    Ingests only when a tracking server is configured; otherwise the sweep's dependent ingest
    job does it."""
    import os

    from harness.experiments import sweep
    from harness.launch.backend import read_cells
    cells = read_cells(Path(args.cells))
    if not 0 <= args.index < len(cells):
        raise UsageError(f"cannot read cell {args.index} of {args.cells}: it holds {len(cells)} cells")
    entry = cells[args.index]
    cfg = RunConfig.from_dict(entry.config)
    if not entry.is_baseline:
        base = sweep.baseline_record(results_root() / "runs", cfg.sweep, entry.baseline_variant, cfg.repeat)
        if base:
            cfg = cfg.with_overrides([f"reference_run={base}"])
    return _execute(cfg, ingest=bool(os.environ.get("MLFLOW_TRACKING_URI")))


def _execute(cfg: RunConfig, ingest: bool) -> int:
    from harness.run import runner
    out = runner.execute(cfg)
    if out.dir is None:  # not rank 0
        return 0
    if out.status == "finished":  # what it measured, before where it is
        from results.analysis.run_report import describe
        from results.record import schema
        try:
            lines = describe(schema.read_record(out.dir, with_metrics=True))
        except schema.RecordError:
            lines = []
        for line in lines:
            print(line, file=sys.stderr if line.startswith("warning:") else sys.stdout)
    print(f"{out.status}: {out.run_id} ({out.dir})" + (f": {out.reason}" if out.reason else ""))
    if ingest:
        problem = runner.ingest_quietly(out.dir, results_root())
        if problem:
            print(f"warning: MLflow store not updated ({problem}); the record is kept, run `make ingest`",
                  file=sys.stderr)
    if out.status in ("unsupported", "failed") and out.reason:
        print(f"harness: {out.status}: {out.reason}", file=sys.stderr)
    if out.status == "finished":
        return 0
    if out.status == "killed":  # 128 + the signal, as a shell reports it: 130 for Ctrl-C, 143 for SIGTERM
        return 130 if "SIGINT" in (out.reason or "") else 143
    return 2 if out.status == "unsupported" or out.bad_input else 1


def cmd_profile(args) -> int:
    from harness.planning import profile as layer_profile
    from harness.config import registry
    if args.workload not in registry.names():
        raise UsageError(f"unknown workload {args.workload!r}; valid: {', '.join(registry.names())}")
    try:
        mbs = [int(x) for x in args.microbatches.split(",")]
    except ValueError:
        raise UsageError(f"--microbatches must be a comma list of sizes, e.g. 1,2,4; got {args.microbatches!r}") from None
    if args.repeats < 1 or args.threads < 0 or (args.cpus is not None and not 0.01 <= args.cpus <= 1024):
        raise UsageError("--repeats must be >= 1, --threads >= 0 and --cpus between 0.01 and the cores")
    if not (0 <= args.precision < 1 and 0 < args.budget_s <= 3600):
        raise UsageError(f"--precision must be in [0, 1) (0.02 = +-2%; 0: just --repeats) and --budget-s in (0, 3600]; "
                         f"got {args.precision} and {args.budget_s}")
    from harness.planning import shards
    names = tuple(shards.parse(args.shards))
    import torch
    d = layer_profile.run(args.workload, args.size, mbs, args.repeats, args.cpus,
                          args.threads or torch.get_num_threads(), results_root(), args.cell_s, args.precision,
                          args.budget_s, names)
    from results.record import schema
    s = schema.read_record(d)["summary"]  # the one validating reader
    for kind, rows in s["layers"].items():
        print(f"{kind:<10} " + "  ".join(f"mb{r['microbatch']}: fwd {1e3 * r['fwd_s']:.2f} bwd {1e3 * r['bwd_s']:.2f} ms"
                                         for r in rows))
    for line in shards.efficiency_lines(s):
        print(line)
    rows = [r for rs in s["layers"].values() for r in rs]
    if args.precision > 0:
        short = [r for r in rows if r.get("ended_by") != "precision"]
        widest = max((r["half_width"] for r in rows if r.get("half_width") is not None), default=None)
        why = ", ".join(f"{sum(r.get('ended_by') == e for r in short)} by {e}"
                        for e in sorted({r.get("ended_by") for r in short}, key=str))
        print(f"sampled to +-{100 * args.precision:g}%: {len(rows) - len(short)} of {len(rows)} measurements; "
              f"{len(short)} ended otherwise{' (' + why + ')' if short else ''} "
              f"({args.budget_s:g} s a figure, all figures timed in rounds)"
              + (f" (widest interval +-{100 * widest:.1f}%)" if widest is not None else ""))
    timed = s.get("timed") or {}
    if timed.get("wall_per_cpu"):  # held to a quota (harness/measure/cells.py: why)
        print(f"held to {s['constraint'].get('cpus')} CPUs: every figure is CPU seconds x this rank's "
              f"{timed['wall_per_cpu']:.3f} wall seconds per CPU second "
              "(a quota's periods quantize a pass's wall time)")
    print(f"profile: {d}")
    return 0


def _cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def cmd_list() -> int:
    from harness.config import registry
    print("workloads:")
    for name in registry.names():
        wl = registry.get(name)
        print(f"  {name:<10} sizes: {', '.join(wl.sizes)}   quality: {wl.quality_metric}")
    print("toggles:")
    for t in toggle_decl.TOGGLES:
        values = "true|false" if t.type == "bool" else "|".join(t.choices)
        print(f"  {t.name:<14} {values:<16} applied in {t.owner}: {t.doc}")
    print(f"settable keys (--set KEY=VALUE): {', '.join(settable_keys())}")
    return 0


def cmd_info(name: str) -> int:
    import torch

    from harness.config import registry
    wl = registry.get(name)
    doc = (sys.modules[type(wl).__module__].__doc__ or "").strip().splitlines()[0]
    print(f"{name}: {doc}")
    print(f"quality: {wl.quality_metric} ({'higher' if wl.higher_is_better else 'lower'} is better)")
    for size in wl.sizes.values():
        with torch.device("meta"):  # count parameters without allocating them
            params = sum(p.numel() for p in wl.build_model(size).parameters())
        print(f"  {size.name:<6} input {tuple(wl.input_shape(size))}  params {params:,}  "
              f"train GFLOP/sample {wl.flops_per_sample(size) / 1e9:,.3f}  batch {size.batch_size}  "
              f"target {wl.target_text(size)}")
    print(f"data format: {wl.data_format}")
    return 0


DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM)


def commands(parser: argparse.ArgumentParser) -> str:
    """The subcommands, one line each, as `python -m harness` with no arguments prints them."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    width = max(map(len, sub.choices))
    lines = [f"  {c.dest:<{width}}  {c.help or ''}" for c in sub._choices_actions]
    return "usage: python -m harness COMMAND ...\ncommands:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        print(commands(parser), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        allocator.hold()  # before anything is built or timed (harness/measure/allocator.py: why)
        problem = results_root_problem()
        if problem and args.cmd not in ("list", "info", "doctor"):
            raise UsageError(problem)
        if args.cmd == "run":
            return cmd_run(args)
        if args.cmd == "list":
            return cmd_list()
        if args.cmd == "info":
            return cmd_info(args.workload)
        if args.cmd in ("ttt", "weak"):
            from harness.experiments import campaign
            from harness.config import registry
            wl = registry.get(args.workload)
            if args.size not in wl.sizes:
                raise UsageError(f"unknown size {args.size!r} for {args.workload}; valid sizes: {', '.join(wl.sizes)}")
            if args.cmd == "ttt":
                return campaign.ttt(args.workload, args.size, args.runs, args.sets, default_device())
            return campaign.weak(args.workload, args.size, args.instance_size, args.sets, default_device())
        if args.cmd == "check-logs":
            from harness.experiments import compliance
            return compliance.main(args.logs, results_root() / "runs")
        if args.cmd == "cell":
            return cmd_cell(args)
        if args.cmd == "compare":
            from harness.experiments import compare as compare_cmd
            return compare_cmd.main(args.base, args.head, results_root())
        if args.cmd == "profile":
            return cmd_profile(args)
        if args.cmd == "doctor":
            from harness.measure import doctor
            return doctor.main()
        if args.cmd == "roofline":
            from harness.measure import roofline
            device = args.device or default_device()
            if device not in roofline.DTYPES or (device == "cuda" and not _cuda()):
                raise UsageError(f"unknown or absent device {device!r}; valid here: cpu"
                                 + (", cuda" if _cuda() else ""))
            return roofline.main(device)
        if args.cmd == "plan":
            from harness.planning import plan as plan_cmd
            return plan_cmd.main(args.devices, args.workload, args.size, args.global_batch, args.strategy,
                                 args.schedule, args.cell, results_root())
        if args.cmd == "comm":
            from harness.comm import bench as comm_bench
            from harness.comm import run as comm_run
            opts = comm_bench.options(args.collectives, args.backends, args.dtypes, args.minbytes, args.maxbytes,
                                      args.stepfactor, args.iters, args.warmup_iters, args.check, args.via)
            return comm_run.main(opts, ingest=not args.no_ingest)
        from harness.experiments import sweep
        if args.cmd == "submit":
            from harness.launch import site
            return sweep.main(Path(args.file), repeats=args.repeats, rerun_failed=args.rerun_failed,
                              site=site.load(args.site), dry_run=args.dry_run, wait=args.wait)
        if args.cmd == "calibrate":
            return sweep.calibrate(Path(args.file), args.trials)
        if args.cmd == "demo":
            return sweep.main(Path(__file__).parent / "sweeps" / "demo.yaml", repeats=0)
        return sweep.main(Path(args.file), repeats=args.repeats, rerun_failed=args.rerun_failed,
                          dry_run=args.dry_run)
    except UsageError as e:
        from harness.parallel.dist import from_env
        if from_env().is_main:  # every rank finds the same problem; one line says it
            print(f"harness: error: {one_line(e)}", file=sys.stderr)
        return 2
    except OSError as e:
        if e.errno not in DISK_ERRNOS:
            raise
        # a full, read-only or foreign results disk: what was already written stays as it is
        print(f"harness: error: cannot write {e.filename or 'the results'}: {e.strerror}", file=sys.stderr)
        return 2
