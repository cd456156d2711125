"""The training loop: warm-up, timed steady-state steps, evaluation, time-to-train.

Per step it records wall time from asking for the batch to the end of the optimizer step
(device-synced), the part of it spent waiting for data, and the loss. Warm-up steps (which
pay torch.compile and CUDA-graph capture) are recorded with phase=warmup and never enter
the steady-state statistics.

Modes:
  throughput  warmup_steps + steps, then one evaluation of the quality metric.
  ttt         train until the quality target is reached (evaluated every eval_every steps,
              default once per epoch), or until the step cap / max_seconds: MLPerf's clock
              runs from run_start to run_stop.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import staging
from harness.run import data
from harness.parallel import expert as expert_parallel
from harness.parallel import dist as dist_mod
from harness.parallel import jobs
from harness.config.run_config import RunConfig
from harness.parallel.dist import DistInfo
from harness.run.mlperf_log import K
from harness.run.build import TrainStep, build
from harness.parallel.strategies import data_shard
from harness.measure.timing import now, sync


ACCOUNT_STEPS = 3  # parallel accounting: one plain step (peak RSS), two measured (collectives, tensor memory)


class Diverged(RuntimeError):
    """Loss became NaN/inf: the run fails with the step named."""


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2 ** 32)


@torch.no_grad()
def evaluate(ts: TrainStep, cfg: RunConfig, workload, size, root: Path, local_batch: int,
             dist: DistInfo) -> float:
    n_val = workload.n_samples(root, "val", size)
    dp_rank, dp_world = data_shard(cfg, dist)  # tensor-parallel ranks of one replica read the same samples
    batches = data.epoch_batches(n_val, local_batch, seed=0, epoch=0, rank=dp_rank, world=dp_world,
                                 shuffle=False, drop_last=False)
    if cfg.eval_batches:  # a throughput run's spot check: each rank's first eval_batches batches
        batches = batches[:cfg.eval_batches]
    loader = data.make_loader(cfg, workload, size, root, "val", batches, dist.local_rank)
    model = ts.eval_model
    dist_mod.average_bn_stats(dist, model)
    model.eval()
    # a pipeline: the batch through its stages in turn, the logits on the last stage's rank only
    forward = ts.pipeline.forward_eval if ts.pipeline is not None else model
    sums: dict[str, float] = {}
    last = None
    for x, y in loader:
        x, y = last = ts.prepare(x, y)
        with ts.autocast():
            out = forward(x)
        if out is not None:
            for k, v in workload.quality_sums(out, y).items():
                sums[k] = sums.get(k, 0.0) + v
    if ts.lockstep_eval:  # sharded parameters: a rank with one batch fewer joins the others'
        for _ in range(_max_eval_batches(n_val, local_batch, dp_world, cfg.eval_batches) - len(batches)):
            with ts.autocast():
                forward(last[0])  # its all-gathers only; the output is not counted
    return workload.quality(dist_mod.sum_across_ranks(dist, sums))


def _max_eval_batches(n: int, batch: int, world: int, cap: int = 0) -> int:
    """Eval batches of the rank with the most samples (rank 0: ceil(n / world) of them), at most
    `cap` (0 = no cap)."""
    most = -(-(-(-n // world)) // batch)
    return min(most, cap) if cap else most


def eval_samples(n: int, batch: int, world: int, cap: int = 0) -> int:
    """Validation samples an evaluation covers: all n, or each rank's first `cap` batches of the
    share `evaluate` reads (data.epoch_batches without drop_last: the one sharding rule)."""
    if not cap:
        return n
    return sum(len(b) for r in range(world)
               for b in data.epoch_batches(n, batch, seed=0, epoch=0, rank=r, world=world, shuffle=False,
                                           drop_last=False)[:cap])


def _reached(q: float, target: float, higher_is_better: bool) -> bool:
    return q >= target if higher_is_better else q <= target


@dataclass
class _Run:
    """What the timed phase needs, set up inside init (off the clock)."""
    cfg: RunConfig
    workload: object
    size: object
    root: Path            # the dataset the loaders read (staged or not)
    ts: TrainStep
    local_batch: int
    steps_per_epoch: int
    dist: DistInfo
    eval_batch: int       # equal on every rank (uneven data parallel trains unequal local batches)


def train(cfg: RunConfig, workload, rec, dist: DistInfo, engine=None) -> None:
    """Run one configuration, filling `rec` (steps, evals, info, MLLOG). `engine` (the interleaved
    A/B engine, harness/run/interleave.py) builds its other side in the init phase and replaces
    the timed steps; None = the plain loop."""
    ml = rec.mllog
    ml.event(K.CACHE_CLEAR, False)  # page cache is not dropped (needs privileges); said so honestly
    ml.start(K.INIT_START)
    run, loader = _init(cfg, workload, rec, dist)
    if engine is not None:
        engine.prepare(run, loader, rec)
    ml.end(K.INIT_STOP)
    run_start, run_start_pc = time.time(), now()
    ml.start(K.RUN_START)
    rec.info["run_start_ms"] = int(run_start * 1000)
    status, converged, epoch = "aborted", False, 0
    try:
        converged, epoch = (engine.steps if engine else _steps)(run, loader, rec, run_start, run_start_pc)
        status = "success" if converged or cfg.mode == "throughput" else "aborted"  # throughput runs are not judged on convergence
    finally:
        loader.close()
        if engine is not None:
            engine.close()
        run_stop = time.time()
        ml.end(K.RUN_STOP, status=status)
        rec.info.update(run_stop_ms=int(run_stop * 1000), train_time_s=run_stop - run_start,
                        converged=converged, epochs=epoch)
        if cfg.mode == "ttt":  # what the olympic score needs, read back without the workload (results/)
            rec.info["mlperf_required_runs"] = workload.mlperf_required_runs
    _after_the_clock(cfg, workload, run.size, run.root, run.ts, run.local_batch, dist, rec)


def _init(cfg: RunConfig, workload, rec, dist: DistInfo) -> tuple[_Run, object]:
    """MLPerf's init phase: threads, submission keys, staging, model, optimizer, built step,
    hyperparameters, train loader."""
    ml = rec.mllog
    size = workload.sizes[cfg.size]
    if cfg.device == "cuda":
        torch.cuda.set_device(dist.local_rank)
    threads = cfg.threads or dist_mod.cpu_threads()  # explicit, else split the node's cores among its ranks
    if threads:
        torch.set_num_threads(threads)
    rec.info["torch_threads"] = torch.get_num_threads()
    global_batch = cfg.batch_size or size.batch_size
    dp_rank, dp_world = data_shard(cfg, dist)
    shares = _shares(cfg, dp_world)
    if shares is None and global_batch % dp_world:
        raise ValueError(f"batch_size {global_batch} is not divisible by {dp_world} data-parallel ranks")
    local_batch = shares[dp_rank] if shares else global_batch // dp_world
    nodes = dist_mod.node_count(dist)
    for key, value in (("submission_benchmark", workload.mlperf_benchmark),
                       ("submission_org", "mlperf-harness"), ("submission_division", "open"),
                       ("submission_status", "research"), ("submission_platform", cfg.device),
                       ("number_of_nodes", nodes),
                       ("accelerators_per_node", dist.world // nodes if cfg.device == "cuda" else 0),
                       ("seed", cfg.seed)):
        ml.event(key, value)
    _seed_everything(cfg.seed)
    root = staging.prepare(cfg, dist, data.dataset_root(cfg), ml, rec.info)  # v3.0 rules: staging inside init
    n_train = workload.n_samples(root, "train", size)
    n_val = workload.n_samples(root, "val", size)
    target = workload.quality_target(size, root)
    plan, steps_per_epoch = data.train_plan(n_train, local_batch, cfg.seed, cfg.warmup_steps + cfg.steps,
                                            dp_rank, dp_world, shares)
    model = workload.build_model(size)
    ts = build(cfg, workload, model, lambda m: workload.build_optimizer(m, size, global_batch, steps_per_epoch),
               world=dist.world, data_root=root)
    for key, value in workload.mlperf_hyperparameters(size, global_batch).items():
        ml.event(key, value)
    ml.event("quality_target", target)  # not an MLLOG constant: the LM rules need it, HPC rules ignore it
    ml.event(K.TRAIN_SAMPLES, n_train)
    n_eval = eval_samples(n_val, local_batch, dp_world, cfg.eval_batches)
    ml.event(K.EVAL_SAMPLES, n_eval)  # what the logged quality is over (all of n_val unless eval_batches caps it)
    if shares:
        rec.info["batch_shares"] = shares
    rec.info.update(device=cfg.device, global_batch=global_batch, local_batch=local_batch, world=dist.world, nodes=nodes,
                    launcher=dist.launcher,
                    steps_per_epoch=steps_per_epoch, n_train=n_train, n_val=n_val, eval_samples=n_eval,
                    flops_per_sample=workload.flops_per_sample(size),
                    quality_metric=workload.quality_metric, quality_target=target,
                    higher_is_better=workload.higher_is_better)
    loader = data.make_loader(cfg, workload, size, root, "train", plan, dist.local_rank)
    return _Run(cfg, workload, size, root, ts, local_batch, steps_per_epoch, dist,
                global_batch // dp_world), loader


def step_of(cfg: RunConfig, rank_step: list[float]) -> float:
    """A step's time from every rank's: the slowest rank's, or with parallel.jobs the jobs'
    throughput-equivalent step (harness/parallel/jobs.py)."""
    p = cfg.parallel
    return jobs.step_s(rank_step, p.jobs, p.shares() if p.batch_split else None)


def _shares(cfg: RunConfig, dp_world: int) -> list[int] | None:
    """Samples per data-parallel rank when parallel.batch_split makes them unequal, else None."""
    return cfg.parallel.shares() if cfg.parallel.batch_split and dp_world > 1 else None


def _steps(run: _Run, loader, rec, run_start: float, run_start_pc: float) -> tuple[bool, int]:
    """Warm-up and timed steps, epochs and evaluations; (converged, epochs)."""
    cfg, dist, ml, ts = run.cfg, run.dist, rec.mllog, run.ts
    device = torch.device(cfg.device)
    total = cfg.warmup_steps + cfg.steps
    eval_every = cfg.eval_every or run.steps_per_epoch
    converged, epoch, epoch_open = False, 0, False
    for i in range(total):
        if not epoch_open:
            epoch += 1
            ml.start(K.EPOCH_START, epoch_num=epoch)
            epoch_open = True
        expert_parallel.reset(run.workload, ts.eval_model)  # MoE statistics: this step's only
        t0 = now()
        x, y = next(loader)
        t1 = now()
        loss = ts(*ts.prepare(x, y))
        sync(device)  # device sync point: the step is finished before the clock is read
        t2 = now()
        # global-batch loss and every rank's times: one small all_gather, outside the timing
        loss_v, rank_step, rank_data = dist_mod.step_stats(dist, float(loss), t2 - t0, t1 - t0, ts.holds_loss)
        row = dict(step=i, phase="warmup" if i < cfg.warmup_steps else "steady", t=t2 - run_start_pc, loss=loss_v,
                   step_s=step_of(cfg, rank_step), data_s=max(rank_data))  # the slowest rank sets the pace
        if dist.world > 1:
            row.update(rank_step_s=rank_step, rank_data_s=rank_data)
        if cfg.parallel.jobs > 1:
            row.update(job_step_s=jobs.job_steps(rank_step, cfg.parallel.jobs))
        row.update(expert_parallel.step_figures(run.workload, ts.eval_model, dist))  # {} unless MoE
        rec.log_step(**row)
        if not math.isfinite(loss_v):
            raise Diverged(f"loss is {loss_v} at step {i}")
        done = i + 1
        if done % run.steps_per_epoch == 0:
            ml.end(K.EPOCH_STOP, epoch_num=epoch)
            epoch_open = False
        if cfg.mode == "ttt" and (done % eval_every == 0 or done == total):
            converged = _eval(run, rec, epoch, done)
            if converged or (cfg.max_seconds and time.time() - run_start > cfg.max_seconds):
                break
    if epoch_open:
        ml.end(K.EPOCH_STOP, epoch_num=epoch)
    if cfg.mode == "throughput":
        converged = _eval(run, rec, epoch, total)
    return converged, epoch


def _after_the_clock(cfg, workload, size, root, ts, local_batch, dist, rec) -> None:
    """Measurements that must not touch the timed steps or the MLPerf clock: the bottleneck
    breakdown (a short profiled phase) with every op on the roofline, the multi-rank
    accounting, and the device's peak FLOP/s for MFU."""
    from harness.parallel import accounting as comm_accounting
    from harness.measure import peak
    if ts.pipeline is not None:  # the schedule as it ran in the steady steps, and its bubble
        from harness.parallel import pipeline
        from results.analysis import bubble as pipe_results
        rec.info["pipeline"] = pipeline.report(ts, dist, first_steady=cfg.warmup_steps)
        rec.info.update(pipe_results.summary_figures(rec.info["pipeline"]))
    dp_rank, dp_world = data_shard(cfg, dist)
    shares = _shares(cfg, dp_world)
    if cfg.profile_steps:  # first: a dispatch mode (the accounting's, the op counter's) un-compiles a compiled model
        _profile(cfg, workload, size, root, ts, local_batch, dist, rec, dp_rank, dp_world, shares,
                 _profiled_steps(cfg, rec, dist))
    if dist.world > 1 or cfg.parallel.recompute != "none" or cfg.account:
        # what the strategy cost: collectives, bytes, memory (on one rank: memory only)
        plan, _ = data.train_plan(workload.n_samples(root, "train", size), local_batch, cfg.seed + 2,
                                  ACCOUNT_STEPS, dp_rank, dp_world, shares)
        loader = data.make_loader(cfg, workload, size, root, "train", plan, dist.local_rank)
        try:
            acc = comm_accounting.account(ts, [next(loader) for _ in plan], dist.world)
            rec.info["parallel"] = acc
            rec.info.update(comm_accounting.summary_figures(acc))  # flat comm_*/mem_* keys for MLflow
        finally:
            loader.close()
    rec.info.update(peak.for_run(cfg.device, ts.dtype))


# s: how long the profiled phase may take, where steps are slow. bf16 emulated on a CPU without
# bf16 instructions ran tiny CosmoFlow at 1.7 s a step (2026-12-03): five profiled steps and the
# counted one took longer than its whole interleaved sampling budget.
PROFILE_S = 3.0


def _profiled_steps(cfg: RunConfig, rec, dist) -> int:
    """cfg.profile_steps, fewer (at least 2) where PROFILE_S holds fewer of the run's median steady
    steps. One rank only: every rank must profile the same steps, and rank 0 alone holds the times."""
    steady = [r["step_s"] for r in rec.steps if r.get("phase") == "steady"]
    if dist.world > 1 or not steady:
        return cfg.profile_steps
    fit = math.ceil(PROFILE_S / max(float(np.median(steady)), 1e-9))
    return min(cfg.profile_steps, max(2, fit))


def _profile(cfg, workload, size, root, ts, local_batch, dist, rec, dp_rank, dp_world, shares, steps: int) -> None:
    """The bottleneck breakdown (`steps` profiled steps), then one counted step: every op on the roofline."""
    from harness.measure import breakdown
    from harness.measure import op_counts
    from harness.measure import op_roofline
    from harness.measure import roofline
    plan, _ = data.train_plan(workload.n_samples(root, "train", size), local_batch, cfg.seed + 1,
                              steps + 1, dp_rank, dp_world, shares)
    loader = data.make_loader(cfg, workload, size, root, "train", plan, dist.local_rank)
    try:
        rec.info["breakdown"], chains = breakdown.profile_steps(lambda b: ts(*ts.prepare(*b)), loader,
                                                                steps, cfg.device)
        batch = next(loader)
        counts = op_counts.count(lambda: ts(*ts.prepare(*batch)))  # after the profile: see op_counts
    finally:
        loader.close()
    if not any(c["flops"] for c in counts.values()):  # e.g. a CUDA graph replays what no mode sees
        rec.info["roofline"] = {"unavailable": "the counted step dispatched no op with FLOPs (graph replay?)"}
        return
    # this rank's share of the model's FLOPs: its samples of the data-parallel batch, split over
    # the tensor/pipeline ranks of its replica
    rank_samples = len(plan[0]) * dp_world / dist.world
    rec.info["roofline"] = op_roofline.report(counts, chains, steps,
                                              roofline.ceilings(cfg.device, ts.dtype),
                                              workload.flops_per_sample(size) * rank_samples,
                                              rec.info["breakdown"]["shares"])


def _eval(run: _Run, rec, epoch_num: int, step: int) -> bool:
    ml, wl = rec.mllog, run.workload
    t0 = time.time()
    ml.start(K.EVAL_START, epoch_num=epoch_num)
    q = evaluate(run.ts, run.cfg, wl, run.size, run.root, run.eval_batch, run.dist)
    ml.end(K.EVAL_STOP, epoch_num=epoch_num)
    ml.event(wl.mlperf_quality_key, q, epoch_num=epoch_num)
    rec.log_eval(step=step, epoch=epoch_num, quality=q, eval_s=time.time() - t0)
    return _reached(q, rec.info["quality_target"], wl.higher_is_better)
