"""`make perf` tp_step: where a real tensor-parallel step's time goes, beyond the member's compute
and the collectives as `harness comm` times them alone. Not a test.

Why: group_shards measured a tp2 pair's step 19% over DDP's while the profiled member's compute
was an even half of the block; the planner (results/planner/within_stage.py) prices the rest as
the collectives on the links, alone, and predicted the pair 8-20% fast. This splits the gap.

On 2 ranks (mpiexec, gloo, one thread each), LM small, batch 8 (each tp rank runs the whole batch),
forward + backward of the whole model, in rounds where every case runs once back to back (the
order reversed every other round, so drift hits all alike):
- full: the unsplit model (what one device would do);
- shard: every block replaced by a tp2 member (capability tensor_parallel_shard, as profiled):
  the member's compute, no collective;
- sync: shard + an all-reduce of one float at each of Megatron's points (after attention and MLP
  forward, at their inputs' gradients backward: 4 per block): the ranks wait for each other there;
- by_hand: shard + the all-reduce of the activation (b s h fp32) at the same points: Megatron's
  collectives without DTensor;
- dtensor: the model as `parallel.tp=2` runs it (parallelize_module with the workload's plan);
- alone: the same 4L all-reduces of b s h, back to back (what the links are priced from).
Each case's time is the slower rank's. Paired per round: ratios with order-statistics intervals.

    python -m harness.bench.tp_step worker OUT.json ROUNDS    (per rank, under mpiexec)
"""
from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results.record.paths import REPO_ROOT

SIZE, BATCH, TP, WARMUP = "small", 8, 2, 2
CASES = ("full", "shard", "sync", "by_hand", "dtensor", "alone")


def _megatron_points(model, payload) -> None:
    """Hooks on each block's attention and MLP: an all-reduce of `payload(output)` after the
    forward (Megatron's g) and of the input's gradient before its backward (Megatron's f). The
    gradient's all-reduce is in place (the sum of the tp ranks' partial gradients)."""
    import torch
    import torch.distributed as td

    class _F(torch.autograd.Function):  # identity forward, all-reduce backward
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            g = g.contiguous()
            td.all_reduce(payload(g))
            return g

    for block in model.h:
        for mod in (block.attn, block.mlp):
            mod.register_forward_pre_hook(lambda m, args: (_F.apply(args[0]),))
            mod.register_forward_hook(lambda m, args, out: td.all_reduce(payload(out.detach())))


def _worker(out: str, rounds: int) -> None:
    import torch
    import torch.distributed as td
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    from harness.config import registry
    from harness.parallel import dist
    info = dist.from_env()
    dist.init(info, "cpu")
    torch.set_num_threads(dist.cpu_threads() or 1)
    wl = registry.get("lm")
    s = wl.sizes[SIZE]
    torch.manual_seed(0)
    full = wl.build_model(s)

    def sharded():
        m = copy.deepcopy(full)
        for i, b in enumerate(m.h):
            m.h[i] = wl.tensor_parallel_shard(b, TP)  # a member's shapes (rank 0's rows: the same work)
        return m

    one = torch.zeros(1)
    sync, by_hand = sharded(), sharded()
    _megatron_points(sync, lambda t: one)
    _megatron_points(by_hand, lambda t: t)
    dt = copy.deepcopy(full)
    parallelize_module(dt, init_device_mesh("cpu", (TP,), mesh_dim_names=("tp",)), wl.tensor_parallel_plan(dt, TP, False))
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, s.vocab, (BATCH, s.seq_len), generator=g)
    y = torch.randint(0, s.vocab, (BATCH, s.seq_len), generator=g)
    act = torch.zeros(BATCH * s.seq_len * s.d_model)

    def train(m):
        def go():
            wl.loss(m(x), y).backward()
            m.zero_grad(set_to_none=True)
        return go

    def alone():
        for _ in range(4 * s.n_layer):
            td.all_reduce(act)

    run = {"full": train(full), "shard": train(sharded()), "sync": train(sync), "by_hand": train(by_hand),
           "dtensor": train(dt), "alone": alone}
    times = {k: [] for k in CASES}
    for r in range(WARMUP + rounds):
        for k in (CASES if r % 2 == 0 else CASES[::-1]):
            td.barrier()  # every rank starts the case together
            t0 = time.perf_counter()
            run[k]()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            td.all_reduce(t, op=td.ReduceOp.MAX)  # the slower rank's time: the step waits for it
            if r >= WARMUP:
                times[k].append(float(t))
    if info.rank == 0:
        Path(out).write_text(json.dumps({"times": times, "threads": torch.get_num_threads(),
                                         "activation_bytes": act.numel() * 4, "n_layer": s.n_layer}))
    dist.shutdown()


def tp_step_bench(rounds: int = 16) -> dict:
    from harness.parallel.dist import mpiexec
    from results.stats import estimators
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "tp_step.json"
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        p = subprocess.run([mpiexec(), "-n", str(TP), sys.executable, "-m", "harness.bench.tp_step", "worker",
                            str(out), str(rounds)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=1800)
        if p.returncode:
            raise RuntimeError(f"tp_step worker failed: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
        m = json.loads(out.read_text())
    t = m["times"]
    med = {k: statistics.median(v) for k, v in t.items()}

    def paired(a: str, b: str) -> dict:  # round by round: a's time / b's
        r = estimators.paired_ratio(t[a], t[b])
        return {"ratio": round(r["ratio"], 4), "ci95": [round(r["ci_lo"], 4), round(r["ci_hi"], 4)],
                "method": r["method"]}

    def extra(a: str, b: str) -> float:  # seconds a adds over b, the median of the rounds' differences
        return round(statistics.median(x - y for x, y in zip(t[a], t[b])), 4)

    return {"model": f"lm {SIZE} b{BATCH}, tp{TP} on {TP} ranks (gloo), {m['threads']} thread(s) each, "
                     f"forward + backward, {4 * m['n_layer']} all-reduces of {m['activation_bytes'] / 1e6:.2f} MB a step",
            "median_s": {k: round(v, 4) for k, v in med.items()},
            "member_share": paired("shard", "full"),          # the profile's figure, here on 2 busy ranks
            "dtensor_over_full": paired("dtensor", "full"),
            "dtensor_over_member": paired("dtensor", "shard"),
            "split_s": {"waiting_at_the_collectives": extra("sync", "shard"),
                        "activation_transfer_in_step": extra("by_hand", "sync"),
                        "dtensor_over_by_hand": extra("dtensor", "by_hand"),
                        "collectives_alone": round(med["alone"], 4)},
            "in_step_over_alone": round((med["by_hand"] - med["shard"]) / med["alone"], 3),
            "raw_s": t, "rounds": len(t["full"]),
            "note": "the planner prices a member as its compute + the collectives alone (results/planner/"
                    "within_stage.py): in_step_over_alone says how far the step's collectives are from that"}


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        _worker(sys.argv[2], int(sys.argv[3]))
    else:
        print(json.dumps({k: v for k, v in tp_step_bench().items() if k != "raw_s"}, indent=1))
