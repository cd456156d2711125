"""The parallel section (RunConfig.parallel), applied as named steps of the ordered builder
(harness/run/build.py), and the accounting of what each strategy costs.

Data-parallel strategies (parallel.data), all over the same global batch:
  ddp    DistributedDataParallel: a full replica per rank, gradients all-reduced in buckets
  zero1  DDP + ZeroRedundancyOptimizer: each rank keeps the optimizer state of its share of
         the parameters, steps them and broadcasts them (torch's ZeRO-1: all-reduce of the
         gradients, then a broadcast per parameter from its owner)
  zero2  FSDP2 fully_shard with reshard_after_forward=False: gradients and optimizer state
         sharded, parameters gathered once per step (forward) and held through backward
  fsdp   FSDP2 fully_shard, one unit per block the workload names (fsdp_units) and the root:
         parameters, gradients and optimizer state sharded; parameters all-gathered before
         use (again in backward for resharded units), gradients reduce-scattered

The only module that applies parallel.data, tp and sp (and builds the device mesh); the
pipeline keys are applied in harness/parallel/pipeline.py and parallel.ep in harness/parallel/expert.py.
What a strategy costs (and in theory should cost) is measured in harness/parallel/accounting.py.
"""
from __future__ import annotations

import inspect

import torch

from harness.config.run_config import RunConfig
from harness.config.errors import BadInput
from harness.parallel import jobs as job_layout


def check(cfg: RunConfig, world: int) -> None:
    """The section against the launched world, before any work: BadInput (exit 2) with the reason."""
    from harness.config import registry
    problem = cfg.parallel.layout_problem(world)
    if not problem and world > 1:
        problem = cfg.parallel.batch_problem(cfg.batch_size or registry.get(cfg.workload).sizes[cfg.size].batch_size,
                                             world)
    if problem:
        raise BadInput(problem)


def data_shard(cfg: RunConfig, dist) -> tuple[int, int]:
    """(data-parallel rank, data-parallel world): the mesh is (pp, dp, cp, tp), row-major as
    init_device_mesh lays it out (harness/config/parallel_config.py), so the tp and cp ranks and
    the pipeline stages of one replica read the same samples. With parallel.jobs of one pipeline
    each, or unequal pipeline replicas, a replica is its own contiguous ranks (_contiguous_replicas)."""
    if dist.world == 1:
        return 0, 1
    p = cfg.parallel
    dp = dist.world // p.model_parallel
    if _contiguous_replicas(p):  # replica j on ranks j*pp .. j*pp + pp - 1
        return dist.rank // p.pp, dp
    return (dist.rank // (p.cp * p.tp)) % dp, dp


def mesh(ts):
    """The (dp, tp) device mesh, or (pp, dp, tp) with a pipeline, built once per run. With
    context parallel, "dp" spans dp x cp: the group the gradients are reduced over (the cp
    ranks' own group: harness/parallel/context.py)."""
    if getattr(ts, "mesh", None) is None:
        from torch.distributed.device_mesh import init_device_mesh
        tp, pp, jobs = ts.cfg.parallel.tp, ts.cfg.parallel.pp, ts.cfg.parallel.jobs
        if _contiguous_replicas(ts.cfg.parallel):  # a replica (dp index) is its own contiguous ranks
            from torch.distributed.device_mesh import DeviceMesh
            ts.mesh = DeviceMesh(ts.device.type, torch.tensor(job_layout.pipeline_mesh(ts.world, ts.world // pp)),
                                 mesh_dim_names=("pp", "dp", "tp"))
        elif jobs > 1:  # independent jobs (plain ddp): each job's "dp" group is its own ranks (parallel/jobs.py)
            ts.mesh = init_device_mesh(ts.device.type, (jobs, ts.world // jobs), mesh_dim_names=("job", "dp"))
        elif pp > 1:
            ts.mesh = init_device_mesh(ts.device.type, (pp, ts.world // (pp * tp), tp), mesh_dim_names=("pp", "dp", "tp"))
        else:
            ts.mesh = init_device_mesh(ts.device.type, (ts.world // tp, tp), mesh_dim_names=("dp", "tp"))
    return ts.mesh


def _contiguous_replicas(p) -> bool:
    """Pipeline replicas each on contiguous ranks (replica j on j*pp .. j*pp + pp - 1: jobs.pipeline_mesh)
    rather than torchtitan's row-major mesh (stage 0 of every replica first): independent jobs of one
    pipeline each, and unequal replicas (batch_split with pp), each one device kind's ranks as
    `harness plan` lays a kind's own job out (results/planner/kind_jobs.py)."""
    return p.pp > 1 and (p.jobs > 1 or bool(p.batch_split))


def _dp_degree(ts) -> int:
    """Ranks the gradients are reduced over: dp x cp (of one job, with parallel.jobs)."""
    return ts.world // (ts.cfg.parallel.tp * ts.cfg.parallel.pp * ts.cfg.parallel.jobs)


# -- builder steps --------------------------------------------------------------------------------
# Each takes the TrainStep being built (harness/run/build.py, which imports this module).
def apply_tensor_parallel(ts) -> None:
    """The workload's plan (module path -> ParallelStyle) over the tp dimension of the mesh.
    Its parameters become DTensors; the rest stay plain, replicated on every tp rank."""
    if ts.world <= 1 or ts.cfg.parallel.tp == 1:
        return
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor.parallel import parallelize_module
    p = ts.cfg.parallel
    # with a pipeline, each of this rank's stage modules: the plan names its blocks as the model's
    for part in (ts.model if ts.pipeline is not None else [ts.model]):
        parallelize_module(part, mesh(ts)["tp"], ts.workload.tensor_parallel_plan(part, p.tp, p.sp))
    for param in ts.model.parameters():
        if isinstance(param, DTensor) and all(isinstance(x, Replicate) for x in param.placements):
            param.register_post_accumulate_grad_hook(_reduce_partial_grad)


def _reduce_partial_grad(param) -> None:
    """A replicated parameter applied to sequence-sharded activations (sequence parallel's
    LayerNorms) gets a Partial gradient: sum it over the tp ranks once, after backward. Left
    Partial, every optimizer op that reads it all-reduces it again (AdamW: 3 per parameter,
    measured)."""
    from torch.distributed.tensor import Replicate
    g = param.grad
    if g is not None and any(x.is_partial() for x in g.placements):
        param.grad = g.redistribute(placements=[Replicate()] * len(g.placements))


def apply_data_parallel(ts) -> None:
    """ddp and zero1: DDP around the model (zero1 shards the optimizer in apply_optimizer).
    fsdp: fully_shard each unit the workload names, then the root (in place: evaluation runs
    the same sharded module, on every rank in lockstep)."""
    if _dp_degree(ts) <= 1:  # one replica (tensor or pipeline parallel only): nothing to do
        return
    if ts.cfg.parallel.batch_split:
        _weigh_loss_by_share(ts)
    if ts.pipeline is not None:
        _data_parallel_stages(ts)
        return
    if ts.cfg.parallel.data in ("fsdp", "zero2"):
        from torch.distributed.fsdp import fully_shard
        dp = mesh(ts)["dp"]  # with tp: 2D parameters, sharded over dp within each tp shard
        # zero2: the parameters gathered in forward stay until backward is done (no second
        # all-gather); gradients and optimizer state stay sharded (torchtitan's ZeRO-2 setting)
        # (only zero2 passes the setting: given explicitly, FSDP2 no longer lets the root keep
        # its parameters from forward to backward, measured: the root gathered twice a step)
        shard_opts = {"reshard_after_forward": False} if ts.cfg.parallel.data == "zero2" else {}
        if ts.ddp_ignore:  # expert parallel's experts: each rank's own, reduced by harness/parallel/expert.py
            named = dict(ts.model.named_parameters())
            shard_opts["ignored_params"] = {named[n] for n in ts.ddp_ignore}
        for unit in ts.workload.fsdp_units(ts.model):
            fully_shard(unit, mesh=dp, **shard_opts)
        fully_shard(ts.model, mesh=dp, **shard_opts)
        ts.lockstep_eval = True  # a sharded forward all-gathers: every rank runs every eval batch
        return
    from torch.nn.parallel import DistributedDataParallel
    ids = [torch.cuda.current_device()] if ts.device.type == "cuda" else None
    if ts.ddp_ignore:  # expert parallel's sharded experts: reduced by harness/parallel/expert.py
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(ts.model, ts.ddp_ignore)
    # parallel.jobs: each job's gradients over its own ranks only; else the world's default group
    group = mesh(ts)["dp"].get_group() if ts.cfg.parallel.jobs > 1 else None
    ts.model = DistributedDataParallel(ts.model, device_ids=ids, process_group=group)


def _weigh_loss_by_share(ts) -> None:
    """Uneven data parallel (parallel.batch_split): rank r's mean loss over its n_r samples is
    scaled by n_r * dp / B. DDP and FSDP average gradients over the dp ranks, so the update is
    sum_r (n_r / B) grad(mean_r) = grad of the global batch's mean loss, the even split's; and
    the mean of the scaled losses over ranks (dist.step_stats) is the global batch's loss.
    With parallel.jobs, B and the shares are the rank's own job's (its slice of batch_split)."""
    dp = _dp_degree(ts)
    shares = ts.cfg.parallel.shares()
    if ts.cfg.parallel.jobs > 1:
        job = mesh(ts)["job"].get_local_rank()
        shares = shares[job * dp:(job + 1) * dp]
    weight = shares[mesh(ts)["dp"].get_local_rank()] * dp / sum(shares)
    plain = ts.loss_fn
    ts.loss_fn = lambda out, y: plain(out, y) * weight


def _data_parallel_stages(ts) -> None:
    """With a pipeline, each stage module over the mesh's dp group, in place:
    fsdp: FSDP2 without resharding after forward (torchtitan's choice under pipelining: the
          parameters are gathered once for all microbatches, the gradients reduce-scattered
          once, when the schedule ends);
    ddp, zero1: torch's replicate (DDP built on FSDP2's machinery, as torchtitan applies it),
          whose gradients the schedule all-reduces once, after the last microbatch. (The
          DistributedDataParallel wrapper fails under the schedules here: its reducer's bucket
          rebuild asserts after the first step, torch 2.13 on gloo.)"""
    dp = mesh(ts)["dp"]
    if ts.cfg.parallel.data == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for part in ts.model:
            for unit in ts.workload.fsdp_units(part):
                fully_shard(unit, mesh=dp, reshard_after_forward=False)
            fully_shard(part, mesh=dp, reshard_after_forward=False)
        ts.lockstep_eval = True
        return
    from torch.distributed._composable.replicate_with_fsdp import replicate
    for part in ts.model:
        replicate(part, mesh=dp)
    ts.lockstep_eval = True  # each eval forward of a replicated module may talk to its dp peers


def apply_optimizer(ts) -> None:
    """The workload's optimizer and schedule over the built model's parameters (FSDP has
    replaced them by their shards); zero1 then shards its state over the ranks."""
    ts.optimizer, ts.scheduler = ts.make_optimizer(ts.eval_model)
    _per_parameter_where_mixed(ts.optimizer)
    if _dp_degree(ts) > 1 and ts.cfg.parallel.data == "zero1":
        group = mesh(ts)["dp"].get_group() if ts.pipeline is not None else None
        ts.optimizer = zero1(ts.optimizer, ts.scheduler, group)


def _per_parameter_where_mixed(opt: torch.optim.Optimizer) -> None:
    """DTensor and plain parameters side by side (tensor parallel alone, or with a pipeline: the
    rest stay plain; expert parallel's experts beside FSDP's shards), which the multi-tensor
    (foreach, fused) kernels refuse to mix ("got mixed torch.Tensor and DTensor"): the
    per-parameter path, which takes both, for every group."""
    from torch.distributed.tensor import DTensor
    if len({isinstance(p, DTensor) for g in opt.param_groups for p in g["params"]}) > 1:
        for g in opt.param_groups:
            g["foreach"], g["fused"] = False, False


def zero1(opt: torch.optim.Optimizer, sched, group=None) -> torch.optim.Optimizer:
    """The same optimizer class, groups and hyperparameters as ZeroRedundancyOptimizer over
    `group` (default: the world); the schedule then drives it (ZeRO copies each group's lr to
    its local optimizer every step)."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    accepted = inspect.signature(type(opt).__init__).parameters
    groups = [dict(g) for g in opt.param_groups]
    zero = ZeroRedundancyOptimizer(groups, optimizer_class=type(opt), process_group=group,
                                   **{k: v for k, v in opt.defaults.items() if k in accepted})
    sched.optimizer = zero
    return zero
