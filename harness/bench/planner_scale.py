"""`make perf` planner_scale (not a test): how long the planner takes as the device count grows,
in-process on estimated costs (no run). 1,000 to 10,000 devices of three kinds (the what-if
inventory's H100 / Ascend 910B / MI250X mix) and the worst shape for a per-kind search: every
device its own kind. Each size planned with --strategy dp and with --strategy auto (data parallel and
pipelines of every depth, tensor and context parallel groups inside each kind's nodes, data
parallel over each kind's own job, and each kind's own best homogeneous job for the seed utilization).
Targets: 10,000 devices planned in under 5 s (dp; the split by trimming one sample at a time took
57 s for 10,000 devices and 223 s for 10,000 one-device kinds), and 10,000 devices of 3 kinds with
auto in under 10 s."""
from __future__ import annotations

import time

from harness.planning.plan import costs_for
from results.planner import inventory as inv_mod
from results.planner import search
from results.planner.links import LinkModel

# kind, memory GB, peak TFLOPS, devices per node, node busbw GB/s (three-vendor.yaml's figures)
KINDS = (("H100", 80, 969, 8, 370), ("Ascend-910B", 64, 256, 8, 150), ("MI250X", 128, 383, 4, 100))
TARGET_S = 5.0
AUTO_TARGET_S = 10.0


def _inventory(devices: int, one_kind_each: bool) -> inv_mod.Inventory:
    if one_kind_each:
        rows = [{"kind": f"k{i}", "count": 1, "memory_gb": 80, "peak_tflops": 100 + i % 900, "efficiency": 0.4}
                for i in range(devices)]
    else:
        share = [devices * 4 // 10, devices * 3 // 10]
        share.append(devices - sum(share))
        rows = [{"kind": k, "count": n, "memory_gb": m, "peak_tflops": p, "efficiency": 0.4, "node_size": node,
                 "node_busbw_gb_per_s": bw} for (k, m, p, node, bw), n in zip(KINDS, share)]
    return inv_mod.parse({"devices": rows, "links": {"busbw_gb_per_s": 25, "latency_us": 10}}, "planner_scale")


def planner_scale(sizes: tuple[int, ...] = (1_000, 3_000, 10_000), batch_per_device: int = 2) -> dict:
    out: dict = {"target": f"10,000 devices planned in < {TARGET_S:g} s (dp) and 10,000 of 3 kinds in < "
                           f"{AUTO_TARGET_S:g} s (auto); LM gpt2 shape, estimated costs"}
    for one_kind_each in (False, True):
        for n in sizes:
            inv = _inventory(n, one_kind_each)
            costs = costs_for(inv, "lm", "gpt2")
            for strategy in ("dp", "auto"):
                t0 = time.perf_counter()
                p = search.plan(inv, costs, LinkModel(inv.links, None), n * batch_per_device, strategy)
                took = time.perf_counter() - t0
                key = f"{n}_devices_{'one_kind_each' if one_kind_each else '3_kinds'}_{strategy}"
                out[key] = {"plan_s": took, "chosen": search.label(p), "predicted_step_s": p["predicted"]["step_s"],
                            "utilization": p["predicted"]["utilization"],
                            "utilization_seed": p["predicted"]["utilization_seed"]}
                print(f"planner_scale {key}: {took:.3f} s", flush=True)
    # the same 10,000 devices on the Llama-2-70B what-if shape: 80 blocks, so pipelines of every depth
    # up to 80 stages (and each kind's own homogeneous search) are in play, not 12
    inv = _inventory(max(sizes), False)
    costs = costs_for(inv, "lm", "llama2-70b")
    t0 = time.perf_counter()
    p = search.plan(inv, costs, LinkModel(inv.links, None), max(sizes) * batch_per_device, "auto")
    out[f"{max(sizes)}_devices_3_kinds_auto_llama2-70b"] = {
        "plan_s": time.perf_counter() - t0, "chosen": search.label(p), "predicted_step_s": p["predicted"]["step_s"],
        "utilization": p["predicted"]["utilization"], "utilization_seed": p["predicted"]["utilization_seed"]}
    print(f"planner_scale {max(sizes)}_devices_3_kinds_auto_llama2-70b: "
          f"{out[f'{max(sizes)}_devices_3_kinds_auto_llama2-70b']['plan_s']:.3f} s", flush=True)
    top = max(sizes)
    worst_dp = max(v["plan_s"] for k, v in out.items() if k.startswith(f"{top}_") and k.endswith("_dp"))
    out["meets_target"] = (worst_dp < TARGET_S and out[f"{top}_devices_3_kinds_auto"]["plan_s"] < AUTO_TARGET_S
                           and out[f"{top}_devices_3_kinds_auto_llama2-70b"]["plan_s"] < AUTO_TARGET_S)
    return out
