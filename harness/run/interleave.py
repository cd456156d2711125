"""The interleaved A/B engine: a configuration and its toggles-off baseline in one process,
measured in alternating blocks of steps until the speedup is known to a precision target.

Why: on a shared or virtual machine the speed drifts between processes and over minutes (this
VM's process medians moved +-15% with nothing else running), and a ratio of two processes'
medians carries that drift. Here both sides live in the same process, each with its own model,
optimizer, data stream and random-number stream, and run in blocks A B | B A | A B ... of at
least `block_s` seconds each; every pair of blocks gives one ratio measured on the same machine
state (results/stats/interleaved.py; a block's figure is its median step). Block lengths come
from warm-up (`block_plan`): a block lasts at least `block_s`, and a side whose step is short
starts each block with one untimed step that re-warms it. Sampling stops when the ratio's 95%
interval half-width reaches `precision`, or when `budget_s` is spent, and the record says which.

What each side sees is what it would see alone: each side's init seeds the RNGs as a solo run
does, and each side's RNG state is swapped in around its blocks, so dropout and data order
follow the solo run's stream step for step; the correctness gate checks both sides' losses
against the baseline's reference run (harness/run/runner.py).

Where it applies: throughput mode, on one rank or several. The other side is `against`'s
overrides of the configuration, by default every toggle off and, on several ranks, DDP on the
same ranks (so `parallel.data=fsdp` is measured against DDP in the same process group, each rank
holding both). With several ranks a step's time is the slowest rank's (gathered off the clock),
and the budget is counted in those sampled seconds, so every rank stops at the same pair.
Pipelines too: each side builds its own stages and schedule over the same ranks (a planned split
against the uniform one, or a pipeline against data parallel), and since a side's schedule
finishes its sends and receives within its step, the two never share a message. Only the
configuration side's clock records its schedule, from its first steady step on (its timeline
and bubble are its steps', gaps between blocks excluded). Time-to-train runs are paired per
repeat, and the record says why (`ab_unavailable`).

Clock: the variant's record is the run's record (its steps, eval, breakdown, MLPerf log); the
baseline side's raw step times and losses are kept in its `ab` section, with every block. With
`probe_microbatch` every rank also times the layer profile's block after each pair, off the clock
between barriers (harness/run/probe.py: the machine's speed during the run, for a planner
check to price its plans with), kept in `ab.probe`.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from harness.config.run_config import RunConfig, Toggles
from harness.measure.timing import now, sync
from harness.parallel import dist as dist_mod
from harness.parallel import expert as expert_parallel
from harness.parallel import jobs
from harness.parallel.dist import DistInfo
from harness.parallel.strategies import data_shard
from harness.run import data
from harness.run import loop
from harness.run.mlperf_log import K
from harness.run.record import NullRecord
from results.stats import interleaved as ab_stats

MAX_STEPS = 100_000   # per side: bounds the data plan when steps turn out far shorter than warm-up's
PRECISION, BUDGET, CAP = "precision", "budget", "steps cap"
REWARM = "rewarm"  # a block's first step, after the other side ran: trained, not timed into the ratio
# Re-warm a side only when its step is shorter than this (seconds). Measured (2026-12-04, one
# process each, this 2-core VM): the first step after the other side ran costs about +1 ms
# (LM tiny 13 ms steps: +6%, up to 2.5x on other short steps), and no more on long steps: +2.1 ms
# on DeepCAM tiny +amp's 661 ms (ratio 1.003 over 8 blocks), 0.95-1.11 on CosmoFlow tiny +amp's
# 1.5 s (20 records), 0.98 on LM small tp2's 1.7 s and DDP's 1.4 s on 2 ranks. Above 0.5 s such a
# cost is <= 0.4% of the step, while the untimed step costs a long-step side half its sampling.
REWARM_BELOW_S = 0.5


def block_plan(step_s: float, block_s: float) -> tuple[int, bool]:
    """(steps per block, re-warm?) for a side whose step takes step_s seconds (from warm-up): a
    block lasts at least block_s. Blocks are not stretched to the other side's step: tried
    (2026-12-04, CosmoFlow tiny +amp=bf16, 1.6 s steps, 3 processes), baseline blocks of 19-23
    steps had medians 73-98 ms from block to block, a +-10% pair ratio as with 3-step blocks, and
    half the pairs."""
    return max(1, math.ceil(block_s / max(step_s, 1e-6))), step_s < REWARM_BELOW_S


def why_not(cfg: RunConfig) -> str | None:
    """Why this configuration can't be interleaved with its other side in one process, or None."""
    if cfg.mode != "throughput":
        return "time-to-train runs are timed end to end: paired per repeat instead"
    return None  # no toggle on and no `against`: the baseline against itself, an A/A trial (harness calibrate)


def baseline_of(cfg: RunConfig, world: int = 1) -> RunConfig:
    """The other side ("A"), sampled plainly: `against`'s overrides of this configuration; without
    them every toggle off and the parallel section's defaults (on several ranks DDP on the same
    ranks; on one, no recomputation)."""
    plain = dataclasses.replace(cfg, interleave=False, against="", probe_microbatch=0)
    if cfg.against:
        return plain.with_overrides([a.strip() for a in cfg.against.split(";") if a.strip()])
    from harness.config.run_config import Parallel
    return dataclasses.replace(plain, toggles=Toggles(), parallel=Parallel())


def describe_other(cfg: RunConfig, world: int) -> str:
    """The other side in words, for the record and `harness run`'s line."""
    if cfg.against:
        return cfg.against
    if cfg.parallel.is_default():
        return "every toggle off"
    return "every toggle off" + (", DDP on the same ranks" if world > 1 else ", no recomputation")


class _Rng:
    """One side's random-number streams (torch's CPU and CUDA generators, numpy's global one)."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.save()

    def save(self) -> None:
        self.torch, self.np = torch.get_rng_state(), np.random.get_state()
        self.cuda_states = torch.cuda.get_rng_state_all() if self.cuda else None

    def load(self) -> None:
        torch.set_rng_state(self.torch)
        np.random.set_state(self.np)
        if self.cuda:
            torch.cuda.set_rng_state_all(self.cuda_states)


@dataclasses.dataclass
class _Side:
    name: str            # "A" (baseline) or "B" (the configuration)
    run: "loop._Run"
    loader: object
    rng: _Rng
    steps: int = 0       # steps taken so far, warm-up included (the data plan's index)
    block: int = 1       # steps per block, set from warm-up (block_plan)
    rewarm: bool = True  # each block starts with an untimed step (block_plan)
    rank_step: list = dataclasses.field(default_factory=list)  # the last step's seconds on every rank

    def step(self, device: torch.device) -> tuple[float, float, float, dict]:
        """One training step: (global-batch loss, the slowest rank's step seconds (the jobs'
        throughput-equivalent step with parallel.jobs: loop.step_of), its data wait,
        the MoE figures or {}), device-synced; every rank gets the same figures (small collectives,
        off the clock)."""
        expert_parallel.reset(self.run.workload, self.run.ts.eval_model)  # MoE statistics: this step's only
        t0 = now()
        x, y = next(self.loader)
        t1 = now()
        loss = self.run.ts(*self.run.ts.prepare(x, y))
        sync(device)  # device sync point: the step is finished before the clock is read
        t2 = now()
        self.steps += 1
        loss_v, rank_step, rank_data = dist_mod.step_stats(self.run.dist, float(loss), t2 - t0, t1 - t0,
                                                           self.run.ts.holds_loss)
        self.rank_step = rank_step
        moe = expert_parallel.step_figures(self.run.workload, self.run.ts.eval_model, self.run.dist)
        return loss_v, loop.step_of(self.run.cfg, rank_step), max(rank_data), moe


def _pipeline_clock(side: _Side):
    """The side's pipeline event clock (harness/parallel/pipeline.Clock), or None without a pipeline."""
    pipe = getattr(side.run.ts, "pipeline", None)
    return None if pipe is None else pipe.clock


class Interleaved:
    """Plugs into loop.train: `prepare` builds the baseline side in MLPerf's init phase, `steps`
    replaces the plain timed loop."""

    def __init__(self, cfg: RunConfig, workload, dist: DistInfo):
        self.cfg, self.workload, self.dist = cfg, workload, dist
        self.cuda = cfg.device == "cuda"

    def prepare(self, run, loader, rec) -> None:
        self.b = _Side("B", run, loader, _Rng(self.cuda))  # the variant's streams as its init left them
        base_run, base_loader = loop._init(baseline_of(self.cfg, self.dist.world), self.workload, NullRecord(),
                                           self.dist)
        self.a = _Side("A", base_run, base_loader, _Rng(self.cuda))
        self.probe = None  # the profile's block timed between pairs (harness/run/probe.py), on request
        if self.cfg.probe_microbatch:
            from harness.run.probe import Probe
            self.probe = Probe(self.workload, self.workload.sizes[self.cfg.size], self.cfg.probe_microbatch)

    def close(self) -> None:
        for side in (getattr(self, "a", None), getattr(self, "b", None)):
            if side is not None:
                side.loader.close()

    def steps(self, run, loader, rec, run_start: float, run_start_pc: float) -> tuple[bool, int]:
        cfg, ml = self.cfg, rec.mllog
        device = torch.device(cfg.device)
        base = {"step_s": [], "data_s": [], "loss": [], "phase": []}
        ml.start(K.EPOCH_START, epoch_num=1)

        spent = [0.0]  # sampled seconds: every timed and re-warm step's slowest-rank time, the same on
                       # every rank (a wall clock read per rank could end the ranks' loops at different pairs)

        def take(side: _Side, phase: str, n: int, block: int | None = None) -> float:
            """In a block, one step of re-warming after the switch of sides if the side re-warms;
            then n steps of one side with its RNG streams; their median step time."""
            side.rng.load()
            times = []
            rewarm = block is not None and side.rewarm
            clock = _pipeline_clock(side) if side is self.b and block is not None else None
            for i in range(n + rewarm):
                if clock is not None:  # a re-warm step is not in the schedule's steady timeline
                    clock.recording = not (rewarm and i == 0)
                loss, step_s, data_s, moe = side.step(device)
                if not math.isfinite(loss):
                    raise loop.Diverged(f"loss is {loss} at step {side.steps - 1} of the "
                                        f"{'baseline' if side is self.a else 'configuration'} side")
                if block is not None:
                    spent[0] += step_s
                if rewarm and i == 0:
                    # the first step after the other side ran is up to 2.5x slower on short steps
                    # (caches, allocator pages of the other model); a solo run never pays it
                    phase_now = REWARM
                else:
                    phase_now = phase
                    times.append(step_s)
                if side is self.b:
                    row = dict(step=side.steps - 1, phase=phase_now, t=now() - run_start_pc, loss=loss,
                               step_s=step_s, data_s=data_s)
                    rec.log_step(**row, **({} if block is None else {"block": block}), **moe)
                else:
                    for key, v in (("step_s", step_s), ("data_s", data_s), ("loss", loss), ("phase", phase_now)):
                        base[key].append(v)
                    n_jobs = side.run.cfg.parallel.jobs
                    if n_jobs > 1:  # each job's own step beside their combined one
                        base.setdefault("job_step_s", []).append(jobs.job_steps(side.rank_step, n_jobs))
            side.rng.save()
            return float(np.median(times))

        warmup = max(cfg.warmup_steps, 2)  # one step pays compile/first-touch; the next sets the block length
        clocks = {side.name: _pipeline_clock(side) for side in (self.a, self.b)}
        for clock in clocks.values():
            if clock is not None:  # a pipeline's timeline is its steady steps' (harness/parallel/pipeline.report)
                clock.recording = False
        for side in (self.b, self.a):
            times = [take(side, "warmup", 1) for _ in range(warmup)]
            side.block, side.rewarm = block_plan(float(np.median(times[1:])), cfg.block_s)
        if clocks["B"] is not None:  # take() switches B's clock on per timed step; A's stays off
            clocks["B"].first_steady = clocks["B"].step  # the clock's own step count
        self._timed_loaders(run, warmup)
        ratios, blocks = [], []
        ended = BUDGET
        while True:
            pair = len(ratios)
            first = ab_stats.abba_first(pair)
            order = (self.a, self.b) if first == "A" else (self.b, self.a)
            med = {side.name: take(side, "steady", side.block, block=pair) for side in order}
            ratios.append(med["A"] / med["B"])
            blocks.append([pair, first, med["A"], med["B"]])
            if self.probe is not None:  # off the clock, between pairs, every rank at once
                self.probe.visit()
            if ab_stats.precise_enough(ratios, cfg.precision):
                ended = PRECISION
                break
            if spent[0] >= cfg.budget_s:
                break
            if any(s.steps + s.block + 1 > s.cap for s in (self.a, self.b)):
                ended = CAP
                break
        seconds = spent[0]
        ml.end(K.EPOCH_STOP, epoch_num=1)
        self.close()
        self._record(rec, ratios, blocks, base, ended, seconds, warmup)
        return loop._eval(run, rec, 1, self.b.steps), 1

    def _timed_loaders(self, run, warmup: int) -> None:
        """Each side's data stream past warm-up, sized for the budget: the same batches a solo
        run would train on at those steps (one seeded plan, data.train_plan)."""
        blocks = 2 * math.ceil(self.cfg.budget_s / self.cfg.block_s) + 2  # a block lasts >= block_s
        for side in (self.a, self.b):
            side.loader.close()
            r = side.run
            side.cap = warmup + min(MAX_STEPS, (side.block + 1) * blocks)
            dp_rank, dp_world = data_shard(r.cfg, r.dist)
            plan, _ = data.train_plan(r.workload.n_samples(r.root, "train", r.size), r.local_batch, r.cfg.seed,
                                      side.cap, dp_rank, dp_world, loop._shares(r.cfg, dp_world))
            side.loader = data.make_loader(r.cfg, r.workload, r.size, r.root, "train", plan[warmup:],
                                           r.dist.local_rank)

    def _record(self, rec, ratios, blocks, base, ended, seconds, warmup) -> None:
        s = ab_stats.summarise(ratios)
        other = baseline_of(self.cfg, self.dist.world)
        rec.info["ab"] = {"baseline": {**base, "warmup": warmup}, "blocks": blocks,
                          "against": describe_other(self.cfg, self.dist.world),
                          "aa": other.variant_hash() == self.cfg.variant_hash(),
                          "block_columns": ["pair", "first", "baseline_median_step_s", "config_median_step_s"],
                          "ended_by": ended, "method": s["method"], "precision_target": self.cfg.precision,
                          "budget_s": self.cfg.budget_s, "block_s": self.cfg.block_s,
                          "rewarm": {"baseline": self.a.rewarm, "config": self.b.rewarm},
                          **({"probe": self.probe.record()} if self.probe is not None else {})}
        rec.info.update(ab_ratio=s["ratio"], ab_lo=s["ci_lo"], ab_hi=s["ci_hi"], ab_pairs=s["pairs"],
                        ab_half_width=s["half_width"] if math.isfinite(s["half_width"]) else None,
                        ab_precision_reached=int(ended == PRECISION),
                        ab_seconds=seconds, ab_block_steps_baseline=self.a.block, ab_block_steps_config=self.b.block)
