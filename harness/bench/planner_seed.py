"""`make perf` planner_seed (not a test): utilization as the seed counts it, measured on two
devices of each kind. harness/bench/planner.py checks one rank per kind, where a kind's
homogeneous job is one device with no communication and no bubble, so the mixed job can never
reach HETHUB's bound (arXiv 2405.16256: each kind's own homogeneous cluster, with its own best
plan). Here each kind has two ranks held to the same CPU quota (0.5 CPU, and 0.5 / ratio), so its
homogeneous job has an all-reduce or a pipeline too, and the ratio asks only what mixing costs.

Two inventories of the same four ranks, LM small, 1 thread a rank, under mpiexec:
- memory to spare: data parallel, the mixed job over all four ranks against each kind's pair;
- a replica too big for one device (memory_gb set between half a model's needs and a whole
  one's, from the measured profile): pipelines, the mixed job (2 replicas of a fast and a slow
  stage) against each kind's own 2-stage pipeline.

Each homogeneous job is what `harness plan` chooses for that kind alone (its two devices, half
the global batch) and is run as planned; the mixed job is run as planned. Each side in separate
launches, `rounds` times, alternating; step = the harness's median steady step of the slowest
rank. Links and profiles are measured on the four ranks as the jobs hold them."""
from __future__ import annotations

import math
import os
import statistics
import tempfile
from pathlib import Path

from harness.bench.launch import run_harness
from harness.bench.planner import SIZE, _dataset, _plan, _run
from harness.parallel import cpu_quota as rank_cpu

FAST = 0.5  # CPUs a fast rank gets: four ranks on this 2-core machine


def _runnable(p: dict, cpu: dict[str, float]) -> tuple[list[str], list[float]]:
    """A plan as the harness's --set overrides and each rank's CPU quota, in mesh order."""
    if p["strategy"] == "dp":
        return [f"parallel.batch_split={','.join(map(str, p['batch_split']))}"], [cpu[k] for k in p["devices"]]
    ranks = len(p["devices"])  # the mesh is (pp, dp): rank r runs stage r // replicas
    return ([f"parallel.pp={len(p['pp_split'])}", f"parallel.microbatches={p['microbatches']}",
             f"parallel.pp_split={','.join(map(str, p['pp_split']))}"],
            [cpu[p["stage_order"][r // p["replicas"]]] for r in range(ranks)])


def _inventory(path: Path, kinds: dict[str, float], profiles: dict[str, Path], memory_gb: float,
               only: str | None = None) -> Path:
    path.write_text("devices:\n" + "".join(
        f"  - {{kind: {k}, count: 2, memory_gb: {memory_gb:.6g}, profile: {profiles[k]}}}\n"
        for k in kinds if only in (None, k)) + "links: {collectives: measured, backend: gloo}\n")
    return path


def _split_memory_gb(profile: Path) -> float:
    """Memory that holds half the model's stages with two microbatches in flight but not a whole
    replica with one sample: halfway between the two needs (layer_costs of the profile)."""
    from results.planner.layer_costs import from_profile
    c = from_profile("x", profile)
    whole = c.total_params * c.state_bytes_per_param + c.replica_bytes_per_sample()
    half_blocks = math.ceil(c.n_blocks / 2)
    half = ((half_blocks * c.params["block"] + max(c.params["embedding"], c.params["head"])) * c.state_bytes_per_param
            + 2 * (half_blocks * c.saved("block", 1) + max(c.saved("embedding", 1), c.saved("head", 1))))
    return (half + whole) / 2 / 1e9


def planner_seed_bench(ratio: float = 2.0, batch: int = 24, rounds: int = 2) -> dict:
    reason = rank_cpu.unavailable()
    if reason:
        return {"skipped": reason}
    slow = FAST / ratio
    kinds = {f"cpu{FAST:g}": FAST, f"cpu{slow:g}": slow}
    out: dict = {"workload": f"lm/{SIZE}", "ranks_per_kind": 2, "cpus": kinds, "global_batch": batch, "checks": {}}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        env = {**os.environ, "HARNESS_RESULTS": str(tmp)}
        env.pop("MLFLOW_TRACKING_URI", None)
        data_dir = _dataset(tmp)
        held = {**env, rank_cpu.ENV: f"{FAST},{FAST},{slow},{slow}"}
        run_harness(held, 4, "comm", "--collectives", "all_reduce,send_recv", "--backends", "gloo", "-e", "64M",
                    "-n", "5", "--no-ingest")
        run_harness(held, 4, "profile", "lm", "--size", SIZE, "--microbatches", "1,2,4,8,12", "--repeats", "3",
                    "--threads", "1", "--cell-s", "1.0")
        profiles = {k: max((tmp / "profiles").glob(f"profile-lm-{SIZE}-cpus{c:g}-r{0 if c == FAST else 2}-*"))
                    for k, c in kinds.items()}
        split_gb = min(_split_memory_gb(p) for p in profiles.values())
        for shape, memory_gb, strategy in (("dp", 4.0, "dp"), ("pp", split_gb, "pp")):
            mixed = _plan(env, _inventory(tmp / f"inv-{shape}.yaml", kinds, profiles, memory_gb), batch, strategy)
            alone = {k: _plan(env, _inventory(tmp / f"inv-{shape}-{k}.yaml", kinds, profiles, memory_gb, only=k),
                              batch // 2, "auto") for k in kinds}
            steps: dict[str, list[float]] = {"mixed": [], **{k: [] for k in kinds}}
            for _ in range(rounds):  # alternate launches: drift between rounds hits every job alike
                for name, p, b in (("mixed", mixed, batch), *((k, alone[k], batch // 2) for k in kinds)):
                    sets, cpus = _runnable(p, kinds)
                    steps[name].append(_run(env, tmp, data_dir, cpus, b, sets)["median_step_s"])
            med = {n: statistics.median(v) for n, v in steps.items()}
            bound = sum((batch // 2) / med[k] for k in kinds)
            out["checks"][shape] = {
                "memory_gb": round(memory_gb, 4), "mixed_plan": _label(mixed), "mixed_steps_s": steps["mixed"],
                "homogeneous": {k: {"plan": _label(alone[k]), "steps_s": steps[k],
                                    "predicted_step_s": round(alone[k]["predicted"]["step_s"], 4),
                                    "error": round(alone[k]["predicted"]["step_s"] / med[k] - 1, 4)} for k in kinds},
                "predicted_step_s": round(mixed["predicted"]["step_s"], 4),
                "error": round(mixed["predicted"]["step_s"] / med["mixed"] - 1, 4),
                "utilization_seed_measured": round(batch / med["mixed"] / bound, 4),
                "utilization_seed_predicted": mixed["predicted"].get("utilization_seed"),
                "planner_homogeneous": mixed.get("homogeneous")}
            print(f"planner_seed {shape}: seed utilization {out['checks'][shape]['utilization_seed_measured']:.3f} "
                  f"measured, {mixed['predicted'].get('utilization_seed') or float('nan'):.3f} predicted", flush=True)
    out["targets"] = {"seed_utilization_at_least_0.95": all(c["utilization_seed_measured"] >= 0.95
                                                            for c in out["checks"].values()),
                      "prediction_within_5pct": all(abs(c["error"]) <= 0.05 for c in out["checks"].values())}
    return out


def _label(p: dict) -> str:
    from results.planner.labels import label
    return label(p) + (f" {p['pp_split']} M={p['microbatches']}" if p["strategy"] == "pp" else f" {p['batch_split']}")
