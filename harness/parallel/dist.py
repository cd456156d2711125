"""Ranks and the data-parallel process group.

Rank, world size and local rank come from whichever launcher started us: torchrun (RANK/
WORLD_SIZE/LOCAL_RANK), srun (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID) or MPICH's mpiexec
(PMI_RANK/PMI_SIZE/MPI_LOCALRANKID). A plain `python -m harness run` is rank 0 of 1.

The rendezvous address: torchrun sets MASTER_ADDR/MASTER_PORT itself; under an MPI launcher
rank 0 picks a free port and broadcasts it with mpi4py; under srun without MPI the first node
of the allocation and a port derived from the job id are used. gloo on CPU, NCCL on CUDA.
A peer that dies makes the others' next collective fail (connection closed), and a peer that
hangs is bounded by HARNESS_DIST_TIMEOUT seconds, so a run never waits forever.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import datetime
import os
import socket
import subprocess
from dataclasses import dataclass

_LAUNCHERS = (  # (rank, world, local rank) variables, most specific first
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)
_MPI_LAUNCHERS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK")
DEFAULT_TIMEOUT_S = 120


def default_device() -> str:
    """cuda when torch sees a GPU, else cpu (the CLI's default; `--set device=...` wins)."""
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    launcher: str = "none"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def mpi(self) -> bool:
        """Started by an MPI launcher (mpiexec), so mpi4py's COMM_WORLD spans all ranks."""
        return self.launcher in _MPI_LAUNCHERS


def from_env(env=os.environ) -> DistInfo:
    for r, w, lr in _LAUNCHERS:
        if r in env and w in env:
            return DistInfo(int(env[r]), int(env[w]), int(env.get(lr, 0)), launcher=r)
    return DistInfo()


_LOCAL_RANKS = ("LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_TASKS_PER_NODE")


def ranks_on_this_node(env=os.environ) -> int:
    """Processes of this job on this node, from whichever launcher said so (1 if none did)."""
    for var in _LOCAL_RANKS:
        if var in env:
            return int(env[var].split("(")[0].split(",")[0])  # srun: "2(x3),1" -> this node's count first
    return 1


def cpu_threads(env=os.environ) -> int:
    """torch threads per process when several share a node: its cores split evenly. 0 = leave
    torch's default (one process per node). Oversubscribing (e.g. OMP_NUM_THREADS=2 for each of
    2 ranks on 2 cores) made OpenMP threads spin against each other: 10x slower steps here."""
    local = ranks_on_this_node(env)
    if local <= 1:
        return 0
    return max(1, len(os.sched_getaffinity(0)) // local)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def mpi_rendezvous(comm) -> tuple[str, str]:
    """(address, free port) of `comm`'s rank 0, broadcast to every rank of `comm`."""
    addr = (socket.gethostbyname(socket.gethostname()), str(_free_port())) if comm.rank == 0 else None
    return comm.bcast(addr, root=0)


def _rendezvous(info: DistInfo) -> tuple[str, str]:
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    if info.mpi:
        from mpi4py import MPI
        return mpi_rendezvous(MPI.COMM_WORLD)
    if "SLURM_JOB_NODELIST" in os.environ:
        first = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                               capture_output=True, text=True, check=True).stdout.split()[0]
        return first, str(20000 + int(os.environ.get("SLURM_JOB_ID", "0")) % 20000)
    return "127.0.0.1", "29500"


def init(info: DistInfo, device: str):
    """Join the process group (world > 1); returns torch.distributed, or None for one rank."""
    if info.world == 1:
        return None
    import torch.distributed as td

    addr, port = _rendezvous(info)
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=port)
    timeout = datetime.timedelta(seconds=float(os.environ.get("HARNESS_DIST_TIMEOUT", DEFAULT_TIMEOUT_S)))
    td.init_process_group("nccl" if device == "cuda" else "gloo", rank=info.rank,
                          world_size=info.world, timeout=timeout)
    return td


def shutdown(finished: bool = True) -> None:
    """Leave the process group while Python is still fully alive. A rank that reached interpreter
    exit with gloo's work threads still running (the process group freed by the final garbage
    collection) aborted ~1 run in 8 with "terminate called without an active exception": a
    thread that asks for the GIL during finalization is ended by pthread_exit, whose unwind
    through gloo's C++ frames calls std::terminate (seen in gdb: pt_gloo_runloop, main thread in
    Py_FinalizeEx). So: when the run finished, a barrier (every rank's pending collectives done,
    no rank leaves while a peer still talks to it), then destroy, then collect the freed groups now."""
    import gc

    import torch.distributed as td
    if not (td.is_available() and td.is_initialized()):
        return
    if finished:  # a failed rank skips it: its peers may be dead or hung
        try:
            td.barrier()
        except Exception:  # noqa: BLE001 - a peer gone at teardown changes nothing recorded
            pass
    td.destroy_process_group()
    gc.collect()


def node_count(info: DistInfo) -> int:
    """Distinct hosts among the ranks."""
    if info.world == 1:
        return 1
    import torch.distributed as td
    names: list = [None] * info.world
    td.all_gather_object(names, socket.gethostname())
    return len(set(names))


def step_stats(info: DistInfo, loss: float, step_s: float, data_s: float,
               holds_loss: bool = True) -> tuple[float, list[float], list[float]]:
    """(loss of the global batch = mean over the ranks that hold one (with a pipeline, the last
    stage's), every rank's step time, every rank's data wait). One small all_gather per step,
    outside the timed region."""
    if info.world == 1:
        return loss, [step_s], [data_s]
    import torch
    import torch.distributed as td
    mine = torch.tensor([loss if holds_loss else 0.0, float(holds_loss), step_s, data_s], dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(info.world)]
    td.all_gather(every, mine)
    rows = torch.stack(every).tolist()
    n = sum(r[1] for r in rows)
    return sum(r[0] for r in rows if r[1]) / n, [r[2] for r in rows], [r[3] for r in rows]


def sum_across_ranks(info: DistInfo, sums: dict[str, float]) -> dict[str, float]:
    """Exact reduction of a workload's quality sums (each rank evaluated disjoint samples)."""
    if info.world == 1:
        return sums
    import torch
    import torch.distributed as td
    every: list = [None] * info.world  # the keys first: a pipeline's middle stages have no sums
    td.all_gather_object(every, sorted(sums))
    keys = sorted({k for ks in every for k in ks})
    t = torch.tensor([sums.get(k, 0.0) for k in keys], dtype=torch.float64)
    td.all_reduce(t)
    return dict(zip(keys, t.tolist()))


def average_bn_stats(info: DistInfo, model) -> None:
    """Average BatchNorm running statistics across ranks before validation, as the DeepCAM
    reference does (utils/bnstats.py), so every rank evaluates the same model."""
    if info.world == 1:
        return
    import torch
    import torch.distributed as td
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            for buf in (m.running_mean, m.running_var):
                td.all_reduce(buf)
                buf.div_(info.world)


def mpiexec() -> str:
    """The mpiexec to launch ranks with, defined once: the one beside this interpreter (the mpich
    wheel's, in the venv), else the one on PATH."""
    import sys
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else (shutil.which("mpiexec") or "mpiexec")


PEER_LOST = ("remote worker", "Connection closed")  # gloo's words when a peer died or hung


def peer_lost(reason: str) -> bool:
    """Whether a collective's error says another rank is gone (not a fault of this rank's)."""
    return any(m in reason for m in PEER_LOST)
