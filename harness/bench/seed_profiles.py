"""harness/bench/planner_seed.py's four ranks profiled and written into inventories, and the
plans of an interleaved check priced again from a profile taken just before it.

Why the last: the interleaved checks run the plans made from the first round's profiles, up to an
hour later. Inside them every job ran 2-13% slower than priced (2026-12-06 15:36 run, the later
checks the most: results/planner/seed_steps.py), all jobs of one check alike, as the machine's
drift between a profile and a run would make them. The separate launches pair each round with a
profile just before it for that reason (results/planner/evaluate.py); this does the same for each
interleaved check: the same plans (split, microbatches, stage order), fresh costs."""
from __future__ import annotations

from pathlib import Path

from harness.bench.planner_jobs import SIZE, predict, profile_ranks
from harness.bench.seed_inputs import profiled
from harness.parallel import cpu_quota as rank_cpu


def held(env: dict, kinds: dict[str, float]) -> dict:
    """env with two ranks of each kind held to its quota, kind by kind in `kinds`' order."""
    return {**env, rank_cpu.ENV: ",".join(f"{c:g}" for c in kinds.values() for _ in range(2))}


def inventory(path: Path, kinds: dict[str, float], profiles: dict[str, Path], memory_gb: float,
              only: str | None = None) -> Path:
    """Two devices of each kind (or of `only`); collectives among one kind's pair priced from the
    records measured on that pair (tmp/comm-<kind>: planner_seed._measure_kind_links), the rest
    from the four ranks'."""
    here = [k for k in kinds if only in (None, k)]
    own = ", ".join(f"{k}: {path.parent / f'comm-{k}'}" for k in here)
    path.write_text("devices:\n" + "".join(
        f"  - {{kind: {k}, count: 2, memory_gb: {memory_gb:.6g}, profile: {profiles[k]}}}\n" for k in here)
        + f"links: {{collectives: measured, backend: gloo, kinds: {{{own}}}}}\n")
    return path


def profile(held_env: dict, tmp: Path, kinds: dict[str, float], tag: int | str) -> dict[str, Path]:
    """All four ranks profiled at once into tmp/round<tag>, each held to its quota; each kind's
    record (its first rank's: ranks 2i and 2i + 1 are the i-th kind, as `held` holds them)."""
    ranks = profile_ranks(held_env, tmp / f"round{tag}", 4, "lm", SIZE)
    return {k: ranks[2 * i] for i, k in enumerate(kinds)}


def priced_now(env: dict, tmp: Path, kinds: dict[str, float], jobs: dict, memory_gb: float, tag: str) -> dict:
    """The four ranks profiled now (tmp/round<tag>; inventories tmp/inv<tag>-<job>.yaml), and each
    job's plan ({name: (plan, batch)}: "mixed" and each kind's own) priced with that profile,
    uncalibrated: {"steps_priced_now_s":
    {name: seconds, or None where evaluate cannot price the plan again (a "kinds" plan)},
    "profiled_now": the profile in brief}."""
    from results.planner.inventory import PlanError
    profiles = profile(held(env, kinds), tmp, kinds, tag)
    steps: dict[str, float | None] = {}
    for name, (p, _) in jobs.items():
        inv = inventory(tmp / f"inv{tag}-{name}.yaml", kinds, profiles, memory_gb,
                        only=None if name == "mixed" else name)
        try:
            steps[name] = round(predict(p, inv, tmp), 4)
        except PlanError:
            steps[name] = None
    return {"steps_priced_now_s": steps, "profiled_now": profiled(profiles)}
