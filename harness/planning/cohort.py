"""Ranks profiled together start each measurement together and end it together.

Why: `harness profile` under a launcher measures every device while the others load the machine,
as they will in training. Each rank samples a cell until its own stop rule says (a precision
target or a time budget, harness/planning/profile._stop), and a rank whose figure was precise
early used to wait at the next barrier while a noisier one sampled on alone: that rank's later
passes ran on a quieter machine than the job will. Two profiles of the same four ranks once
priced one plan 17% apart. Now a rank whose rule is met says so and keeps sampling until every
rank has said so; no rank waits while another is timed.

The count lives in the process group's own key-value store (torch.distributed.TCPStore, which
the env:// rendezvous serves from rank 0 at MASTER_ADDR:MASTER_PORT), one key per cell: a rank
adds 1 once when its rule is met, and reads the count (add 0) after each pass, a local TCP round
trip (~0.1 ms against passes of 5 ms and up), outside the timed part of the pass. Each rank's
rule ends by max(budget_s, cell_s) after the cell's barrier, so a cell ends within one pass of
that; a peer that died mid-cell never says so, and a rank that has waited `patience_s` past its
own rule stops with an error naming the cell (launchers that do not kill the job on one rank's
exit would otherwise leave it sampling forever).
"""
from __future__ import annotations

import datetime
import os
import time
from typing import Callable


class Cohort:
    """The ranks of one profile: `start()` before each cell (a barrier), then `done(mine)` after
    each timed pass, True once every rank's own rule has been met in this cell."""

    def __init__(self, barrier: Callable[[], object], store, world: int, patience_s: float = 300.0,
                 clock: Callable[[], float] = time.monotonic):
        self.barrier, self.store, self.world = barrier, store, world
        self.patience_s, self.clock = patience_s, clock
        self.cell, self.said, self.said_at = 0, False, 0.0

    def start(self) -> None:
        self.barrier()
        self.cell += 1
        self.said = False

    def done(self, mine: bool) -> bool:
        key = f"cell{self.cell}"
        if mine and not self.said:
            self.store.add(key, 1)
            self.said, self.said_at = True, self.clock()
        if not self.said:
            return False
        count = self.store.add(key, 0)
        if count < self.world and self.clock() - self.said_at > self.patience_s:
            raise TimeoutError(f"profile: {count} of {self.world} ranks finished measurement {self.cell} "
                               f"after {self.patience_s:.0f} s more; a rank is gone or stuck")
        return count >= self.world


def of_process_group(timeout_s: float = 300.0) -> Cohort:
    """The cohort of this process group's ranks (after dist.init: MASTER_ADDR/PORT are set),
    its counts in a prefix of the group's store, reached as one more client of it."""
    import torch.distributed as td
    store = td.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                        timeout=datetime.timedelta(seconds=timeout_s))
    return Cohort(td.barrier, td.PrefixStore("harness-profile-cohort", store), td.get_world_size(), timeout_s)
