"""`make perf` ddp_overlap: the simulator's model of DDP's overlap (results/analysis/schedule.Overlap)
against measured steps with and without overlap, on 2 ranks (mpiexec, gloo), LM small.

LM small at batch 1 a rank: its all-reduce (44 MB) is then a visible part of the step.
With overlap: DDP as the harness runs it (its buckets all-reduced during the backward). Without:
the same DDP model under no_sync(), then one all-reduce of all gradients after the backward. The
two alternate in blocks of steps in one pair of processes (A B B A ...), so drift hits both alike.
The same processes measure what the model needs: forward and backward times (no_sync steps),
DDP's own bucket sizes, and an all-reduce of each bucket's size and of all gradients. Predicted:
no overlap F + B + c(all); overlap overlapped_reduce_end(F, B, buckets, c). Reported with the
error of each prediction and the measured gain: unheld, and again with each rank held to 0.25 CPU
(HARNESS_RANK_CPU, where cgroup quotas can be set), where gloo's threads and the backward share
the quota (results/planner/inventory.Links.overlap: the planner's default for gloo rests on it).

    python -m harness.bench.ddp_overlap worker OUT.json    (per rank, under mpiexec)
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results.record.paths import REPO_ROOT

BLOCK_STEPS, ROUNDS, WARMUP = 4, 8, 3


def _worker(out: str, size: str = "small", batch: int = 1) -> None:
    from harness.parallel import dist
    from harness.parallel import cpu_quota
    info = dist.from_env()
    dist.init(info, "cpu")
    quota = cpu_quota.apply(info.rank, info.world)  # HARNESS_RANK_CPU, when the bench sets it
    try:
        _overlap_blocks(info, out, size, batch)
    finally:  # the rank's cgroup goes whatever the measurement did
        if quota:
            quota.release()
    dist.shutdown()


def _overlap_blocks(info, out: str, size: str, batch: int) -> None:
    """Overlap against no overlap in A B B A blocks on this rank; rank 0 writes the figures to `out`."""
    import torch
    import torch.distributed as td
    from torch.nn.parallel import DistributedDataParallel as DDP

    from harness.config import registry
    from harness.parallel import dist
    if dist.cpu_threads():
        torch.set_num_threads(dist.cpu_threads())
    wl = registry.get("lm")
    s = wl.sizes[size]
    torch.manual_seed(0)
    model = DDP(wl.build_model(s))
    g = torch.Generator().manual_seed(info.rank)
    x = torch.randint(0, s.vocab, (batch, s.seq_len), generator=g)
    y = torch.randint(0, s.vocab, (batch, s.seq_len), generator=g)
    params = [p for p in model.parameters() if p.requires_grad]

    def step(overlap: bool, parts: dict | None = None) -> float:
        td.barrier()  # both ranks start together: a step's time is the slower rank's
        t0 = time.perf_counter()
        if overlap:
            wl.loss(model(x), y).backward()  # DDP reduces its buckets as the backward fills them
        else:
            with model.no_sync():
                loss = wl.loss(model(x), y)
                t1 = time.perf_counter()
                loss.backward()
            t2 = time.perf_counter()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            td.all_reduce(flat)
            if parts is not None:
                parts["fwd"].append(t1 - t0)
                parts["bwd"].append(t2 - t1)
        dt = time.perf_counter() - t0
        for p in params:
            p.grad = None
        return dt

    for _ in range(WARMUP):
        step(True), step(False)
    times = {"overlap": [], "no_overlap": []}
    parts = {"fwd": [], "bwd": []}
    for r in range(ROUNDS):  # A B B A: each side first as often
        for side in (("overlap", "no_overlap") if r % 2 == 0 else ("no_overlap", "overlap")):
            for _ in range(BLOCK_STEPS):
                times[side].append(step(side == "overlap", parts if side == "no_overlap" else None))
    # what the model needs: DDP's buckets (bytes) and an all-reduce's time at each size
    # torch 2.13 puts every parameter in one bucket for the first iteration, then rebuilds the buckets
    # in the order the gradients became ready (1 MiB first, 25 MiB after): the warm-up steps did that
    data = model._get_ddp_logging_data()
    sizes = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes", ""))
    buckets = [int(b) for b in sizes.replace(" ", "").split(",") if b.isdigit()]
    total = sum(p.numel() * p.element_size() for p in params)

    def allreduce_s(nbytes: int, reps: int = 7) -> float:
        t = torch.empty(max(1, nbytes // 4))
        out = []
        for _ in range(reps):
            td.barrier()
            t0 = time.perf_counter()
            td.all_reduce(t)
            out.append(time.perf_counter() - t0)
        return statistics.median(out)

    comm = {str(b): allreduce_s(b) for b in sorted(set(buckets + [total]))}
    # the slower rank's forward and backward (the collective waits for it)
    fb = torch.tensor([statistics.median(parts["fwd"]), statistics.median(parts["bwd"])], dtype=torch.float64)
    td.all_reduce(fb, op=td.ReduceOp.MAX)
    if info.rank == 0:
        Path(out).write_text(json.dumps({"times": times, "fwd_s": float(fb[0]), "bwd_s": float(fb[1]),
                                         "buckets": buckets, "grad_bytes": total, "allreduce_s": comm,
                                         "threads": torch.get_num_threads(), "size": size, "batch": batch}))


def ddp_overlap_bench(ranks: int = 2, held_cpus: float = 0.25) -> dict:
    """Unheld (the top-level figures), then each rank held to `held_cpus` CPU ("held")."""
    from harness.parallel import cpu_quota
    out = _measure(ranks, None)
    reason = cpu_quota.unavailable()
    out["held"] = {"skipped": reason} if reason else _measure(ranks, held_cpus)
    return out


def _measure(ranks: int, cpus: float | None) -> dict:
    from harness.parallel import cpu_quota
    from harness.parallel.dist import mpiexec
    from results.analysis.schedule import Overlap, overlapped_reduce_end
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "overlap.json"
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        env.pop(cpu_quota.ENV, None)
        if cpus is not None:
            env[cpu_quota.ENV] = str(cpus)
        p = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, "-m", "harness.bench.ddp_overlap", "worker",
                            str(out)], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1800)
        if p.returncode:
            raise RuntimeError(f"ddp_overlap worker failed: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
        m = json.loads(out.read_text())
    c = {int(k): v for k, v in m["allreduce_s"].items()}
    F, B = m["fwd_s"], m["bwd_s"]
    no = F + B + c[m["grad_bytes"]]
    ov = overlapped_reduce_end(Overlap([F], [B], m["buckets"], lambda b: c[int(b)]))
    med = {k: statistics.median(v) for k, v in m["times"].items()}
    return {"model": f"lm {m['size']} b{m['batch']}, {ranks} ranks gloo, {m['threads']} thread(s) each"
                     + (f", each held to {cpus:g} CPU" if cpus is not None else ""),
            "measured_step_s": med, "predicted_step_s": {"overlap": ov, "no_overlap": no},
            "error": {"overlap": ov / med["overlap"] - 1, "no_overlap": no / med["no_overlap"] - 1},
            "measured_gain": med["no_overlap"] / med["overlap"], "predicted_gain": no / ov,
            "fwd_s": F, "bwd_s": B, "buckets_bytes": m["buckets"], "grad_bytes": m["grad_bytes"],
            "allreduce_s": m["allreduce_s"], "raw_step_s": m["times"],
            "note": "steps exclude the optimizer; both sides in the same processes, alternating blocks of "
                    f"{BLOCK_STEPS} steps (A B B A), {ROUNDS * BLOCK_STEPS} steps a side"}


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        _worker(sys.argv[2])
    else:
        print(json.dumps(ddp_overlap_bench(), indent=1))
