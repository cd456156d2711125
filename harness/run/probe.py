"""The layer profile's block cell, timed on every rank between the interleaved engine's pairs of
blocks (`--set probe_microbatch=M`, harness/run/interleave.py): how fast each rank computes
*during* a check, in the profile's own units, so a bench can price a plan for the machine as it
was while the plan ran (harness/bench/seed_profiles.py: the profile scaled by this cell's
seconds in the check over its seconds in the profile).

Why: a profile prices a plan for the machine's speed while it was profiled, and on this VM that
speed moves. In one planner_seed bench (2026-12-07, Xeon, results/plans/seed-check-20261207T023405-
inputs) the CPU seconds a block cost per sample at microbatch 8 ranged 22.6-26.8 ms over eight
profiles of the same ranks, both kinds moving together, while every rank's wall seconds per CPU
second held at 1/quota (1.98-1.99 and 3.96-3.98): the quota was steady, the work per CPU second
was not. Two profiles fifteen minutes apart priced the 0.25-CPU pair's own job 14.07 and 16.16 s,
and it ran 15.57 and 15.75 s in the checks right after each. The profile's cells are visited in
rounds so drift moves them together (harness/measure/cells.py); this carries one of them into
the check, visited in the check's rounds.

The cell is the profile's: the workload's `profile_layers` block (a pipeline stage of one block)
at microbatch M, forward and backward, one visit of at least cells.VISIT_S seconds of passes
after a first pass, its sample the mean pass in CPU seconds of the process (the profile's by_cpu
figure: under a quota, wall time is quantized in the quota's periods) with its wall seconds
beside it; the first pass's CPU seconds are kept apart (`first_cpu_s`). Why apart: the first pass
after the barrier costs more than the next (2026-12-07 20:09, AMD EPYC, the four ranks at 0.5,
0.5, 0.25, 0.25 CPU, LM small's block at microbatch 1, 30 rounds: 1.037-1.063x, each rank's 95%
interval above 1), while the pass after it costs what a 3-block stage's back-to-back passes cost
a block (0.964-1.013x) and what it costs after another layer's pass (0.98-1.02x), as the profile's
cells are visited. Until then the first pass was the sample. It is not why the probed pipeline
prices came out slow (+5.5% [+2.9, +8.0] over four checks): in the checks after this change the
first pass and the sample gave factors within 2.5% of each other on the pipelines and the prices
stayed slow (docs/planner-measured.md, 2026-12-07 20:12-21:01; in the two pipeline checks after
those, 6 of 6 jobs came within 5%). A CPU
run loads data inline (harness/run/data.prefetch_depth), so no other thread of the process
spends CPU during the visit.

Sync points: a barrier of all ranks before the visit and after it, so every rank is timed on
the same machine and no rank's next step waits out another's visit on its clock (a step's time
is the slowest rank's). Off the clock: the engine's budget counts steps only.
"""
from __future__ import annotations

import torch

from harness.config import registry
from harness.config.errors import UsageError
from harness.measure import cells

CELL = "block"  # the profile's layer kind timed (profile.measure's rows of the same name)


class Probe:
    """One rank's probe: built once (its own copy of the model, warmed), visited after every pair."""

    def __init__(self, workload, size, microbatch: int):
        layer_model = registry.capability(workload, "profile_layers")
        if layer_model is None:
            raise UsageError(f"probe_microbatch: {workload.name} has no layer profile to probe; workloads with one: "
                             f"{', '.join(registry.supporting('profile_layers')) or 'none'}")
        rng = torch.get_rng_state()  # the run's own streams stay as they were (the engine swaps each side's in)
        torch.manual_seed(0)  # the profile's weights (profile.measure seeds 0 before building)
        module, make = layer_model(workload.build_model(size), size)["layers"][CELL]
        self.microbatch = microbatch
        self.cell = cells.Layer(module, lambda: make(microbatch))
        self.cell.time_by_cpu(True)
        self.cell.warm()
        self.first_cpu: list[float] = []  # each visit's first pass, CPU seconds: kept beside, not the sample
        torch.set_rng_state(rng)

    def visit(self) -> None:
        _barrier()
        rng = torch.get_rng_state()
        # the first pass after the barrier is timed apart and kept, not made the sample: it costs more
        # CPU seconds than the passes after it (the module docstring), where the profile's cells and a
        # pipeline's back-to-back stage passes are not first after a barrier
        *_, fwd_cpu, bwd_cpu = cells.one_pass(*self.cell.args)
        self.first_cpu.append(fwd_cpu + bwd_cpu)
        self.cell.visit(cells.VISIT_S)
        torch.set_rng_state(rng)
        _barrier()

    def mine(self) -> dict:
        c = self.cell
        return {"cpu_s": [round(x, 6) for x in c.samples],
                "wall_s": [round(f + b, 6) for f, b in zip(c.fwd, c.bwd)],
                "first_cpu_s": [round(x, 6) for x in self.first_cpu]}

    def record(self) -> dict:
        """Every rank's samples, rank order (a collective: every rank calls it)."""
        every = [self.mine()]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            every = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(every, self.mine())
        return {"cell": CELL, "microbatch": self.microbatch,
                "by": "cpu seconds a visit (mean pass after the first), fwd + bwd",
                "per_rank": every}


def _barrier() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
