"""Gradient accumulation for data parallel (parallel.microbatch_split without a pipeline): each rank
runs its share of the global batch as its own count of microbatches, forward and backward each,
and DDP all-reduces the summed gradients once, in the last microbatch's backward (the others run
under DDP's no_sync, so their backward only accumulates into .grad). Megatron's global batch =
microbatch x accumulation steps x dp, with the count per rank: a device of unequal speed takes a
large share (parallel.batch_split) at a microbatch size it runs well and holds in memory.

Why per rank and not one size: the planner gives each rank the share its speed earns
(results/planner/data_parallel.py), and a microbatch beyond the sizes a device was profiled at is
priced by extrapolation, which ran 8% fast at 32 samples of LM small (a block 23.98 ms a sample at
32 against 22.0-22.2 at 4-16, one thread, Xeon, 2026-12-06).

The only module that applies parallel.microbatch_split without a pipeline (harness/parallel/pipeline.py
applies it with one). The loss: microbatch i's mean loss scaled by n_i / n (its samples over the
rank's), so the summed gradients are the rank's mean loss's, which parallel.batch_split's weight
(harness/parallel/strategies._weigh_loss_by_share) then makes the global batch's.
"""
from __future__ import annotations

import contextlib

import torch


class Accumulation:
    """One rank's microbatches a step and the DDP module whose all-reduce waits for the last."""

    def __init__(self, count: int, ddp: torch.nn.Module):
        self.count, self.ddp = count, ddp

    def forward_backward(self, ts, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward of each microbatch (as even as tensor_split cuts the rank's batch);
        the detached sum of their scaled losses, the rank's loss as one forward would give it."""
        n = x.shape[0]
        total = torch.zeros((), device=x.device)
        for i, (xi, yi) in enumerate(zip(x.tensor_split(self.count), y.tensor_split(self.count))):
            sync = contextlib.nullcontext() if i == self.count - 1 else self.ddp.no_sync()
            with sync:  # DDP's buckets reduce in the last microbatch's backward only
                with ts.autocast():
                    loss = ts.loss_fn(ts.model(xi), yi) * (xi.shape[0] / n)
                if ts.scaler is not None:
                    ts.scaler.scale(loss).backward()
                else:
                    loss.backward()
            total = total + loss.detach()
        return total


def apply_accumulation(ts) -> None:
    """Builder step (harness/run/build.py, after data_parallel, before compile): this rank's count from
    parallel.microbatch_split, the DDP wrapper data_parallel made. Nothing with a pipeline (its schedule
    runs the microbatches), one microbatch, or one rank."""
    p = ts.cfg.parallel
    if p.pp > 1 or not p.microbatch_split or ts.world <= 1:
        return
    import torch.distributed as tdist
    # plain data parallel (parallel_config refuses tp, cp, ep here): one entry per rank, in rank
    # order, as batch_split's (with parallel.jobs too: the jobs are contiguous groups of ranks)
    count = p.replica_microbatches()[tdist.get_rank()]
    if count > 1:
        ts.accumulation = Accumulation(count, ts.model)
