"""`make gpu-check`: one short script for a lent GPU machine. NCCL all-reduce smoke test, then
the gpu-check sweep (CUDA Graphs, DALI on the GPU, compile, amp on CosmoFlow) and the
gpu-graphs sweep (CUDA Graphs on DeepCAM and the LM), each with its speedup table."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def nccl_smoke() -> str:
    import torch
    import torch.distributed as dist

    with tempfile.NamedTemporaryFile() as f:  # single-rank group: exercises NCCL init + a collective
        dist.init_process_group("nccl", init_method=f"file://{f.name}", rank=0, world_size=1)
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        ok = bool((t == 1).all())
        dist.destroy_process_group()
    return f"nccl all_reduce ok={ok} (torch NCCL {'.'.join(map(str, torch.cuda.nccl.version()))})"


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("gpu-check: error: needs a CUDA GPU; torch sees none on this machine", file=sys.stderr)
        return 2
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    print(nccl_smoke())
    from harness.experiments import sweep
    repeats = int(os.environ.get("REPEATS", "0"))
    return max(sweep.main(Path(__file__).resolve().parents[1] / "sweeps" / f"{name}.yaml", repeats=repeats)
               for name in ("gpu-check", "gpu-graphs"))


if __name__ == "__main__":
    raise SystemExit(main())
