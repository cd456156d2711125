"""Pipeline parallelism (parallel.pp > 1) on torch.distributed.pipelining: the only module that
applies parallel.pp, microbatches, pp_schedule, pp_virtual and pp_split.

Two steps of the ordered builder (harness/run/build.py):
  pipeline_split     the workload cuts the model into stages (embeddings first, head last) and
                     this rank keeps its own: pp rank r holds stages r, r + pp, ... (torchtitan's
                     "loop" placement; one stage per rank unless pp_virtual > 1)
  pipeline_schedule  each kept stage (wrapped by the data-parallel step) becomes a PipelineStage
                     over the mesh's pp group, driven by ScheduleGPipe, Schedule1F1B or
                     ScheduleInterleaved1F1B with `microbatches` microbatches and the workload's
                     loss (mean per microbatch, divided by M: the microbatches' gradients sum to
                     the whole batch's, so a step equals one over the whole batch)

Tied weights across stages (the LM's embedding and head) are summed over the ranks holding them
after each backward (Megatron's embedding group), before the optimizer step.

Every forward and backward of every microbatch on every stage is timed (wall clock; the device
synced first on CUDA), so the record holds the schedule as it ran (results/analysis/bubble.py turns
it into bubble fractions and the portal into a timeline).
"""
from __future__ import annotations

import time

import torch
from torch import nn

SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}


def _timed_stage_class():
    from torch.distributed.pipelining import PipelineStage

    class TimedStage(PipelineStage):
        """A PipelineStage that notes when each microbatch's forward and backward start and end."""

        def __init__(self, *args, clock, **kwargs):
            super().__init__(*args, **kwargs)
            self.clock = clock

        def forward_one_chunk(self, fwd_chunk_id, *args, **kwargs):
            with self.clock.span(self.stage_index, "F", fwd_chunk_id):
                return super().forward_one_chunk(fwd_chunk_id, *args, **kwargs)

        def backward_one_chunk(self, bwd_chunk_id, *args, **kwargs):
            with self.clock.span(self.stage_index, "B", bwd_chunk_id):
                return super().backward_one_chunk(bwd_chunk_id, *args, **kwargs)

    return TimedStage


class _Span:
    def __init__(self, clock, stage, kind, mb):
        self.clock, self.row = clock, [clock.step, stage, kind, mb, 0.0, 0.0, 0.0]

    def __enter__(self):
        self.clock.sync()
        self.row[4] = time.time()
        self.cpu0 = time.process_time()

    def __exit__(self, *exc):
        self.clock.sync()
        self.row[5] = time.time()
        self.row[6] = time.process_time() - self.cpu0
        if self.clock.recording:
            self.clock.events.append(tuple(self.row))


class Clock:
    """Events (step, stage, kind F|B|L, microbatch, start s, end s, CPU s) of this rank. time.time():
    one clock for every process on a node (across nodes, up to their NTP offset). CPU s: the
    process's CPU seconds in the operation (time.process_time, every thread), beside its wall
    seconds. Why: under a CPU quota an operation's wall time is its CPU seconds at the quota's rate
    less what a wait before it gave back (results/analysis/schedule.quota_credit); with both, a
    planner check tells a stage that computed cheaper than priced from one that got more back."""

    def __init__(self, device: torch.device):
        self.device, self.step, self.recording, self.events = device, 0, True, []
        self.first_steady = 0  # set by the interleaved engine, whose warm-up is its own (harness/run/interleave.py)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # device sync point: the chunk's kernels are done

    def span(self, stage: int, kind: str, mb: int) -> _Span:
        return _Span(self, stage, kind, mb)


class Pipeline:
    """This rank's part of the pipeline: its stages, the schedule, the tied-weight group."""

    def __init__(self, ts, mesh):
        p, wl = ts.cfg.parallel, ts.workload
        self.size = wl.sizes[ts.cfg.size]
        self.workload, self.device, self.mesh = wl, ts.device, mesh
        self.pp, self.n_stages = p.pp, p.stages
        self.schedule_name = p.pp_schedule
        self.pp_rank = mesh["pp"].get_local_rank()
        # this replica's microbatches: unequal replicas (batch_split) each split their own share
        replica = mesh.get_coordinate()[1]
        self.microbatches = p.replica_microbatches(mesh.mesh.shape[1])[replica]
        self.owned = [self.pp_rank + k * p.pp for k in range(p.pp_virtual)]
        self.split = p.split() if p.pp_split else wl.pipeline_split(self.size, p.stages)
        self.holds_input, self.holds_loss = 0 in self.owned, self.n_stages - 1 in self.owned
        self.clock = Clock(ts.device)
        self.parts = wl.pipeline_stages(ts.model, self.split, self.owned)
        self.tied_group = self._tied_group()
        self.schedule = None

    def _global_rank(self, pp_index: int) -> int:
        """The world rank of pipeline position `pp_index` in this rank's replica."""
        me = self.mesh.get_coordinate()  # (pp, dp, tp) of this rank
        return int(self.mesh.mesh[pp_index, me[1], me[2]])

    def _tied_group(self):
        """A process group per replica of its first and last pipeline rank (every rank creates
        every group, in the same order, as new_group requires); this rank's, or None."""
        import torch.distributed as td
        mine = None
        for d in range(self.mesh.mesh.shape[1]):
            for t in range(self.mesh.mesh.shape[2]):
                ranks = [int(self.mesh.mesh[0, d, t]), int(self.mesh.mesh[self.pp - 1, d, t])]
                group = td.new_group(ranks)
                if td.get_rank() in ranks:
                    mine = group
        return mine

    def build_schedule(self, wrapped: list[nn.Module], loss_fn) -> None:
        """PipelineStages over the pp group around the (data-parallel wrapped) stage modules."""
        import torch.distributed.pipelining as pl
        group = self.mesh["pp"].get_group()
        Timed = _timed_stage_class()
        stages = [Timed(m, s, self.n_stages, self.device, group=group, clock=self.clock)
                  for m, s in zip(wrapped, self.owned)]
        cls = getattr(pl, SCHEDULES[self.schedule_name])

        m = self.microbatches

        def timed_loss(out, target):  # the last stage's loss: busy time too
            with self.clock.span(self.n_stages - 1, "L", -1):
                # the microbatch's share of the replica's mean, so the gradients sum to the mean's
                # as the backward runs. Not the schedule's scale_grads: torch divides by M after the
                # replicas' all-reduce (PipelineStage.perform_reduce_grad), so replicas of unequal
                # M (batch_split with microbatch_split) would each divide the same sum differently
                return loss_fn(out, target) / m

        first = stages if self.schedule_name == "interleaved_1f1b" else stages[0]
        self.schedule = cls(first, n_microbatches=m, loss_fn=timed_loss, scale_grads=False)

    def forward_backward(self, x: torch.Tensor, y: torch.Tensor, autocast) -> torch.Tensor:
        """One pipelined forward and backward of the batch; the mean loss on the last stage's
        rank (NaN elsewhere: harness/dist.step_stats averages over the ranks that hold one)."""
        losses: list = []
        with autocast():
            self.schedule.step(*((x,) if self.holds_input else ()), target=y if self.holds_loss else None,
                               losses=losses, return_outputs=False)
        self._sum_tied_grads()
        self.clock.step += 1
        if self.holds_loss:
            return torch.stack([torch.as_tensor(v) for v in losses]).sum().detach()  # each loss / M already
        return torch.tensor(float("nan"))

    def _sum_tied_grads(self) -> None:
        """The embedding's and the head's gradient summed over their two ranks: the gradient
        of the one tied weight on a single device. An all-reduce per step (accounted)."""
        if self.tied_group is None:
            return
        import torch.distributed as td
        for part in self.parts:
            for p in self.workload.pipeline_tied(part):
                if p.grad is not None:
                    g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                    td.all_reduce(g, group=self.tied_group)

    @torch.no_grad()
    def forward_eval(self, x: torch.Tensor) -> torch.Tensor | None:
        """Evaluation: the batch through every stage in order, one stage at a time (blocking
        send/recv of the residual stream, fp32); the logits on the last stage's rank, else None."""
        import torch.distributed as td
        shape = self.workload.pipeline_activation_shape(self.size, x.shape[0])
        h = out = None
        for s in range(self.n_stages):
            if s in self.owned:
                out = self.parts[self.owned.index(s)](x if s == 0 else h)
                if s < self.n_stages - 1:
                    td.send(out.float().contiguous(), dst=self._global_rank((s + 1) % self.pp))
            elif s + 1 in self.owned:
                h = torch.empty(shape, dtype=torch.float32, device=self.device)
                td.recv(h, src=self._global_rank(s % self.pp))
        return out if self.holds_loss else None

    def schedule_record(self) -> dict:
        """What was built: schedule, stages, split, microbatches."""
        return {"schedule": self.schedule_name, "pp": self.pp, "stages": self.n_stages,
                "virtual": self.n_stages // self.pp, "microbatches": self.microbatches, "split": self.split}


# -- builder steps --------------------------------------------------------------------------------
def apply_pipeline_split(ts) -> None:
    """parallel.pp > 1: ts.model becomes the ModuleList of this rank's stages."""
    if ts.cfg.parallel.pp == 1 or ts.world <= 1:
        return
    from harness.parallel.strategies import mesh
    pipe = Pipeline(ts, mesh(ts))
    ts.pipeline = pipe
    ts.model = ts.eval_model = nn.ModuleList(pipe.parts)


def apply_pipeline_schedule(ts) -> None:
    """The schedule over the stage modules as the data-parallel and compile steps left them."""
    if ts.pipeline is None:
        return
    # ts.loss_fn: the workload's, weighted by the replica's share under batch_split (strategies.py)
    ts.pipeline.build_schedule(list(ts.model), ts.loss_fn)


def report(ts, dist, first_steady: int) -> dict:
    """Every rank's events gathered (one all_gather_object, after the timed steps) and turned
    into the schedule record with its bubble (results/analysis/bubble.py); recording then stops."""
    import torch.distributed as td
    from results.analysis import bubble as pipe_results
    clock = ts.pipeline.clock
    clock.recording = False
    first = max(first_steady, clock.first_steady)
    mine = [e for e in clock.events if e[0] >= first]
    every: list = [None] * dist.world
    td.all_gather_object(every, {"rank": dist.rank, "pp_rank": ts.pipeline.pp_rank, "events": mine})
    replica = [e for e in every if e["rank"] in _replica_ranks(ts.pipeline)]
    events = [dict(zip(("step", "stage", "kind", "mb", "t0", "t1", "cpu_s"), ev), rank=e["rank"])
              for e in replica for ev in e["events"]]
    out = pipe_results.analyse(ts.pipeline.schedule_record(), events)
    if ts.pipeline.mesh.mesh.shape[1] > 1:  # several replicas: how long each one's pipeline ran
        out["replica_windows_s"] = _replica_windows(ts.pipeline, every)
    return out


def _replica_windows(pipe: Pipeline, every: list[dict]) -> list[float]:
    """Each replica's pipeline window (s): its first operation's start to its last one's end in a
    step, the median over the steady steps. The timeline above is one replica's; beside unequal
    replicas (batch_split) this says which one the others wait for at the all-reduce."""
    import statistics
    mesh = pipe.mesh.mesh
    replica_of = {int(mesh[i, d, t]): d for i in range(mesh.shape[0]) for d in range(mesh.shape[1])
                  for t in range(mesh.shape[2])}
    spans: dict[tuple[int, int], list[float]] = {}  # (replica, step) -> [first start, last end]
    for e in every:
        for step, _stage, _kind, _mb, t0, t1, *_ in e["events"]:
            lo_hi = spans.setdefault((replica_of[e["rank"]], step), [t0, t1])
            lo_hi[0], lo_hi[1] = min(lo_hi[0], t0), max(lo_hi[1], t1)
    windows: dict[int, list[float]] = {}
    for (r, _), (lo, hi) in spans.items():
        windows.setdefault(r, []).append(hi - lo)
    return [round(statistics.median(windows[d]), 6) if d in windows else None for d in range(mesh.shape[1])]


def _replica_ranks(pipe: Pipeline) -> set[int]:
    """The ranks of this rank's pipeline (its dp replica): the timeline is one replica's."""
    return {pipe._global_rank(i) for i in range(pipe.pp)}
