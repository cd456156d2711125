"""One collective at one size, on one backend: its buffers, the call, and the check of its
output (nccl-tests' -c). Used by harness/comm/bench.py.

Backends: torch.distributed over gloo (CPU tensors) or NCCL (CUDA tensors), and MPI through
mpi4py's buffer calls on the same memory (numpy views of the CPU tensors, no copies).

Check data: rank r's input element i is ((r + i) mod 8) + 1, so every sum over up to 32 ranks
is an integer below 256, exact in float32, bfloat16 and float16: a check compares exactly.
Modes: "oop" (separate send and receive buffers) and "ip" (in place, the result overwrites the
input), where the API has them: torch's all_reduce, broadcast and reduce exist only in place,
all_to_all and send/recv only out of place (NCCL's in-place all_to_all is not supported either).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
MODES_TORCH = {"all_reduce": ("ip",), "reduce_scatter": ("oop", "ip"), "all_gather": ("oop", "ip"),
               "all_to_all": ("oop",), "broadcast": ("ip",), "reduce": ("ip",), "send_recv": ("oop",)}
MODES_MPI = {"all_reduce": ("oop", "ip"), "reduce_scatter": ("oop", "ip"), "all_gather": ("oop", "ip"),
             "all_to_all": ("oop",), "broadcast": ("ip",), "reduce": ("oop", "ip"), "send_recv": ("oop",)}
REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")
CHUNKED = ("reduce_scatter", "all_gather", "all_to_all")  # the array is n chunks, one per rank
ROOT = 0


def modes(backend: str, collective: str) -> tuple[str, ...]:
    return (MODES_MPI if backend == "mpi" else MODES_TORCH)[collective]


def unsupported(backend: str, collective: str, dtype: str) -> str:
    """Why this backend cannot run this collective in this dtype here ('' when it can)."""
    if backend == "mpi" and dtype != "float32" and collective in REDUCTIONS:
        return f"MPI has no {dtype} datatype to reduce in (mpi4py maps none), so MPI {collective} runs in float32 only"
    return ""


def pattern(rank: int, start: int, count: int, dtype: torch.dtype) -> torch.Tensor:
    """Elements start .. start+count-1 of rank's check data."""
    return ((torch.arange(start, start + count, dtype=torch.int64) + rank) % 8 + 1).to(dtype)


def elements(collective: str, nbytes: int, elem: int, n: int) -> int:
    """Elements of the whole array S for a requested size, as nccl-tests rounds it (chunked
    collectives: a whole number of elements per rank); 0 when the size is below that."""
    count = nbytes // elem
    return (count // n) * n if collective in CHUNKED else count


@dataclass
class Case:
    """Buffers of one (collective, size, mode) on this rank. run() issues the collective once and
    returns when it is complete; init() loads the check data; wrong() counts the elements of the
    result that differ from the expected values."""
    run: Callable[[], None]
    init: Callable[[], None]
    wrong: Callable[[], int]


def make(backend: str, collective: str, count: int, dtype: str, mode: str, rank: int, n: int,
         device: torch.device, group=None, comm=None, via: str = "direct") -> Case:
    """One collective's buffers, its call and its check. via="host": the buffers live on `device`
    and each call relays through host copies (see harness/comm/bench.py); the check reads the
    device buffers, so a relay that loses or misplaces data fails it."""
    dt = DTYPES[dtype]
    c = count // n  # elements per rank's chunk (chunked collectives)
    big = torch.empty(count, dtype=dt, device=device)
    small = torch.empty(c if collective in CHUNKED else count, dtype=dt, device=device)
    full = lambda r: pattern(r, 0, count, dt)  # noqa: E731 - rank r's whole input
    inp, out = _views(backend, collective, mode, big, small, rank, c)

    def init():
        if collective == "all_gather":
            inp.copy_(pattern(rank, 0, c, dt))  # each rank contributes its chunk
        else:
            inp.copy_(full(rank))

    def expected() -> torch.Tensor:
        if collective in ("all_reduce", "reduce"):
            return sum(full(r) for r in range(n)).to(dt)
        if collective == "reduce_scatter":
            return sum(pattern(r, rank * c, c, dt) for r in range(n)).to(dt)
        if collective == "all_gather":
            return torch.cat([pattern(r, 0, c, dt) for r in range(n)])
        if collective == "all_to_all":  # chunk `rank` of every rank's input, in rank order
            return torch.cat([pattern(r, rank * c, c, dt) for r in range(n)])
        if collective == "broadcast":
            return full(ROOT)
        return full((rank - 1) % n)  # send_recv: from the left neighbour

    def wrong() -> int:
        if collective == "reduce" and rank != ROOT:
            return 0  # only the root holds a result
        return int((out.cpu() != expected()).sum())

    if via == "host":
        pin = device.type == "cuda"  # page-locked host buffers: the copies run at the link's speed
        big_h = torch.empty(count, dtype=dt, pin_memory=pin)
        small_h = torch.empty(small.numel(), dtype=dt, pin_memory=pin)
        inp_h, out_h = _views(backend, collective, mode, big_h, small_h, rank, c)  # aliased as the device's
        host = (_mpi_call(comm, collective, mode, inp_h, out_h, rank, n) if backend == "mpi"
                else _torch_call(group, collective, mode, inp_h, out_h, rank, n, torch.device("cpu")))
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

        def run():
            inp_h.copy_(inp)   # device -> host
            sync()
            host()             # the collective between hosts
            out.copy_(out_h)   # host -> device
            sync()             # the call is complete when the result is back on the device
        return Case(run, init, wrong)
    run = (_mpi_call(comm, collective, mode, inp, out, rank, n) if backend == "mpi"
           else _torch_call(group, collective, mode, inp, out, rank, n, device))
    return Case(run, init, wrong)


def _views(backend: str, collective: str, mode: str, big, small, rank: int, c: int):
    """(input, output) views for each collective and mode; in place aliases them as the APIs define."""
    if collective in ("all_reduce", "broadcast", "reduce"):
        return (big, small) if mode == "oop" else (big, big)
    if collective == "reduce_scatter":  # in place: torch leaves the result in the rank's chunk,
        at = 0 if backend == "mpi" else rank * c  # MPI in the first chunk (MPI-3.1 §5.10.1)
        return (big, small) if mode == "oop" else (big, big[at:at + c])
    if collective == "all_gather":
        return (small, big) if mode == "oop" else (big[rank * c:(rank + 1) * c], big)
    return big, torch.empty_like(big)  # all_to_all, send_recv: separate buffers


def _torch_call(group, collective: str, mode: str, inp, out, rank: int, n: int, device) -> Callable[[], None]:
    import torch.distributed as td
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)  # NCCL is asynchronous

    def call():
        if collective == "all_reduce":
            td.all_reduce(inp, group=group)
        elif collective == "reduce_scatter":
            td.reduce_scatter_single(out, inp, group=group)
        elif collective == "all_gather":
            td.all_gather_single(out, inp, group=group)
        elif collective == "all_to_all":
            td.all_to_all_single(out, inp, group=group)
        elif collective == "broadcast":
            td.broadcast(inp, ROOT, group=group)
        elif collective == "reduce":
            td.reduce(inp, ROOT, group=group)
        else:  # the pipeline's pattern: send right, receive from the left, both in flight
            ops = [td.P2POp(td.isend, inp, (rank + 1) % n, group), td.P2POp(td.irecv, out, (rank - 1) % n, group)]
            for w in td.batch_isend_irecv(ops):
                w.wait()
        sync()  # device sync point: the call is complete when run() returns
    return call


def _np(t: torch.Tensor):
    """A numpy view of a CPU tensor for mpi4py (16-bit floats as raw 16-bit words: MPI only moves them)."""
    return (t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t).numpy()


def _mpi_call(comm, collective: str, mode: str, inp, out, rank: int, n: int) -> Callable[[], None]:
    from mpi4py import MPI
    i, o = _np(inp), _np(out)
    ip = mode == "ip"
    calls = {
        "all_reduce": lambda: comm.Allreduce(MPI.IN_PLACE, i) if ip else comm.Allreduce(i, o, op=MPI.SUM),
        "reduce_scatter": lambda: comm.Reduce_scatter_block(MPI.IN_PLACE, i) if ip else comm.Reduce_scatter_block(i, o),
        "all_gather": lambda: comm.Allgather(MPI.IN_PLACE, o) if ip else comm.Allgather(i, o),
        "all_to_all": lambda: comm.Alltoall(i, o),
        "broadcast": lambda: comm.Bcast(i, root=ROOT),
        "reduce": lambda: (comm.Reduce(MPI.IN_PLACE if rank == ROOT else i, i if rank == ROOT else None, root=ROOT)
                           if ip else comm.Reduce(i, o, op=MPI.SUM, root=ROOT)),
        "send_recv": lambda: comm.Sendrecv(i, dest=(rank + 1) % n, recvbuf=o, source=(rank - 1) % n),
    }
    return calls[collective]
