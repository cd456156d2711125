"""`make perf` quota_gap: what a wait is worth to a rank held to a CPU quota, measured, beside the
pipeline simulator's model of it (results/analysis/schedule.quota_credit).

Why: the planner checks run ranks made unequal by cgroup v1 CPU quotas (harness/parallel/cpu_quota.py),
and a pipeline stage waits between its operations. CFS bandwidth control hands a group its quota
anew each period and counts only what it runs, so a rank that waited runs unheld afterwards until
the period's quota is spent: the wait cost less than its length. Priced without it, each kind's own
2-stage pipeline came out 7-10% slow in three of ten probed checks (docs/planner-measured.md,
2026-12-07), where data parallel, which does not wait between operations, was within 3%.

One process at a time, in a group of its own at each quota (Quota, the harness's 10 ms period): a
pure-Python busy loop of `segment` CPU seconds (time.thread_time) after an idle wait (time.sleep),
repeated; the wall time of each segment against segment / cpus (a steady quota's rate). No torch
and no threads: what is measured is the kernel's throttling, not the model's compute.

    python -m harness.bench.quota_gap worker CPUS    (one quota, figures as JSON on stdout)
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

GAPS_MS = (0.0, 1.0, 3.0, 5.0, 7.5, 10.0, 20.0, 50.0)
SEGMENTS_MS = (30.0, 100.0)
REPEATS = 15  # segments a point: the effect is the kernel's arithmetic, steady to ~0.3 ms


def _busy(cpu_s: float) -> None:
    t0 = time.thread_time()
    while time.thread_time() - t0 < cpu_s:
        for _ in range(200):
            pass


def worker(cpus: float) -> dict:
    """This process held to `cpus`: each (segment, gap) point's mean wall per segment, in ms."""
    from harness.parallel.cpu_quota import PERIOD_US, Quota
    from results.analysis.schedule import quota_credit
    period_s = PERIOD_US / 1e6
    held = Quota(cpus)
    try:
        _busy(0.2)  # into the throttled rhythm before the first point
        points = []
        for seg in SEGMENTS_MS:
            for gap in GAPS_MS:
                walls = []
                for _ in range(REPEATS):
                    if gap:
                        time.sleep(gap / 1e3)
                    else:
                        _busy(0.002)  # no wait: the segment follows compute, as a steady step does
                    t0 = time.perf_counter()
                    _busy(seg / 1e3)
                    walls.append(time.perf_counter() - t0)
                steady = seg / 1e3 / cpus
                model = quota_credit(gap / 1e3, steady, period_s, 1 - cpus) if gap else 0.0
                points.append({"segment_ms": seg, "gap_ms": gap, "wall_ms": round(1e3 * statistics.fmean(walls), 3),
                               "steady_ms": round(1e3 * steady, 3),
                               "saved_ms": round(1e3 * (steady - statistics.fmean(walls)), 3),
                               "model_saved_ms": round(1e3 * model, 3)})
        return {"cpus": cpus, "period_ms": period_s * 1e3, "throttled": held.throttled(), "points": points}
    finally:
        held.release()


def quota_gap_bench(quotas: tuple[float, ...] = (0.5, 0.25)) -> dict:
    from harness.parallel.cpu_quota import unavailable
    reason = unavailable()
    if reason:
        return {"skipped": reason}
    out: dict = {"how": __doc__.split("\n\n")[2].replace("\n", " "), "by_quota": []}
    for cpus in quotas:
        p = subprocess.run([sys.executable, "-m", "harness.bench.quota_gap", "worker", str(cpus)],
                           capture_output=True, text=True, timeout=600)
        if p.returncode:
            raise RuntimeError(f"quota_gap worker failed: {(p.stderr.strip().splitlines() or ['no output'])[-1]}")
        got = json.loads(p.stdout)
        off = [abs(x["saved_ms"] - x["model_saved_ms"]) for x in got["points"]]
        got["model_error_ms"] = {"max": round(max(off), 3), "median": round(statistics.median(off), 3)}
        out["by_quota"].append(got)
        for x in got["points"]:
            print(f"quota_gap {cpus} CPU: {x['segment_ms']:g} ms of compute after a {x['gap_ms']:g} ms wait: "
                  f"{x['saved_ms']:.2f} ms under the steady rate, the model {x['model_saved_ms']:.2f}", flush=True)
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        print(json.dumps(worker(float(sys.argv[2]))))
    else:
        print(json.dumps(quota_gap_bench(), indent=1))
