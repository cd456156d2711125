"""What one layer costs on one device kind, for the planner: forward and backward seconds per
microbatch size, the bytes it saves for backward, its parameters. Two sources:

- a measured profile (harness/planning/profile.py: per layer kind — embedding, block, head with the
  loss — at a few microbatch sizes); times between the measured sizes are interpolated
  linearly, beyond them extrapolated from the two nearest (time grows linearly in the batch
  once a device is busy);
- an estimate for a what-if: a transformer of a given shape on a device with a vendor peak times
  an assumed efficiency. FLOPs per token: a block 2 x its parameters plus 4 s h for the
  attention scores and their use, the head 2 h V; backward 2 x forward; the embedding's lookup
  and its gradient ~0. Activation bytes per layer per sequence 34 s h at 16-bit (Korthikanti et
  al. 2022 without the 5 a s^2 attention-score term, which flash attention does not keep);
  with full recomputation only the layer's input, 2 s h. Model state 16 B/param (bf16 weights
  and gradients, fp32 master weights and Adam moments: ZeRO's K = 12), or 4 + 12/dp with the
  optimizer sharded over dp replicas.
"""
from __future__ import annotations

import bisect
import copy
from dataclasses import dataclass
from pathlib import Path

from results.planner.profile_figures import exchange_occupancy, held_quota, spread
from results.record import schema

KINDS = ("embedding", "block", "head")  # the layer kinds a profile times and the planner prices


@dataclass(frozen=True)
class Shape:
    """A what-if model: a decoder-only transformer (Llama's shape: SwiGLU MLP, grouped KV heads)."""
    name: str
    n_layer: int
    d_model: int
    n_head: int
    n_kv_head: int
    ffn: int
    vocab: int
    seq_len: int

    def params(self) -> dict[str, int]:
        h, kv = self.d_model, self.d_model * self.n_kv_head // self.n_head
        block = 2 * h * h + 2 * h * kv + 3 * h * self.ffn + 2 * h  # q, o; k, v; gate, up, down; 2 norms
        return {"embedding": self.vocab * h, "block": block, "head": self.vocab * h + h}


# Llama-2-70B (Touvron et al. 2023, Table 1 and the released config): 80 layers, d 8192, 64 heads
# with 8 KV heads, SwiGLU width 28672, vocabulary 32000, context 4096; 68.98e9 parameters.
SHAPES = {"llama2-70b": Shape("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096)}


def _interp(points: list[tuple[int, float]], b: float) -> float:
    xs = [p[0] for p in points]
    if len(points) == 1:
        return points[0][1] * b / xs[0]
    i = min(max(bisect.bisect_left(xs, b), 1), len(points) - 1)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return max(0.0, y0 + (y1 - y0) * (b - x0) / (x1 - x0))


def _share_at(points: list[tuple[int, float]], b: float) -> float:
    """A ratio measured at some microbatch sizes, at b: interpolated between them, the nearest
    one's outside them (unlike a time, a share does not grow with the batch)."""
    xs = [p[0] for p in points]
    if b <= xs[0]:
        return points[0][1]
    if b >= xs[-1]:
        return points[-1][1]
    return _interp(points, b)


class Costs:
    """One device kind's costs for one model. Per layer kind: fwd(kind, b), bwd(kind, b) in
    seconds for a microbatch of b samples; saved(kind, b) bytes kept for backward."""

    _spread: dict | None = None  # set by __init__; a subclass that does not call it measured none

    def __init__(self, *, name: str, params: dict[str, int], n_blocks: int, boundary_bytes_per_sample: float,
                 state_bytes_per_param: float, grad_bytes_per_param: float, optimizer_s_per_param: float,
                 times: dict[str, dict[str, list[tuple[int, float]]]] | None = None,
                 saved_per_sample: dict[str, float] | None = None, recompute_per_sample: float = 0.0,
                 flop_per_sample: dict[str, float] | None = None, flop_s: float | None = None,
                 measured: bool = True, source: str = "", tied_params: int = 0, model: str = "",
                 kv_bytes_per_sample: float | None = None, kv_heads: int | None = None,
                 grad_copy_s_per_byte: float = 0.0, grad_accumulate_s_per_byte: float = 0.0,
                 shares: dict | None = None,
                 in_step: dict | None = None, tp_splits: tuple[str, ...] = KINDS,
                 spread: dict[str, list[tuple[int, float]]] | None = None, exchange_occupancy: float = 0.0,
                 quota: tuple[float, float] | None = None):
        self.name, self.params, self.n_blocks = name, params, n_blocks
        self.boundary_bytes_per_sample = boundary_bytes_per_sample
        self.state_bytes_per_param, self.grad_bytes_per_param = state_bytes_per_param, grad_bytes_per_param
        self.optimizer_s_per_param = optimizer_s_per_param
        # DDP's copies of the gradients into its buckets and back, per gradient byte (profiled;
        # 0 for a what-if shape and for profiles older than the measurement)
        self.grad_copy_s_per_byte = grad_copy_s_per_byte
        # autograd adding a microbatch's gradients into the step's so far, per gradient byte
        # (profiled; 0 for a what-if shape and for profiles older than the measurement)
        self.grad_accumulate_s_per_byte = grad_accumulate_s_per_byte
        # {"block_tp2": {"fwd": [(b, share)], "bwd": ...}}: a group member's block over the whole
        # block, timed in alternating passes (harness/planning/profile.py _time_share)
        self._shares = shares or {}
        # {"tp2": [(b, s)]}: what a real tp2 group's block adds to its member's (its collectives,
        # the ranks waiting at them, DTensor's path), per block forward + backward, timed on the
        # profile's ranks (harness/planning/in_step.py)
        self._in_step = in_step or {}
        self._times, self._saved, self._flop, self._flop_s = times, saved_per_sample or {}, flop_per_sample, flop_s
        self.recompute_per_sample = recompute_per_sample  # bytes a recomputed layer keeps (its input)
        self.measured, self.source = measured, source
        self.tied_params = tied_params  # a weight shared by the first and last stage (LM: embedding = head)
        self.model = model  # "workload/size" a profile measured ("" for a what-if shape)
        # one block's K and V for one sample (context parallel gathers them); multi-head: 2 x the boundary
        self.kv_bytes_per_sample = 2 * boundary_bytes_per_sample if kv_bytes_per_sample is None else kv_bytes_per_sample
        self.kv_heads = kv_heads  # tensor parallel splits the KV heads: its degree must divide them (None: unknown)
        # the layer kinds tensor parallel splits: all three for a what-if (Megatron's and torchtitan's
        # vocabulary-parallel embedding and head), what the workload's plan splits for a profile
        self.tp_splits = tuple(tp_splits)
        # {"fwd": [(b, cv)], "bwd": ...}: a block's pass-to-pass spread (std / mean of the profile's
        # timed passes) at each profiled microbatch; None for an estimate or an older profile
        self._spread = spread
        # seconds a rank of this kind is busy per second of a pipeline exchange priced on the link
        # (pipeline_plan._stage_costs). A profile's kind is a CPU rank: gloo copies through the core
        # that computes, and a rank held to a CPU quota has spent it on compute, so the copy runs at
        # the quota's rate too: its wall per CPU second (the profile's timed.wall_per_cpu), 1 without
        # a quota. Measured (2026-12-06, LM small 4-stage [1, 1, 2, 2] M=24 at 0.25/0.5 CPU): the ranks
        # sat 8.3-8.6 ms (0.25 CPU) and 2.9 ms (0.5 CPU) between an operation and the next, where
        # their boundaries' sends are priced 1.9-2.0 and 1.4 ms. An estimate (a GPU what-if) is 0:
        # copy engines move the data beside compute.
        self.exchange_occupancy = exchange_occupancy
        # (period s, CPUs) of the CPU quota the profiled rank was held to, None where it was not:
        # a pipeline stage on such a rank gets part of each wait back (schedule.quota_credit)
        self.quota = quota

    def fwd(self, kind: str, b: float) -> float:
        if self._times is not None:
            return _interp(self._times[kind]["fwd"], b)
        return self._flop[kind] * b / self._flop_s

    def bwd(self, kind: str, b: float) -> float:
        if self._times is not None:
            return _interp(self._times[kind]["bwd"], b)
        return 2 * self._flop[kind] * b / self._flop_s

    def cv(self, b: float) -> tuple[float, float]:
        """A block's forward and backward spread (std / mean) at microbatch b, the nearest profiled
        one's outside the profiled sizes; (0, 0) without a measured spread. A stage's operation
        takes its block's: under a CPU quota a stage of 2-4 blocks spread 9-12% per microbatch,
        as one block did in its profile (7-12%), so the noise is not independent block by block."""
        if not self._spread:
            return 0.0, 0.0
        return _share_at(self._spread["fwd"], b), _share_at(self._spread["bwd"], b)

    def profiled_microbatches(self) -> tuple[int, int] | None:
        """The smallest and largest microbatch the profile timed a block at (between them times are
        interpolated, beyond them extrapolated: _interp); None for an estimate."""
        if self._times is None:
            return None
        sizes = [b for b, _ in self._times["block"]["fwd"]]
        return min(sizes), max(sizes)

    def profiled_sizes(self) -> list[int] | None:
        """Every microbatch size the profile timed a block at; None for an estimate."""
        return None if self._times is None else [b for b, _ in self._times["block"]["fwd"]]

    @property
    def recompute_measured(self) -> bool:
        return self._times is not None and "block_recompute" in self._times

    def recompute_s(self, b: float) -> float:
        """Seconds full recomputation adds to one block's backward at microbatch b: measured where
        the profile timed the block under torch.utils.checkpoint (its backward then, minus the
        plain backward), else the formula's one more forward."""
        if self.recompute_measured:
            return max(0.0, _interp(self._times["block_recompute"]["bwd"], b) - self.bwd("block", b))
        return self.fwd("block", b)

    def saved(self, kind: str, b: float) -> float:
        return self._saved[kind] * b

    def shard_fraction(self, dim: str, n: int, b: float, backward: bool) -> float | None:
        """One member of an n-way `dim` ("tp" or "cp") group's block time over the whole block's,
        at microbatch b, where the profile timed that member's share (harness/planning/shards.py);
        else None (the planner then assumes 1/n)."""
        got = self._shares.get(f"block_{dim}{n}")  # measured as a ratio, interleaved with the block
        return None if got is None else _share_at(got["bwd" if backward else "fwd"], b)

    def group_in_step_s(self, dim: str, n: int, b: float) -> float | None:
        """Seconds an n-way `dim` group's collectives add to one block's forward + backward at
        microbatch b, where the profile timed the real group (only "tp" so far); else None (the
        planner then prices the collectives alone on the links)."""
        got = self._in_step.get(f"{dim}{n}")
        return None if not got else _interp(got, b)

    def without_shards(self) -> "Costs":
        """These costs with no measured tensor/context-parallel shares or groups: a group priced as
        an even split with its collectives on the links, the model the measurements replace (the
        group_shards bench shows both)."""
        out = copy.copy(self)
        out._shares, out._in_step = {}, {}
        return out

    def scaled(self, factor: float) -> "Costs":
        """These costs with everything the rank computes `factor` times as long: each layer's
        forward, backward and recomputation, the optimizer, DDP's gradient copies and autograd's
        adds, a real group's time in the step (its collectives run on the rank's CPU there). A
        calibration (inventory `calibration`): a profile's cells are timed one layer at a time, and
        a kind's own job, run, can step a few percent off its price. In a mixed data-parallel job
        the slowest kind sets the step, so an error in the kinds' relative speed is idle time on the
        others one for one (LM small at batch 192, 2026-12-06 Xeon: the 0.25-CPU kind's own job ran
        2.2% over its price and the 0.5-CPU kind's 1.1% under; the mixed job, split on the profile,
        2.2% over). Links and the measured tensor/context shares (ratios) are left as they are."""
        if factor == 1.0:
            return self
        out = copy.copy(self)
        if self._times is not None:
            out._times = {k: {d: [(b, t * factor) for b, t in pts] for d, pts in v.items()}
                          for k, v in self._times.items()}
        else:
            out._flop_s = self._flop_s / factor
        out._in_step = {k: [(b, t * factor) for b, t in pts] for k, pts in self._in_step.items()}
        out.optimizer_s_per_param = self.optimizer_s_per_param * factor
        out.grad_copy_s_per_byte = self.grad_copy_s_per_byte * factor
        out.grad_accumulate_s_per_byte = self.grad_accumulate_s_per_byte * factor
        out.source = f"{self.source}, calibrated x{factor:.4g}"
        return out

    def group_reduce_s(self, params: float) -> float:
        """Seconds a step spends reducing `params` parameters' gradients inside a device's group
        (results/planner/within_stage.py: context-parallel ranks hold the same weights); none alone."""
        return 0.0

    def grad_copy_s(self, params: float) -> float:
        """Seconds DDP (or replicate) spends copying `params` parameters' gradients into its
        buckets and back, on each data-parallel rank, every step (serial with its compute)."""
        return params * self.grad_bytes_per_param * self.grad_copy_s_per_byte

    def grad_accumulate_s(self, params: float) -> float:
        """Seconds autograd spends adding one microbatch's gradients of `params` parameters into
        those already accumulated (every microbatch of a step after the first; serial with the backward)."""
        return params * self.grad_bytes_per_param * self.grad_accumulate_s_per_byte

    def sample_s(self, b: float) -> float:
        """Forward + backward of the whole model, per sample, at microbatch b."""
        total = sum(self.fwd(k, b) + self.bwd(k, b) for k in ("embedding", "head"))
        total += self.n_blocks * (self.fwd("block", b) + self.bwd("block", b))
        return total / b

    @property
    def total_params(self) -> int:
        return self.params["embedding"] + self.n_blocks * self.params["block"] + self.params["head"]

    def replica_bytes_per_sample(self) -> float:
        """Activation bytes one sample keeps through a whole replica's forward (data parallel)."""
        return self.saved("embedding", 1) + self.n_blocks * self.saved("block", 1) + self.saved("head", 1)


class Recomputed(Costs):
    """A kind's costs with full recomputation of every block (activation checkpointing), for a
    data-parallel replica (a pipeline stage recomputes by itself where it must, pipeline_plan.py):
    each block keeps only its input (recompute_per_sample) and its backward runs its forward
    again (recompute_s: measured where the profile has it); while one block is recomputed its
    activations are live too. Everything else is the base's."""

    def __init__(self, base: Costs):
        self.base = base
        self.name = f"{base.name} (recompute)"

    def __getattr__(self, name: str):  # what recomputation does not change is the base's
        return getattr(self.__dict__["base"], name)

    def fwd(self, kind: str, b: float) -> float:
        return self.base.fwd(kind, b)

    def bwd(self, kind: str, b: float) -> float:
        return self.base.bwd(kind, b) + (self.base.recompute_s(b) if kind == "block" else 0.0)

    def saved(self, kind: str, b: float) -> float:
        return self.base.recompute_per_sample * b if kind == "block" else self.base.saved(kind, b)

    def recompute_s(self, b: float) -> float:
        return self.base.recompute_s(b)

    def group_reduce_s(self, params: float) -> float:
        return self.base.group_reduce_s(params)

    def replica_bytes_per_sample(self) -> float:
        return super().replica_bytes_per_sample() + self.base.saved("block", 1)


class Accumulated(Costs):
    """A kind's costs when a data-parallel rank runs its share in microbatches of at most `microbatch`
    samples, the gradients accumulated and all-reduced after the last (harness/parallel/accumulate.py:
    as even as tensor_split cuts them, the larger first). fwd is everything before the last
    microbatch's backward (every forward, the earlier backwards), bwd that last backward: DDP's
    buckets fill only in it (results/analysis/schedule.Overlap). Each microbatch after the first adds
    its gradients into the accumulated ones (grad_accumulate_s, serial with the backward). A
    microbatch keeps its own activations only. Everything else is the base's."""

    def __init__(self, base: Costs, microbatch: int):
        self.base, self.microbatch = base, microbatch
        self.name = f"{base.name} (microbatch {microbatch})"
        self._per_sample: dict[float, float] = {}  # sample_s by share, kept: the split's bisection asks again

    def __getattr__(self, name: str):  # what accumulation does not change is the base's
        return getattr(self.__dict__["base"], name)

    def chunks(self, b: float) -> list[int]:
        """The microbatches of a share of b samples, in the order they run."""
        q, r, m = self._sizes(b)
        return [q + 1] * r + [q] * (m - r)

    def _sizes(self, b: float) -> tuple[int, int, int]:
        """chunks(b) as (q, r, m): r microbatches of q + 1 samples, then m - r of q."""
        m = -(-int(b) // self.microbatch)
        return (*divmod(int(b), m), m)

    def fwd(self, kind: str, b: float) -> float:
        # every microbatch's forward and every backward but the last one's, counted by size, not
        # summed one by one: a device's rate alone (utilization.py) prices the whole global batch,
        # 20,000 samples in up to 20,000 microbatches for each of planner_scale's 10,000 kinds
        q, r, m = self._sizes(b)  # r < m: the last microbatch is one of q
        parts = [(r, self.base.fwd(kind, q + 1)), (m - r, self.base.fwd(kind, q)),
                 (r, self.base.bwd(kind, q + 1)), (m - r - 1, self.base.bwd(kind, q))]
        return sum(n * t for n, t in parts if n)

    def bwd(self, kind: str, b: float) -> float:
        return self.base.bwd(kind, self._sizes(b)[0])

    def sample_s(self, b: float) -> float:
        got = self._per_sample.get(b)
        if got is None:
            adds = (self._sizes(b)[2] - 1) * self.base.grad_accumulate_s(self.base.total_params)
            got = self._per_sample[b] = super().sample_s(b) + adds / b
        return got

    def saved(self, kind: str, b: float) -> float:
        return self.base.saved(kind, min(b, self.microbatch))

    def group_reduce_s(self, params: float) -> float:
        return self.base.group_reduce_s(params)

    def profiled_sizes(self) -> list[int] | None:
        return self.base.profiled_sizes()


def from_profile(name: str, record: Path) -> Costs:
    s = schema.read_record(record)["summary"]
    times = {k: {"fwd": [(r["microbatch"], r["fwd_s"]) for r in rows], "bwd": [(r["microbatch"], r["bwd_s"]) for r in rows]}
             for k, rows in s["layers"].items()}
    saved = {k: max(r["saved_bytes"] / r["microbatch"] for r in rows) for k, rows in s["layers"].items()
             if k in KINDS}
    shares = {k: {d: [(r["microbatch"], r[f"share_{d}"]) for r in rows] for d in ("fwd", "bwd")}
              for k, rows in s["layers"].items() if rows and "share_fwd" in rows[0]}
    return Costs(name=name, params=s["params"], n_blocks=s["n_blocks"],
                 boundary_bytes_per_sample=s["boundary_bytes_per_sample"],
                 state_bytes_per_param=s["state_bytes_per_param"], grad_bytes_per_param=4,
                 optimizer_s_per_param=s["optimizer_s_per_param"], times=times, saved_per_sample=saved,
                 grad_copy_s_per_byte=s.get("grad_copy_s_per_byte", 0.0),
                 grad_accumulate_s_per_byte=s.get("grad_accumulate_s_per_byte", 0.0), shares=shares,
                 in_step={k: [(r["microbatch"], r["in_step_s"]) for r in rows]
                          for k, rows in s.get("in_step", {}).items() if isinstance(rows, list) and rows},
                 recompute_per_sample=s["boundary_bytes_per_sample"], measured=True, tied_params=s["tied_params"],
                 # profiles older than the key: the LM's plan has only ever split the blocks
                 tp_splits=tuple(s.get("tp_splits", ["block"])), spread=spread(s["layers"].get("block", [])),
                 exchange_occupancy=exchange_occupancy(s), quota=held_quota(s),
                 model=f"{s['workload']}/{s['size']}",
                 source=f"profile {record.name} ({s['workload']}/{s['size']}, {s['constraint'].get('how')}"
                        f"{', cpus ' + str(s['constraint']['cpus']) if s['constraint'].get('cpus') else ''}; "
                        f"recomputation {'measured' if 'block_recompute' in s['layers'] else 'as one more forward'}"
                        + "".join(f"; {n} measured" for n, v in s.get("shards", {}).items() if v == "measured")
                        + "".join(f"; {n} group timed" for n, v in s.get("in_step", {}).items() if isinstance(v, list))
                        + ")")


def from_shape(name: str, shape: Shape, flop_s: float, sharded_dp: int = 0) -> Costs:
    p = shape.params()
    s, h = shape.seq_len, shape.d_model
    flop = {"embedding": 0.0, "block": 2 * p["block"] * s + 4 * s * s * h, "head": 2 * h * shape.vocab * s}
    state = 4 + 12 / sharded_dp if sharded_dp else 16
    return Costs(name=name, params=p, n_blocks=shape.n_layer, boundary_bytes_per_sample=2 * s * h,
                 state_bytes_per_param=state, grad_bytes_per_param=2, optimizer_s_per_param=0.0,
                 saved_per_sample={"embedding": 2 * s * h, "block": 34 * s * h, "head": 34 * s * h},
                 recompute_per_sample=2 * s * h, flop_per_sample=flop, flop_s=flop_s, measured=False,
                 kv_bytes_per_sample=2 * 2 * s * h * shape.n_kv_head // shape.n_head, kv_heads=shape.n_kv_head,
                 source=f"ESTIMATE: {shape.name} at {flop_s / 1e12:.0f} TFLOP/s (vendor peak x assumed efficiency)")
