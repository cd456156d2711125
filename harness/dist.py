"""Rank, world size and local rank from whichever launcher started us: torchrun (RANK/
WORLD_SIZE/LOCAL_RANK), srun (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID) or MPICH's mpiexec
(PMI_RANK/PMI_SIZE/MPI_LOCALRANKID). A plain `python -m harness run` is rank 0 of 1."""
from __future__ import annotations

import os
from dataclasses import dataclass

_LAUNCHERS = (  # (rank, world, local rank) variables, most specific first
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    launcher: str = "none"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_env(env=os.environ) -> DistInfo:
    for r, w, lr in _LAUNCHERS:
        if r in env and w in env:
            return DistInfo(int(env[r]), int(env[w]), int(env.get(lr, 0)), launcher=r)
    return DistInfo()
