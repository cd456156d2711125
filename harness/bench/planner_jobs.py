"""What the planner checks (harness/bench/planner.py, planner_seed.py) launch: the ranks'
profiles, LM small runs held to CPU quotas, `harness plan` on an inventory, a plan re-priced with
other profiles, and the dataset with a short validation split. One place for the command lines
both checks run."""
from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from harness.bench.launch import run_harness, run_interleaved, run_recorded
from harness.comm.bench import load_now
from harness.config import registry
from harness.parallel import cpu_quota as rank_cpu

SIZE = "small"
# a step at 0.25 CPU is 3-8 s: 5 timed steps a run. Two warm-up steps, not one: the second step of
# a 4-rank mixed data-parallel job (0.5, 0.5, 0.25, 0.25 CPU, LM small [8, 8, 4, 4]) took 4.22, 4.80
# and 3.16 s in three runs whose later steps took 2.80-3.26 s (2026-12-05, Xeon), and a median of
# five with that step in it read 1.6% high; the 2-rank jobs' second steps were within their spread.
# Why: DDP rebuilds its gradient buckets once, before the second forward (Reducer._rebuild_buckets,
# torch/nn/parallel/distributed.py), new buffers first touched at 0.25 CPU: outside the harness
# that step's forward took 1.37-1.55 s and its backward 2.30-2.58 s, against 0.67-0.83 and 1.65-1.96
STEPS, WARMUP = 5, 2


def run_args(data_dir: Path, batch: int, sets: list[str]) -> list[str]:
    """`harness run lm` on the short-validation dataset, one thread a rank, no profiler, no ingest."""
    args = ["run", "lm", "--size", SIZE, "--no-ingest", "--set", f"steps={STEPS}", "--set", f"warmup_steps={WARMUP}",
            "--set", "profile_steps=0", "--set", f"batch_size={batch}", "--set", f"data_dir={data_dir}",
            "--set", "threads=1"]
    for s in sets:
        args += ["--set", s]
    return args


def run_lm(env: dict, results: Path, data_dir: Path, cpus: list[float], batch: int, sets: list[str]) -> dict:
    """One run on len(cpus) ranks, rank r held to cpus[r]: its median step (the slowest rank's),
    the quotas it recorded and the 1-minute load before and after."""
    load0 = load_now()
    s = run_recorded({**env, rank_cpu.ENV: ",".join(map(str, cpus))}, results, len(cpus),
                     *run_args(data_dir, batch, sets))["summary"]
    return {"median_step_s": s["median_step_s"], "rank_cpu": s.get("rank_cpu", {}).get("cpus_per_rank"),
            "load_1m": [load0.get("loadavg_1m"), load_now().get("loadavg_1m")],
            "stage_times": (s.get("pipeline") or {}).get("stage_times")}


def stage_compute_over_priced(plan: dict, stage_times: dict | None) -> float | None:
    """A pipeline run's own stage compute against the plan's price for it: the median over stages
    of (forward + backward seconds per microbatch, each the run's median, harness/parallel/pipeline.py
    through results/analysis/bubble.py) / (the plan's priced forward + backward for that stage).
    None for a plan without stages or a run without a schedule.

    Why: a pipeline's step can miss its price because its stages computed slower than profiled
    (the machine's state: at 0.25 CPU, 2026-12-04, LM small 2 x 3 blocks M=12 ran 8.4-8.9 s a step
    in three processes with stage compute 1.24-1.30x the profile's, and 6.6 s in a fourth at
    0.98-1.02x) or because of what the model leaves out (sends, the schedule's own work: 0.06-0.09 s
    of those steps). This ratio tells the two apart in every planner check."""
    stages = plan.get("stages") or []
    if not stages or not stage_times or len(stage_times) != len(stages):
        return None
    ratios = [(t["fwd_s"] + t["bwd_s"]) / (st["fwd_s"] + st["bwd_s"])
              for st, t in zip(stages, (stage_times[k] for k in sorted(stage_times, key=int)))
              if st["fwd_s"] + st["bwd_s"] > 0]
    return round(statistics.median(ratios), 4) if ratios else None


def interleaved_lm(env: dict, results: Path, data_dir: Path, cpus: list[float], batch: int, processes: int,
                   sets: list[str]) -> dict:
    """The same, its configuration against its `against=` side in alternating blocks (launch.run_interleaved)."""
    return run_interleaved({**env, rank_cpu.ENV: ",".join(map(str, cpus))}, results, len(cpus), processes,
                           *run_args(data_dir, batch, sets))


def plan(env: dict, inv: Path, batch: int, strategy: str) -> dict:
    """`harness plan` on an inventory; the plan it wrote (the path it prints, not the newest file:
    with `auto` the file is named for the strategy chosen)."""
    out = run_harness(env, 1, "plan", "--devices", str(inv), "--workload", "lm", "--size", SIZE,
                      "--global-batch", str(batch), "--strategy", strategy)
    return json.loads(Path(out.split("plan: ")[-1].split()[0]).read_text())


def predict(plan: dict, inv_path: Path, links_root: Path, side: str = "planned") -> float:
    """The plan's step (or its uniform split's) priced with the inventory's profiles: the same split."""
    from harness.planning.plan import costs_for
    from results.planner import evaluate, inventory
    from results.planner.links import LinkModel
    inv = inventory.load(inv_path)
    return evaluate.step_s(plan, inv, costs_for(inv, "lm", SIZE), LinkModel(inv.links, links_root), side)


def dataset(tmp: Path) -> Path:
    """LM small's dataset with a short validation split: its end-of-run evaluation at 0.25 CPU
    would otherwise take minutes, and quality is not what the checks measure."""
    wl = registry.get("lm")
    root = tmp / "lm-small-shortval"
    wl.write_dataset(root, dataclasses.replace(wl.sizes[SIZE], val_tokens=1 << 12), 0)
    return root


# the planner checks' profile: every microbatch a plan may choose, one thread a rank as the runs
# use, each figure sampled to the profile's precision target (harness profile --precision); no
# tensor/context-parallel shards (the checks run data parallel and pipelines: a third more time).
# Up to 32: data parallel at batch 96 gives a 0.5-CPU rank ~33 samples, which a 1-12 profile priced by
# extrapolation, and a block ran 8% slower a sample at 32 than at 4-16 (one thread, Xeon, 2026-12-06);
# measured, the planner can choose gradient accumulation at the size that runs best (12 until then)
PROFILE_ARGS = ("--microbatches", "1,2,4,8,16,32", "--repeats", "3", "--threads", "1", "--cell-s", "1.0",
                "--shards", "none")


def profile_ranks(env: dict, out: Path, ranks: int, workload: str, size: str, args: tuple = PROFILE_ARGS) -> list[Path]:
    """`harness profile` on `ranks` ranks at once, each held as env's quota says (so ranks that
    share the machine are profiled sharing it, as the job will run), into out/profiles, a folder
    of this call's own: each rank's record folder, in rank order."""
    if (out / "profiles").exists():
        raise RuntimeError(f"profile_ranks needs a folder of its own; {out / 'profiles'} exists")
    run_harness({**env, "HARNESS_RESULTS": str(out)}, ranks, "profile", workload, "--size", size, *args)
    rank = (lambda r: f"-r{r}-") if ranks > 1 else (lambda r: "-")  # one rank's name has no -r0
    got = [sorted((out / "profiles").glob(f"profile-{workload}-{size}-cpus*{rank(r)}*")) for r in range(ranks)]
    if any(len(g) != 1 for g in got):
        raise RuntimeError(f"harness profile on {ranks} ranks left {[len(g) for g in got]} records per rank in {out}")
    return [g[0] for g in got]
