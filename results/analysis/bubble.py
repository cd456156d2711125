"""The pipeline bubble: measured from a run's schedule events, beside the theory and beside what
the measured stage times alone predict. Pure (no torch); the harness, `make perf` and the
portal read it.

Events: one per forward (F), backward (B) and loss (L) of a microbatch on a stage, wall-clock
start t0 and end t1 in seconds (harness/parallel/pipeline.py). Per step, the window is the pipeline's
makespan: from the first event's start to the last event's end over all stages (the optimizer
step and the data wait around it are not pipeline time). A stage's bubble is the share of the
window it was not computing: 1 - busy / window.

Theory (../shared/reference/parallelism.md §1; GPipe, Megatron-LM's interleaved schedule): with
p ranks, m microbatches and equal stages the idle share is (p-1)/(m+p-1) for GPipe and 1F1B,
and (p-1)/(v*m+p-1) with v stages per rank (interleaved 1F1B).

Predicted from measured stage times: the same schedules with each stage's own median forward
f_s and backward b_s per microbatch (first and last stages are heavier: embedding, head and
loss) and free send/recv. GPipe: makespan = sum f_s + (m-1) max f_s + sum b_s + (m-1) max b_s;
1F1B: sum (f_s+b_s) + (m-1) max (f_s+b_s). What the measured window has beyond that is
send/recv and the schedule's own overhead.

Replayed: the step's own events, every duration as measured, each rank in the order it ran,
waiting only for data dependencies, with free send/recv (replay_window). Its makespan holds
unequal stages and microbatch-to-microbatch variation; the measured window beyond it is
communication and schedule overhead, measured rather than inferred.
"""
from __future__ import annotations

from collections import defaultdict
from statistics import mean, median

from results.analysis import schedule as step_sim


def theory(p: int, m: int, v: int = 1) -> float:
    """Idle share of a step with equal stages: (p-1)/(v*m+p-1)."""
    return (p - 1) / (v * m + p - 1)


def _per_stage_times(events: list[dict]) -> dict[int, dict[str, float]]:
    """Median seconds per microbatch of each stage's forward (its loss included) and backward;
    where every event carries its CPU seconds (harness/parallel/pipeline.Clock), the same in CPU
    seconds beside them (fwd_cpu_s, bwd_cpu_s)."""
    out = _medians(events, lambda e: e["t1"] - e["t0"], "")
    if events and all("cpu_s" in e for e in events):
        for s, t in _medians(events, lambda e: e["cpu_s"], "_cpu").items():
            out[s].update(t)
    return out


def _medians(events: list[dict], seconds, tag: str) -> dict[int, dict[str, float]]:
    fwd: dict[int, dict[tuple, float]] = defaultdict(lambda: defaultdict(float))
    bwd: dict[int, list[float]] = defaultdict(list)
    loss: dict[int, list[float]] = defaultdict(list)
    for e in events:
        d = seconds(e)
        if e["kind"] == "B":
            bwd[e["stage"]].append(d)
        elif e["kind"] == "F":
            fwd[e["stage"]][(e["step"], e["mb"])] += d
        else:
            loss[e["stage"]].append(d)
    out = {}
    for s in sorted(set(fwd) | set(bwd)):
        f = median(fwd[s].values()) if fwd[s] else 0.0
        out[s] = {f"fwd{tag}_s": f + (median(loss[s]) if loss[s] else 0.0),
                  f"bwd{tag}_s": median(bwd[s]) if bwd[s] else 0.0}
    return out


def predicted_makespan(schedule: str, m: int, times: dict[int, dict[str, float]]) -> float | None:
    """Seconds per step the schedule takes with these stage times and free communication
    (one stage per rank; None for interleaved schedules): the planner's event simulation
    (results/analysis/schedule.py). Closed forms hold only in part: GPipe's sum(f) + (m-1) max(f) +
    sum(b) + (m-1) max(b) is exact, 1F1B's sum(f+b) + (m-1) max(f+b) overestimates a pipeline
    whose slowest stage is not at an end."""
    if schedule not in step_sim.SCHEDULES or not times:
        return None
    return step_sim.simulate(schedule, [step_sim.StageCost(t["fwd_s"], t["bwd_s"]) for _, t in sorted(times.items())],
                             m)["pipeline_s"]


def replay_window(evs: list[dict], n_stages: int) -> float:
    """One step replayed with its own measured durations and free communication: every rank
    runs its events in the order it ran them, each waiting only for its data dependencies
    (forward of microbatch i on stage s after stage s-1's; the loss after the last forward;
    backward on stage s after stage s+1's, the last stage's after its loss). The makespan this
    gives includes unequal stages and microbatch-to-microbatch variation; the measured window
    beyond it is time spent in send/recv and the schedule's own work."""
    by_rank: dict[int, list[dict]] = defaultdict(list)
    for e in sorted(evs, key=lambda e: e["t0"]):
        by_rank[e["rank"]].append(e)
    last, has_loss = n_stages - 1, any(e["kind"] == "L" for e in evs)
    workers: dict[int, list[step_sim.Op]] = {}
    for r, ops in by_rank.items():
        seq, losses = [], 0
        for e in ops:
            s, i, d = e["stage"], e["mb"], e["t1"] - e["t0"]
            if e["kind"] == "L":  # the i-th loss a rank runs is microbatch i's
                seq.append(step_sim.Op(("L", s, losses), d, ("F", s, losses)))
                losses += 1
            elif e["kind"] == "F":
                seq.append(step_sim.Op(("F", s, i), d, ("F", s - 1, i) if s > 0 else None))
            else:
                seq.append(step_sim.Op(("B", s, i), d, ("B", s + 1, i) if s < last else ("L" if has_loss else "F", s, i)))
        workers[r] = seq
    try:
        _, finish = step_sim.run_events(workers)
    except step_sim.Deadlock:
        return float("nan")  # an order the replay cannot follow (should not happen: it ran)
    return max(finish.values())


def analyse(built: dict, events: list[dict]) -> dict:
    """The schedule record: what was built, every event, and per step and stage the window,
    busy time and bubble; their means over the steps beside the theory and the prediction."""
    by_step: dict[int, list[dict]] = defaultdict(list)
    for e in events:
        by_step[e["step"]].append(e)
    steps = []
    for step in sorted(by_step):
        evs = by_step[step]
        t0, t1 = min(e["t0"] for e in evs), max(e["t1"] for e in evs)
        window = t1 - t0
        busy: dict[int, float] = defaultdict(float)
        for e in evs:
            busy[e["stage"]] += e["t1"] - e["t0"]
        # a rank's bubble: its stages share its time (interleaved: v stages per rank)
        rank_busy: dict[int, float] = defaultdict(float)
        for e in evs:
            rank_busy[e["rank"]] += e["t1"] - e["t0"]
        replay = replay_window(evs, built["stages"])
        steps.append({"step": step, "start": t0, "window_s": window, "replay_window_s": replay,
                      "bubble_replay_by_rank": {str(r): 1 - b / replay for r, b in sorted(rank_busy.items())},
                      "busy_s": {str(s): b for s, b in sorted(busy.items())},
                      "bubble_by_rank": {str(r): 1 - b / window for r, b in sorted(rank_busy.items())}})
    p, m, v = built["pp"], built["microbatches"], built["virtual"]
    times = _per_stage_times(events)
    pred = predicted_makespan(built["schedule"], m, times)
    measured = mean(mean(s["bubble_by_rank"].values()) for s in steps) if steps else None
    window = median(s["window_s"] for s in steps) if steps else None
    out = {**built, "events": [dict(e) for e in events], "steps": steps, "stage_times": {str(k): v for k, v in times.items()},
           "bubble_measured": measured, "bubble_theory": theory(p, m, v), "window_s": window}
    if steps:
        out["bubble_replay"] = mean(mean(s["bubble_replay_by_rank"].values()) for s in steps)
        out["comm_overhead_s"] = median(s["window_s"] - s["replay_window_s"] for s in steps)
    if pred is not None and steps:
        per_stage_busy = [m * (t["fwd_s"] + t["bwd_s"]) for t in times.values()]
        out["bubble_predicted"] = mean(1 - b / pred for b in per_stage_busy)
        out["predicted_window_s"] = pred
        out["unexplained_s"] = window - pred  # send/recv and schedule overhead per step
    return out


def summary_figures(rec: dict) -> dict[str, float]:
    """Flat figures of an analyse() for the run summary and MLflow."""
    out = {"pp_bubble": rec["bubble_measured"], "pp_bubble_theory": rec["bubble_theory"],
           "pp_window_s": rec["window_s"]}
    for key, name in (("bubble_predicted", "pp_bubble_predicted"), ("predicted_window_s", "pp_predicted_window_s"),
                      ("unexplained_s", "pp_unexplained_s"), ("bubble_replay", "pp_bubble_replay"),
                      ("comm_overhead_s", "pp_comm_overhead_s")):
        if key in rec:
            out[name] = rec[key]
    return {k: float(v) for k, v in out.items() if v is not None}


def timeline(rec: dict, step: int | None = None) -> list[dict]:
    """One step's events as rows for a timeline chart: stage, kind, microbatch, start and end
    in ms from the step's start. The median-window step unless `step` is given."""
    steps = rec.get("steps") or []
    if not steps:
        return []
    if step is None:
        step = sorted(steps, key=lambda s: s["window_s"])[len(steps) // 2]["step"]
    start = next(s["start"] for s in steps if s["step"] == step)
    return [{"stage": e["stage"], "rank": e["rank"], "kind": e["kind"], "mb": e["mb"],
             "start_ms": 1000 * (e["t0"] - start), "end_ms": 1000 * (e["t1"] - start)}
            for e in rec["events"] if e["step"] == step]


def balanced_split(split: list[int], times: dict[str, dict[str, float]]) -> dict:
    """The split that balances measured stage times, from one run's stage_times under `split`.
    A stage costs n_s blocks x beta plus its extras: the first stage's embedding (a gather:
    taken as 0) and the last stage's final LayerNorm, head and loss. beta comes from the
    stages without extras (the middle ones), else from the first stage; the last stage's
    extra is what its time leaves beyond its blocks. Every split into the same number of
    non-empty stages is then costed and the one with the lowest maximum stage time returned,
    with the costs the model predicts (seconds per microbatch, forward + backward). The search
    is the planner's own (results/analysis/schedule.min_max_split)."""
    t = [times[str(s)]["fwd_s"] + times[str(s)]["bwd_s"] for s in range(len(split))]
    middle = [(t[s], split[s]) for s in range(1, len(split) - 1)]
    beta = sum(x for x, _ in middle) / sum(n for _, n in middle) if middle else t[0] / split[0]
    head = max(0.0, t[-1] - split[-1] * beta)
    n, k = sum(split), len(split)

    def cost(sp):
        return [b * beta + (head if i == k - 1 else 0.0) for i, b in enumerate(sp)]
    best = step_sim.min_max_split(n, k, lambda part, blocks: blocks * beta + (head if part == k - 1 else 0.0))
    return {"split": best, "block_s": beta, "last_stage_extra_s": head,
            "predicted_stage_s": cost(best), "predicted_stage_s_as_run": cost(split)}


def bubble_table(df):
    """One row per finished pipeline run of a runs frame (results.load_runs): its schedule,
    microbatches, the measured bubble beside the theory and the stage-time prediction."""
    import pandas as pd
    if df.empty or "pp_bubble" not in df:
        return pd.DataFrame()
    runs = df[df["pp_bubble"].notna() & (df["status"] == "finished")]
    if runs.empty:
        return pd.DataFrame()

    def num(col, default):
        return pd.to_numeric(runs[col], errors="coerce").fillna(default) if col in runs else default
    out = pd.DataFrame({
        "run_id": runs["run_id"], "workload": runs["workload"], "size": runs["size"], "device": runs["device"],
        "config": runs["config"] if "config" in runs else "", "schedule": runs.get("parallel.pp_schedule", "1f1b"),
        "pp": num("parallel.pp", 1).astype(int), "virtual": num("parallel.pp_virtual", 1).astype(int),
        "microbatches": _microbatches(runs, num("parallel.microbatches", 4)).astype(int),
        "split": runs["parallel.pp_split"].fillna("even").replace({"": "even"}) if "parallel.pp_split" in runs else "even",
        "bubble_measured": runs["pp_bubble"], "bubble_theory": runs["pp_bubble_theory"],
        "bubble_predicted": runs.get("pp_bubble_predicted"),
        "unexplained_ms": 1000 * runs["pp_unexplained_s"] if "pp_unexplained_s" in runs else None,
        "bubble_replay": runs.get("pp_bubble_replay"),
        "comm_overhead_ms": 1000 * runs["pp_comm_overhead_s"] if "pp_comm_overhead_s" in runs else None,
        "window_ms": 1000 * runs["pp_window_s"], "record_dir": runs.get("record_dir")})
    return out.sort_values(["workload", "size", "schedule", "pp", "microbatches"]).reset_index(drop=True)


def _microbatches(runs, m):
    """Each run's M as its timeline ran it: unequal pipeline replicas (parallel.microbatch_split)
    record replica 0's schedule (harness/parallel/pipeline.report), so its entry, not `microbatches`."""
    import pandas as pd
    if "parallel.microbatch_split" not in runs:
        return m
    first = pd.to_numeric(runs["parallel.microbatch_split"].fillna("").astype(str).str.split(",").str[0],
                          errors="coerce")
    return first.fillna(m)


def verdict(r) -> str:
    """One line per pipeline run: measured bubble against theory, and what explains the gap."""
    line = (f"{r['config']}: bubble {r['bubble_measured']:.3f} measured vs {r['bubble_theory']:.3f} theory "
            f"((p-1)/(m+p-1), p={r['pp']}, m={r['microbatches']})")
    pred = r.get("bubble_predicted")
    if pred is not None and pred == pred:
        line += f"; {pred:.3f} from the median stage times (unequal stages {pred - r['bubble_theory']:+.3f})"
    replay = r.get("bubble_replay")
    if replay is not None and replay == replay:
        line += (f"; {replay:.3f} replaying every measured duration with free sends, "
                 f"{r['comm_overhead_ms']:.1f} ms per step beyond it (send/recv, schedule overhead)")
    return line
