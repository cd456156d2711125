"""The `parallel` section of RunConfig: how a multi-rank run spreads training over its ranks.
Torch-free (the CLI validates before paying for torch); harness/parallel/strategies.py and
harness/parallel/pipeline.py apply it.

Ranks are laid out as a (pp, dp, cp, tp) mesh, row-major (torchtitan's order: pipeline outermost,
tensor parallel innermost): rank = pp_i * dp * cp * tp + dp_i * cp * tp + cp_i * tp + tp_i. The
data-parallel degree is what the world leaves after pp, cp and tp. Gradients are reduced over
dp x cp together (torchtitan's dp_shard_cp): the cp ranks of a replica hold the same parameters
and read the same samples, each a different part of every sequence.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from harness.config.errors import UsageError
from results.record.labels import strategy_name

DATA_STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")
CP_METHODS = ("allgather",)   # ring (KV blocks passed round the group) is not built yet
RECOMPUTE = ("none", "selective", "full")
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
# fields added after the first release of the section: left out of the variant hash at their
# defaults, so runs recorded before them keep their ids
_LATER_FIELDS = ("pp", "microbatches", "pp_schedule", "pp_virtual", "pp_split", "ep", "batch_split", "cp",
                 "cp_method", "recompute", "jobs", "microbatch_split")


def _positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"parallel.{name} must be an integer >= 1; got {value!r}")


def _counts(name: str, text: str, unit: str, units: str, whose: str) -> None:
    """A split field ("3,1": batch_split's samples, microbatch_split's microbatches): comma-separated
    integers, each >= 1, or a UsageError naming the field."""
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        raise UsageError(f"parallel.{name} must be comma-separated {unit} counts, e.g. \"3,1\"; got {text!r}") from None
    if min(counts) < 1:
        raise UsageError(f"parallel.{name} {text!r} gives {whose} no {units}; every one needs >= 1")


@dataclass(frozen=True, kw_only=True, slots=True)
class Parallel:
    """How a multi-rank run spreads training over its ranks (harness/parallel/strategies.py applies it).
    The data-parallel degree is what the world size leaves after pipeline and tensor parallelism."""

    data: str = "ddp"
    """Data-parallel strategy: ddp (replicas, gradient all-reduce), zero1 (optimizer state
    sharded: ZeroRedundancyOptimizer), zero2 (gradients and optimizer state sharded: FSDP2
    fully_shard with reshard_after_forward=False, the parameters gathered once per step and kept
    until backward ends), fsdp (parameters, gradients and optimizer state sharded: FSDP2
    fully_shard, parameters resharded after each unit's forward)."""
    tp: int = 1
    """Tensor-parallel degree (Megatron column -> row splits of attention and MLP)."""
    sp: bool = False
    """Sequence parallel: LayerNorm/dropout regions sharded along the sequence (needs tp > 1)."""
    pp: int = 1
    """Pipeline-parallel degree: the model's blocks split into stages over pp ranks
    (torch.distributed.pipelining; harness/parallel/pipeline.py)."""
    microbatches: int = 4
    """Pipeline: microbatches per step (each rank's batch is split into this many)."""
    pp_schedule: str = "1f1b"
    """Pipeline schedule: gpipe (all forwards, then all backwards), 1f1b (one forward, one
    backward in the steady state: same bubble, fewer live activations; needs microbatches >= pp),
    interleaved_1f1b (pp_virtual stages per rank: the bubble divided by pp_virtual)."""
    pp_virtual: int = 1
    """Pipeline: stages per rank (interleaved_1f1b only; rank r holds stages r, r+pp, ...)."""
    pp_split: str = ""
    """Pipeline: transformer blocks per stage, "a,b,..." (pp x pp_virtual entries, summing to
    the block count); empty = as even as possible."""

    ep: int = 1
    """Expert-parallel degree (Mixture-of-Experts sizes): each MoE layer's experts sharded over
    ep ranks, tokens sent to their experts' ranks and back with all-to-all
    (harness/parallel/expert.py); the rest of the model data-parallel (ddp) over all ranks."""

    cp: int = 1
    """Context-parallel degree (LM): each rank holds seq_len / cp tokens of every sequence, in
    two chunks balanced for the causal mask (i and 2cp-1-i); attention gathers K and V from
    the cp group (harness/parallel/context.py)."""
    cp_method: str = "allgather"
    """Context parallel: how K and V reach every rank: allgather (torchtitan's default, Llama 3's
    method: the whole K and V all-gathered per layer, their gradients reduce-scattered)."""
    recompute: str = "none"
    """Activation recomputation (harness/parallel/recompute.py) of each block the workload names:
    none; full (torch.utils.checkpoint: only each block's input kept, the block re-run in
    backward); selective (torchtitan's op-level policy: matmul, convolution and attention outputs
    kept, the cheap ops between them recomputed). Runs on one rank too."""

    batch_split: str = ""
    """Uneven data parallel: samples of each global batch per data-parallel rank, "a,b,..."
    (summing to the batch size), e.g. from `python -m harness plan` for ranks of unequal speed;
    each rank's loss is weighted by its share, so the update equals the even split's. Empty =
    an equal share each. With a pipeline (plain ddp), one entry per pipeline replica: unequal
    replicas, each on its own contiguous ranks (replica j holds ranks j*pp .. j*pp + pp - 1,
    as one device kind's), the planner's data parallel over each kind's own pipeline."""
    microbatch_split: str = ""
    """Each replica's microbatches a step, "a,b,..." (one entry per batch_split entry). Unequal
    pipeline replicas (pp with batch_split): each entry divides its replica's share; empty =
    `microbatches` each. Data parallel (pp = 1, ddp with batch_split): gradient accumulation, rank r
    runs its share as that many microbatches (as even as torch.tensor_split cuts them; at most its
    share), the gradients all-reduced once, after the last (harness/parallel/accumulate.py): a
    large share at a microbatch size the device runs well and holds in memory."""

    jobs: int = 1
    """Independent jobs on the launched ranks: the world split into `jobs` equal, contiguous
    groups, each a data-parallel job of its own (its own replicas and gradient all-reduce, its
    share of the global batch: batch_split's entries for its ranks, else an equal share; nothing
    passes between jobs). A step's time is the jobs' throughput-equivalent (harness/parallel/
    jobs.py): global batch / sum over jobs of (job's samples / its slowest rank's step). What it
    is for: each device kind's own job run at once on its own ranks, interleaved against the mixed
    job on the same ranks, gives the seed's utilization bound drift-free (HETHUB, arXiv
    2405.16256; harness/bench/planner_seed.py). Plain ddp; or each job one pipeline (parallel.pp =
    ranks / jobs, each job's stages on its own contiguous ranks: harness/parallel/jobs.pipeline_mesh),
    for each kind's own pipeline run at once against a mixed pipeline."""

    def __post_init__(self) -> None:
        if self.data not in DATA_STRATEGIES:
            raise UsageError(f"parallel.data must be one of {', '.join(DATA_STRATEGIES)}; got {self.data!r}")
        for name in ("tp", "pp", "microbatches", "pp_virtual", "ep", "jobs"):
            _positive_int(name, getattr(self, name))
        if not isinstance(self.sp, bool):
            raise UsageError(f"parallel.sp expects a bool (true/false); got {self.sp!r}")
        if self.sp and self.tp == 1:
            raise UsageError("parallel.sp=true needs parallel.tp > 1 (sequence parallel splits the "
                             "tensor-parallel regions' neighbours)")
        _positive_int("cp", self.cp)
        if self.cp_method not in CP_METHODS:
            raise UsageError(f"parallel.cp_method must be one of {', '.join(CP_METHODS)}; got {self.cp_method!r} "
                             f"(ring: not built yet)")
        if self.recompute not in RECOMPUTE:
            raise UsageError(f"parallel.recompute must be one of {', '.join(RECOMPUTE)}; got {self.recompute!r}")
        problem = self._context_problem()
        if problem:
            raise UsageError(problem)
        if self.pp_schedule not in PP_SCHEDULES:
            raise UsageError(f"parallel.pp_schedule must be one of {', '.join(PP_SCHEDULES)}; "
                             f"got {self.pp_schedule!r}")
        problem = self._pipeline_problem()
        if problem:
            raise UsageError(problem)
        if self.batch_split:
            _counts("batch_split", self.batch_split, "sample", "samples", "a rank")
            if self.tp > 1 or self.ep > 1 or self.cp > 1:
                raise UsageError("parallel.batch_split composes with plain data parallel (ddp, zero1, fsdp) and with "
                                 "pipeline replicas (ddp) so far; for unequal pipeline stages use parallel.pp_split")
            if self.pp > 1 and (self.data != "ddp" or self.pp_virtual > 1 or self.jobs > 1):
                raise UsageError("parallel.batch_split with parallel.pp (unequal pipeline replicas) composes with "
                                 f"parallel.data=ddp, gpipe or 1f1b and one job so far; got {self.label()}")
        if self.microbatch_split:
            _counts("microbatch_split", self.microbatch_split, "microbatch", "microbatches", "a replica")
            if not self.batch_split:
                raise UsageError("parallel.microbatch_split needs parallel.batch_split (each unequal pipeline "
                                 "replica's or data-parallel rank's microbatches)")
            if self.pp == 1 and (self.data != "ddp" or self.tp > 1 or self.cp > 1 or self.ep > 1):
                raise UsageError("parallel.microbatch_split without a pipeline (gradient accumulation) composes with "
                                 f"plain parallel.data=ddp and batch_split so far; got {self.label()}")
        if self.jobs > 1 and (self.data != "ddp" or self.tp > 1 or self.cp > 1 or self.ep > 1
                              or self.recompute != "none"):
            raise UsageError(f"parallel.jobs={self.jobs} composes with plain parallel.data=ddp (and batch_split) or "
                             f"with one pipeline a job (parallel.pp) so far; got {self.label()}")
        if self.ep > 1 and (self.tp > 1 or self.pp > 1 or self.data not in ("ddp", "fsdp")):
            raise UsageError(f"parallel.ep={self.ep} composes with parallel.data=ddp or fsdp so far (experts sharded "
                             f"over ep, the rest data parallel); got {self.label()}")

    def _context_problem(self) -> str | None:
        """What context parallel does not compose with yet, or None."""
        if self.cp == 1:
            return None
        for name, on in (("pp", self.pp > 1), ("ep", self.ep > 1), ("sp", self.sp)):
            if on:
                return (f"parallel.cp with parallel.{name}: not built yet; context parallel composes with "
                        f"parallel.data (ddp, zero2, fsdp) and parallel.tp")
        if self.data == "zero1":
            return "parallel.cp with parallel.data=zero1: not built yet; use ddp, zero2 or fsdp"
        return None

    def _pipeline_problem(self) -> str | None:
        p = self
        if p.pp == 1:
            for name in ("microbatches", "pp_schedule", "pp_virtual", "pp_split"):
                if getattr(p, name) != Parallel.__dataclass_fields__[name].default:
                    return f"parallel.{name} needs parallel.pp > 1 (it configures the pipeline)"
            return None
        if p.tp > 1 and p.sp:
            return ("parallel.pp with parallel.sp: not built yet (sequence parallel's first and last regions "
                    "sit on different stages); pipeline x tensor parallel runs with sp=false")
        if p.data in ("zero1", "zero2"):
            return (f"parallel.data={p.data} with parallel.pp: not built yet (ZeroRedundancyOptimizer broadcasts plain "
                    "tensors; a pipeline's replicated stages hold DTensors); use parallel.data=ddp or fsdp")
        if (p.pp_schedule == "interleaved_1f1b") != (p.pp_virtual > 1):
            return ("parallel.pp_schedule=interleaved_1f1b needs parallel.pp_virtual >= 2, and pp_virtual > 1 "
                    f"needs interleaved_1f1b; got pp_schedule={p.pp_schedule}, pp_virtual={p.pp_virtual}")
        if p.pp_schedule == "1f1b" and p.microbatches < p.pp and not p.microbatch_split:  # else per replica
            return (f"parallel.pp_schedule=1f1b needs microbatches >= pp (torch's Schedule1F1B); got "
                    f"microbatches={p.microbatches}, pp={p.pp}; use gpipe for fewer")
        if p.pp_schedule == "interleaved_1f1b":
            rounds = max(1, p.microbatches // p.pp)  # torch's ScheduleInterleaved1F1B
            if p.microbatches % rounds:
                return (f"parallel.pp_schedule=interleaved_1f1b needs microbatches to be a multiple of "
                        f"{rounds} (rounds of pp={p.pp}); got {p.microbatches}")
        if p.pp_split:
            try:
                split = self.split()
            except ValueError:
                return f"parallel.pp_split must be comma-separated block counts, e.g. \"4,2\"; got {p.pp_split!r}"
            if len(split) != self.stages:
                return (f"parallel.pp_split has {len(split)} stages; pp={p.pp} x pp_virtual={p.pp_virtual} "
                        f"needs {self.stages}")
            if min(split) < 1:
                return f"parallel.pp_split {p.pp_split!r} has an empty stage; every stage needs >= 1 block"
        return None

    @property
    def stages(self) -> int:
        """Pipeline stages in all: pp ranks x pp_virtual stages each."""
        return self.pp * self.pp_virtual

    def split(self) -> list[int]:
        return [int(x) for x in self.pp_split.split(",")]

    def shares(self) -> list[int]:
        return [int(x) for x in self.batch_split.split(",")]

    def replica_microbatches(self, replicas: int | None = None) -> list[int]:
        """Each pipeline replica's microbatches a step: microbatch_split, else `microbatches` each."""
        if self.microbatch_split:
            return [int(x) for x in self.microbatch_split.split(",")]
        return [self.microbatches] * (replicas or 1)

    def local_batches(self, global_batch: int, dp: int) -> list[int]:
        """Samples per data-parallel rank of one global batch: batch_split, else equal shares."""
        return self.shares() if self.batch_split else [global_batch // dp] * dp

    def is_default(self) -> bool:
        return self == Parallel()

    def needs_ranks(self) -> bool:
        """Does anything set here need more than one rank? (Recomputation does not.)"""
        return not Parallel(recompute=self.recompute) == self

    @property
    def model_parallel(self) -> int:
        """Ranks of one data-parallel replica: pp x cp x tp."""
        return self.pp * self.cp * self.tp

    def hash_dict(self) -> dict:
        """The fields of the variant hash: the later ones only when set."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name not in _LATER_FIELDS or getattr(self, f.name) != f.default}

    def layout_problem(self, ranks: int) -> str | None:
        """Why this section can't lay out over `ranks` ranks, or None. Checked by RunConfig when
        ranks is given and by the runner against the launched world (harness/parallel/strategies.py)."""
        if ranks == 1 and self.needs_ranks():
            what = (f"pp={self.pp}" if self.pp > 1 else f"ep={self.ep}" if self.ep > 1 else f"cp={self.cp}" if self.cp > 1
                    else f"jobs={self.jobs}" if self.jobs > 1 else f"data={self.data}" if self.data != "ddp"
                    else f"batch_split={self.batch_split}" if self.batch_split else f"tp={self.tp}")
            return f"parallel.{what} needs more than one rank; launch with mpiexec -n N, srun or torchrun"
        for name in ("pp", "tp", "ep", "cp", "jobs"):
            n = getattr(self, name)
            if ranks % n:
                valid = ", ".join(str(t) for t in range(1, ranks + 1) if ranks % t == 0)
                return f"parallel.{name}={n} does not divide ranks={ranks}; valid: {valid}"
        if ranks % self.model_parallel:
            return (f"pp={self.pp} x cp={self.cp} x tp={self.tp} = {self.model_parallel} ranks per replica does not "
                    f"divide ranks={ranks}")
        if self.jobs > 1 and self.pp > 1 and ranks // self.jobs != self.pp:
            return (f"parallel.jobs={self.jobs} with parallel.pp={self.pp} on {ranks} ranks: each job is one pipeline, "
                    f"so pp must be ranks / jobs = {ranks // self.jobs}")
        # the gradients' group (dp x cp) reduces DTensor parameters: DDP and ZeRO-1 can't
        if self.tp > 1 and ranks // (self.tp * self.pp) > 1 and self.data not in ("fsdp", "zero2"):
            return (f"parallel.data={self.data} with tensor parallel on {ranks} ranks: DDP and ZeRO-1 do not compose "
                    f"with DTensor parameters (torchtitan refuses it too); use parallel.data=fsdp or zero2 for "
                    f"dp x tp (or cp x tp)")
        return None

    def batch_problem(self, global_batch: int, ranks: int) -> str | None:
        """Why the global batch can't be split over the data-parallel ranks and microbatches."""
        dp = max(1, ranks // self.model_parallel)
        if self.batch_split:
            shares = self.shares()
            if len(shares) != dp or sum(shares) != global_batch:
                return (f"parallel.batch_split {self.batch_split!r} needs {dp} entries (one per data-parallel rank) "
                        f"summing to batch_size {global_batch}; got {len(shares)} summing to {sum(shares)}")
            return self._split_problem(shares) if self.pp > 1 or self.microbatch_split else None
        if global_batch % dp:
            return f"batch_size {global_batch} is not divisible by {dp} data-parallel ranks"
        if self.pp > 1 and (global_batch // dp) % self.microbatches:
            return (f"parallel.microbatches={self.microbatches} does not divide the per-replica batch "
                    f"{global_batch // dp} (batch_size {global_batch} / {dp} data-parallel ranks)")
        return None

    def _split_problem(self, shares: list[int]) -> str | None:
        """Each replica's microbatches against its share (batch_split), or None. Unequal pipeline
        replicas (pp > 1): each count divides its share, >= pp under 1f1b. Gradient accumulation
        (pp = 1, one replica a rank): each count at most its share (tensor_split cuts it unevenly)."""
        counts = self.replica_microbatches(len(shares))
        whose = "pipeline replica" if self.pp > 1 else "data-parallel rank"
        if len(counts) != len(shares):
            return (f"parallel.microbatch_split {self.microbatch_split!r} needs {len(shares)} entries (one per "
                    f"{whose}, as batch_split); got {len(counts)}")
        for j, (n, m) in enumerate(zip(shares, counts)):
            if self.pp == 1 and m > n:
                return f"{whose} {j}: {m} microbatches are more than its {n} samples (parallel.batch_split)"
            if self.pp > 1 and n % m:
                return f"{whose} {j}: {m} microbatches do not divide its {n} samples (parallel.batch_split)"
            if self.pp > 1 and self.pp_schedule == "1f1b" and m < self.pp:
                return (f"{whose} {j}: parallel.pp_schedule=1f1b needs microbatches >= pp={self.pp}; got {m} "
                        f"(parallel.microbatch_split); use gpipe for fewer")
        return None

    def label(self) -> str:
        """ddp, zero1, fsdp, tp2, tp2+sp, fsdp+tp2, pp2-1f1b-m4, fsdp+pp2v2-interleaved_1f1b-m8 ..."""
        return strategy_name(self.data, self.tp, self.sp, self.pp, self.pp_virtual, self.pp_schedule,
                             self.microbatches, self.pp_split, self.ep, self.batch_split, self.cp, self.recompute,
                             self.jobs, self.microbatch_split)
