"""The layer profile's measurements, timed in rounds: every cell visited once a round, until each
cell's stop rule is met (harness/planning/profile.py's figures are read from these rows).

Why rounds: the planner prices a step from many cells (per layer kind, per microbatch, the
optimizer, the gradient copy), and what it needs is their costs *relative to each other*. Timed
one stretch after another, each cell met the machine in a different state: on a 0.25-CPU rank
the block's cost per sample came out 168, 173, 147, 147, 146 ms at microbatches 1-12 in one
profile and 151, 151, 153, 183, 152 in the next (2026-12-05), and the planner's choice between
data parallel and pipelines missed by 8-10%. Visited in rounds, every cell samples every stretch
of the profile, so drift moves them together; the order reverses each round (A B C, C B A) so a
trend within a round cancels over two, as the run engine's A B B A blocks do
(harness/run/interleave.py).

A visit runs passes for at least `visit_s` seconds (one pass, when a pass is longer) and its
sample is their mean: under a CPU quota a cheap pass either fits in the period's quota or waits
out the period, and the median of single passes is then the unthrottled time. On a 0.25-CPU rank
the embedding's passes had a median of 0.45 ms and a mean of 1.83 ms (2026-12-05): the rank's
real rate is the mean. A block is one pass a visit, after other cells' passes, as in a step,
where each block follows another block's weights.

Under a quota (by_cpu) the pass a visit is not enough: a pass of a few periods ends in whole
periods or not, and its wall time falls in modes a period apart. LM small's block forward at
microbatch 1 on a 0.5-CPU rank ran 11 or 20 ms (10 ms periods), median 19.6 ms against a mean of
17.1; at 0.25 CPU the median was 2-9% above the mean (2026-12-05, Xeon), and the two 0.25-CPU
ranks of one profile read the block 11% apart. A step sums many passes, so it costs their mean,
and a mean of few such visits is noisy. So each cell's figure is its mean CPU seconds (not
quantized: the process's own clock) times the rank's wall seconds per CPU second over every
timed pass of every cell (which the quota and the ranks sharing the machine set; a throttled
wait lands in a pass in proportion to its CPU, so over all passes the rate is the rank's).

A cell's stop rule (`stop`): never before `repeats` visits and `cell_s` seconds; then when the
distribution-free 95% interval of its median visit (in CPU seconds, by_cpu) is within
+-precision, or when the profile's budget (budget_s per cell, all cells together) has gone by. A
cell whose rule is met samples on while the others finish (its later visits are kept, in its
figures, and counted as `held_passes`, the name the records had when a cell was timed one pass at
a time), and its rule is asked again each round: a rank is done when all its cells' rules hold in
the same round. In a cohort of ranks profiled together (harness/planning/cohort.py) the rounds
end once every rank has been done: no rank is timed on a machine its peers have left quieter.
"""
from __future__ import annotations

import statistics
import time

import torch

from harness.measure.timing import now
from results.stats.estimators import median_interval

cpu_now = time.process_time  # CPU seconds of the process, every thread: what a CPU quota meters


def _saved_bytes(fn) -> tuple[object, int]:
    """fn()'s result and the bytes autograd saved for its backward (each storage once)."""
    seen: dict[int, int] = {}

    def pack(t):
        if t.device.type != "meta":
            st = t.untyped_storage()
            seen[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(seen.values())


def one_pass(module, make_input, loss_fn) -> tuple[float, float, int, int, float, float]:
    """One forward and backward of `module` on make_input(): (fwd s, bwd s, bytes autograd saved,
    the output's bytes, fwd CPU s, bwd CPU s). With loss_fn the backward starts from the loss,
    else from ones."""
    x = make_input()
    module.zero_grad(set_to_none=True)
    c0, t0 = cpu_now(), now()
    out, saved = _saved_bytes(lambda: module(x) if loss_fn is None else loss_fn(module(x)))
    t1, c1 = now(), cpu_now()
    out.backward(None if loss_fn else torch.ones_like(out))
    t2, c2 = now(), cpu_now()
    return (t1 - t0, t2 - t1, saved, (out.numel() * out.element_size() if loss_fn is None else 0),
            c1 - c0, c2 - c1)


def half_width(samples: list[float]) -> float:
    """The 95% interval of the median relative to it (+-); inf with too few samples for one."""
    interval = median_interval(samples)
    return float("inf") if interval is None else (interval[1] - interval[0]) / (2 * statistics.median(samples))


def finite(x: float) -> float | None:
    return x if x != float("inf") else None  # JSON has no infinity


def stop(samples: list[float], started: float, repeats: int, cell_s: float, precision: float,
         budget_s: float) -> str | None:
    """Why a cell's sampling may end now, or None to go on (see the module docstring). Two
    profiles of the same four ranks twenty minutes apart once predicted the same plan 17% apart
    with 3 passes a cell: the profile's own spread, not the model's, bounded the planner."""
    elapsed = now() - started
    if len(samples) < repeats or elapsed < cell_s:
        return None
    if precision <= 0:
        return "repeats"
    if half_width(samples) <= precision:
        return "precision"
    return "budget" if elapsed >= max(budget_s, cell_s) else None


# least seconds of passes a visit: three periods of the CPU quota (harness/parallel/cpu_quota.py), and
# short enough that a block (80 ms and more on LM small at 0.5 CPU) is one pass a visit
VISIT_S = 0.03


def _passes(fn, visit_s: float) -> list:
    """fn()'s results, called until visit_s seconds have gone by (at least once)."""
    got, t0 = [fn()], now()
    while now() - t0 < visit_s:
        got.append(fn())
    return got


class _Tally:
    """What every cell keeps besides its samples: whether its rule asks of CPU seconds (a rank held
    to a quota), and the wall and CPU seconds of all its timed passes (the rank's rate, summed
    over every cell by time_in_rounds)."""

    by_cpu = False
    wall_s = cpu_s = 0.0

    def time_by_cpu(self, on: bool) -> None:
        self.by_cpu = on

    def _tally(self, wall_s: float, cpu_s: float) -> None:
        self.wall_s += wall_s
        self.cpu_s += cpu_s

    def spent(self) -> tuple[float, float]:
        return self.wall_s, self.cpu_s


class Layer(_Tally):
    """A layer kind at one microbatch: forward and backward of `module` on make_input()."""

    def __init__(self, module, make_input, loss_fn=None):
        self.args = (module, make_input, loss_fn)
        self.fwd: list[float] = []  # each visit's mean forward, wall seconds
        self.bwd: list[float] = []
        self.fwd_cpu: list[float] = []  # the same in CPU seconds
        self.bwd_cpu: list[float] = []
        self.samples: list[float] = []  # the rule's statistic: forward + backward seconds (CPU ones by_cpu)
        self.saved = self.out_bytes = 0

    def warm(self) -> None:  # allocator and kernel warm-up, untimed
        _, _, self.saved, self.out_bytes, _, _ = one_pass(*self.args)

    def _time(self, visit_s: float) -> float:
        """One visit's mean forward and backward, kept; their sum (in CPU seconds by_cpu)."""
        got = _passes(lambda: one_pass(*self.args), visit_s)
        mean = [sum(g[i] for g in got) / len(got) for i in range(6)]
        _, _, self.saved, self.out_bytes, _, _ = got[-1]
        self.fwd.append(mean[0])
        self.bwd.append(mean[1])
        self.fwd_cpu.append(mean[4])
        self.bwd_cpu.append(mean[5])
        self._tally(sum(g[0] + g[1] for g in got), sum(g[4] + g[5] for g in got))
        return mean[4] + mean[5] if self.by_cpu else mean[0] + mean[1]

    def visit(self, visit_s: float = 0.0) -> None:
        self.samples.append(self._time(visit_s))

    def row(self, rate: float | None = None) -> dict:
        """Forward and backward seconds: the median visit's, or with `rate` (wall seconds per CPU
        second) the mean visit's CPU seconds at that rate (the module docstring says why)."""
        kept = {"fwd_samples_s": self.fwd, "bwd_samples_s": self.bwd, "saved_bytes": self.saved,
                "out_bytes": self.out_bytes}
        if rate is None:
            return {"fwd_s": statistics.median(self.fwd), "bwd_s": statistics.median(self.bwd), **kept}
        return {"fwd_s": statistics.fmean(self.fwd_cpu) * rate, "bwd_s": statistics.fmean(self.bwd_cpu) * rate,
                "fwd_wall_median_s": statistics.median(self.fwd), "bwd_wall_median_s": statistics.median(self.bwd),
                "fwd_cpu_samples_s": self.fwd_cpu, "bwd_cpu_samples_s": self.bwd_cpu, **kept}


class Share(Layer):
    """`part` (a group member's block: shards.py) timed in alternating passes with `whole` (the
    block), A B then B A, so that its share of the block, a ratio, is free of the machine's
    drift: the medians of the per-pair ratios, forward and backward (share_fwd, share_bwd). The
    rule's statistic is the total's ratio. `whole` and `part`: (module, input maker)."""

    def __init__(self, whole: tuple, part: tuple):
        super().__init__(*part)
        self.whole = Layer(*whole)

    def warm(self) -> None:
        self.whole.warm()
        super().warm()

    def time_by_cpu(self, on: bool) -> None:
        super().time_by_cpu(on)
        self.whole.time_by_cpu(on)

    def spent(self) -> tuple[float, float]:
        return self.wall_s + self.whole.wall_s, self.cpu_s + self.whole.cpu_s

    def visit(self, visit_s: float = 0.0) -> None:  # whole and part each half the visit
        if len(self.samples) % 2 == 0:
            whole = self.whole._time(visit_s / 2)
            part = self._time(visit_s / 2)
        else:
            part = self._time(visit_s / 2)
            whole = self.whole._time(visit_s / 2)
        self.samples.append(part / whole)  # the pair's ratio

    def row(self, rate: float | None = None) -> dict:
        """By CPU (rate given) the share is the ratio of the two sides' mean CPU seconds."""
        if rate is not None:
            return {**super().row(rate), "share_samples": self.samples,
                    "share_fwd": statistics.fmean(self.fwd_cpu) / statistics.fmean(self.whole.fwd_cpu),
                    "share_bwd": statistics.fmean(self.bwd_cpu) / statistics.fmean(self.whole.bwd_cpu)}
        wf, wb = self.whole.fwd, self.whole.bwd
        return {**super().row(), "share_fwd": statistics.median(p / w for p, w in zip(self.fwd, wf)),
                "share_bwd": statistics.median(p / w for p, w in zip(self.bwd, wb)), "share_samples": self.samples}


class Call(_Tally):
    """Seconds of fn() per call (the optimizer's step, the gradients' copy)."""

    def __init__(self, fn):
        self.fn = fn
        self.samples: list[float] = []  # the rule's statistic (CPU seconds by_cpu)
        self.wall: list[float] = []  # each visit's mean call, wall seconds
        self.cpu: list[float] = []

    def warm(self) -> None:
        self.fn()

    def visit(self, visit_s: float = 0.0) -> None:
        def timed():
            c0, t0 = cpu_now(), now()
            self.fn()
            return now() - t0, cpu_now() - c0
        got = _passes(timed, visit_s)
        self.wall.append(sum(g[0] for g in got) / len(got))
        self.cpu.append(sum(g[1] for g in got) / len(got))
        self._tally(sum(g[0] for g in got), sum(g[1] for g in got))
        self.samples.append(self.cpu[-1] if self.by_cpu else self.wall[-1])

    def row(self, rate: float | None = None) -> dict:
        """cost_s, the call's seconds: the median visit's, or with `rate` the mean visit's CPU
        seconds at that rate; median_s is the median visit's wall seconds either way."""
        cost = statistics.median(self.wall) if rate is None else statistics.fmean(self.cpu) * rate
        return {"cost_s": cost, "median_s": statistics.median(self.wall), "samples_s": self.wall,
                **({"cpu_samples_s": self.cpu} if rate is not None else {})}


def time_in_rounds(cells: dict, repeats: int, cell_s: float = 0.0, precision: float = 0.0,
                   budget_s: float = 4.0, cohort=None, visit_s: float = 0.0, by_cpu: bool = False) -> dict:
    """Every cell warmed once, then visited once a round (visit_s seconds of passes at least, their
    mean the visit's sample), the order reversed each round, until
    every cell's rule is met (in a cohort: every rank's every cell). The budget is budget_s per
    cell, all cells together. Returns each cell's row with its interval's half-width over all its
    visits, what ended its rule (precision, repeats, budget; peers: see below), and how many
    visits it had past enough: after the round since which its rule held unbroken. by_cpu (a
    process held to a CPU quota): every figure is CPU seconds at the rank's wall/CPU rate over all
    the cells' timed passes (`wall_per_cpu` in each row), and the rules ask of CPU seconds."""
    if cohort:
        cohort.start()
    for cell in cells.values():
        cell.time_by_cpu(by_cpu)
        cell.warm()
    names = list(cells)
    since: dict[str, int] = {}  # the round since which each cell's rule has held, unbroken
    was: dict[str, int] = {}  # the same, for a rule that held and then failed again
    start, rounds, over = now(), 0, False
    while not over:
        for name in (names if rounds % 2 == 0 else reversed(names)):
            cells[name].visit(visit_s)
        rounds += 1
        # every cell's rule is asked again each round, a met one too: its later visits go into its
        # figures, so its interval is the one over all of them (latched once met, a row said
        # "precision" at +-2.04% over its 37 visits: CI 2026-12-05), and this rank is done when
        # every rule holds at once
        why = {name: stop(cells[name].samples, start, repeats, cell_s, precision, budget_s * len(names))
               for name in names}
        for name in names:
            if why[name]:
                since.setdefault(name, rounds)
            elif name in since:
                was[name] = since.pop(name)
        mine = all(why.values())
        over = mine if cohort is None else cohort.done(mine)
    # "peers": this rank said it was done and sampled on for its peers, and the cell's interval
    # widened past the target meanwhile (in a cohort only: the cohort does not take a rank's word back)
    wall, cpu = (sum(x) for x in zip(*(cell.spent() for cell in cells.values())))
    rate = wall / cpu if by_cpu and cpu > 0 else None
    return {name: {**cells[name].row(rate), "wall_per_cpu": rate,
                   "half_width": finite(half_width(cells[name].samples)),
                   "ended_by": why[name] or "peers",
                   "held_passes": rounds - since.get(name, was.get(name, rounds)),
                   "rounds": rounds} for name in names}
