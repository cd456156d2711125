"""RunConfig and Toggles: the one root config object of a run.

Both are frozen and validated once, at creation. Variants come from `dataclasses.replace`
(`with_overrides` below), never from new flags. Every field is logged as an MLflow param and
all fields except the labels (`sweep`, `repeat`) are hashed into the variant id, so two runs
with the same variant id measured the same thing.

This module must not import torch: the CLI validates input before paying for it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any

from harness.config.errors import UsageError  # noqa: F401  (re-exported: the config's error type)
from harness.config.parallel_config import DATA_STRATEGIES, Parallel  # noqa: F401  (re-exported)
from results.record import schema
from results.record import toggles as toggle_decl


AMP_MODES = toggle_decl.BY_NAME["amp"].choices
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
RUN_MODES = ("throughput", "ttt")
DEVICES = ("cpu", "cuda")
TOGGLE_NAMES = toggle_decl.NAMES  # declared once, in results/record/toggles.py
# Fields that label a run but do not change what it measures: kept out of the variant hash.
# The interleaved engine's sampling settings (how long and how finely a ratio was sampled) are
# labels too: an interleaved +channels_last run measures what a plain one does.
LABEL_FIELDS = ("sweep", "repeat", "reference_run", "interleave", "against", "precision", "budget_s", "block_s",
                "probe_microbatch", "account", "eval_batches")


def _check_toggles(self) -> None:
    for t in toggle_decl.TOGGLES:
        value = getattr(self, t.name)
        if t.type == "bool":
            if not isinstance(value, bool):
                raise UsageError(f"toggles.{t.name} expects a bool (true/false); got {value!r}")
        elif value not in t.choices:
            raise UsageError(f"toggles.{t.name} must be one of {', '.join(t.choices)}; got {value!r}")


def _enabled(self) -> list[str]:
    """Names of the toggles that are on, in declaration order."""
    return [t.name for t in toggle_decl.TOGGLES if t.is_on(getattr(self, t.name))]


# The optimizations the harness switches on and off, one field per declared toggle (name, type,
# default and docstring from results/record/toggles.py). Frozen, validated at creation; each toggle is
# read in exactly one module, its declared owner.
Toggles = dataclasses.make_dataclass(
    "Toggles", [(t.name, t.type, field(default=t.default, metadata={"doc": t.doc, "owner": t.owner}))
                for t in toggle_decl.TOGGLES],
    namespace={"__post_init__": _check_toggles, "enabled": _enabled, "__module__": __name__,
               "__doc__": "The optimizations the harness switches on and off (results/record/toggles.py)."},
    frozen=True, kw_only=True, slots=True)


SECTIONS = ("toggles", "parallel")  # nested sections of RunConfig, set as section.key


@dataclass(frozen=True, kw_only=True, slots=True)
class RunConfig:
    """Everything that defines one run. `python -m harness list` prints the choices."""

    workload: str
    """Registered workload name (harness/config/registry.py)."""
    size: str = "tiny"
    """Workload size; every workload has `tiny` (trains in seconds on one CPU core)."""
    mode: str = "throughput"
    """throughput: warm-up then `steps` timed steps; ttt: train until the quality target."""
    device: str = "cpu"
    """cpu or cuda. The CLI picks cuda when torch sees a GPU."""
    steps: int = 20
    """Timed steady-state steps (throughput) or the step cap (ttt)."""
    warmup_steps: int = 3
    """Untimed-for-speed steps before the timed ones; compile/capture happens here."""
    batch_size: int = 0
    """Global batch size in samples; 0 takes the size's default."""
    eval_every: int = 0
    """ttt: training steps between evaluations; 0 = once per epoch."""
    eval_batches: int = 0
    """throughput: validation batches per rank evaluated after the timed steps, a spot check of
    the model's quality; 0 = the whole validation split. The record's `eval_samples` says what the
    quality is over. ttt always evaluates the whole split (its quality decides convergence).
    Not hashed: it is evaluated after the clock."""
    max_seconds: float = 0.0
    """ttt: wall-clock cap in seconds for the training phase; 0 = none."""
    seed: int = 1
    """Seed for weights, data order and dropout. MLPerf requires seed > 0."""
    data_seed: int = 1234
    """Seed of the synthetic dataset generator (same data across seeds of a ttt campaign)."""
    compile_mode: str = "default"
    """torch.compile mode, used when toggles.compile is on."""
    threads: int = 0
    """torch intra-op threads; 0 keeps torch's default (one per core)."""
    prefetch: int = -1
    """Batches loaded ahead in a background thread; -1 = auto: 2 on cuda (loading overlaps GPU
    compute), 0 on cpu (the loader would compete with torch's threads for the same cores)."""
    profile_steps: int = 5
    """Steps of a profiled phase after the timed run (never during it) that splits step time into
    data wait / compute-bound / memory-bound / optimizer / other (harness/measure/breakdown.py); 0 = off."""
    ranks: int = 0
    """Data-parallel ranks; 0 = as many as the launcher (mpiexec, srun, torchrun) started. The
    harness fills in the launched count before the record is written; a mismatch is an error."""
    data_dir: str = ""
    """Dataset directory; empty = data/<workload>/<size>-d<data_seed> under the repo."""
    toggles: Toggles = field(default_factory=Toggles)
    parallel: Parallel = field(default_factory=Parallel)
    interleave: bool = False
    """Measure against the toggles-off configuration in the same process, alternating blocks of
    steps (A B B A ...) until the speedup's 95% CI half-width reaches `precision` or `budget_s`
    runs out (harness/run/interleave.py); single-rank throughput runs with a toggle on. `steps`
    is then the cap per side. Not hashed."""
    against: str = ""
    """Interleaved: the other side, as `;`-separated KEY=VALUE overrides of this configuration
    (e.g. `parallel.data=ddp`, `parallel.batch_split=`); empty = every toggle off and, on several
    ranks, the parallel section's defaults (DDP on the same ranks). Not hashed."""
    precision: float = 0.03
    """Interleaved: target half-width of the speedup's 95% CI, relative (0.03 = +-3%). Not hashed."""
    budget_s: float = 30.0
    """Interleaved: seconds of interleaved sampling per process before it stops unfinished. Not hashed."""
    block_s: float = 0.2
    """Interleaved: the least seconds one block of steps lasts (its step count is set from warm-up). Not hashed."""
    probe_microbatch: int = 0
    """Interleaved: after each pair of blocks, time the layer profile's block at this microbatch on
    every rank, off the clock (harness/run/probe.py): the machine's speed during the run. 0 = off. Not hashed."""
    account: bool = False
    """After the timed steps, measure memory (model state, peak, activation bytes per block) on
    one rank too; always on with more ranks or parallel.recompute (harness/parallel/accounting.py).
    Not hashed: it measures after the clock."""
    sweep: str = ""
    """Label: the sweep this run belongs to (not hashed)."""
    repeat: int = 0
    """Label: repeat index inside a sweep (not hashed)."""
    reference_run: str = ""
    """Label: record folder of a toggles-off run to check losses against (harness/run/gate.py)."""

    def __post_init__(self) -> None:
        from harness.config import registry  # torch-free: workload packages import torch lazily

        _check_types(self)
        wl = registry.get(self.workload)
        if self.size not in wl.sizes:
            raise UsageError(
                f"unknown size {self.size!r} for {self.workload}; valid sizes: {', '.join(wl.sizes)}")
        _choice("mode", self.mode, RUN_MODES)
        _choice("device", self.device, DEVICES)
        _choice("compile_mode", self.compile_mode, COMPILE_MODES)
        if self.steps < 1:
            raise UsageError(f"steps must be >= 1; got {self.steps}")
        if self.prefetch < -1:
            raise UsageError(f"prefetch must be >= -1 (-1 = auto); got {self.prefetch}")
        for name in ("warmup_steps", "batch_size", "eval_every", "eval_batches", "threads", "repeat", "ranks",
                     "profile_steps", "probe_microbatch"):
            if getattr(self, name) < 0:
                raise UsageError(f"{name} must be >= 0; got {getattr(self, name)}")
        if self.mode == "ttt" and self.eval_batches:
            raise UsageError(f"eval_batches applies to throughput runs: a ttt run evaluates the whole validation "
                             f"split (its quality decides convergence); got eval_batches={brief(self.eval_batches)}")
        cpus = os.cpu_count() or 1
        if self.threads > cpus:  # torch's OpenMP pool segfaulted (exit 139, no output) at 100000
            raise UsageError(f"threads must be 0 (one per core) or 1..{cpus}: this machine has {cpus} CPUs; "
                             f"got {brief(self.threads)}")
        for name, lo, hi in (("precision", 0.001, 0.5), ("budget_s", 1.0, 86400.0), ("block_s", 0.001, 60.0)):
            v = getattr(self, name)
            if isinstance(v, int):
                object.__setattr__(self, name, float(v))
            if not (isinstance(v, (int, float)) and math.isfinite(v) and lo <= v <= hi):
                raise UsageError(f"{name} must be a number in {lo:g}..{hi:g}; got {brief(v)}")
        for part in filter(None, self.against.split(";")):
            key = part.split("=", 1)[0].strip()
            if "=" not in part or key not in settable_keys() or key in LABEL_FIELDS:
                raise UsageError(f"against: expected `;`-separated KEY=VALUE overrides of what is measured (keys: "
                                 f"python -m harness list); got {brief(part)}")
        if self.probe_microbatch and (not self.interleave or registry.capability(wl, "profile_layers") is None):
            raise UsageError(f"probe_microbatch applies to interleaved runs (interleave=true) of a workload with a layer "
                             f"profile ({', '.join(registry.supporting('profile_layers'))}); got {brief(self.probe_microbatch)}")
        if self.probe_microbatch and self.device != "cpu":  # its cell is timed on the host, in CPU seconds
            raise UsageError("probe_microbatch times the host CPU (harness/run/probe.py): device=cpu runs only")
        if not math.isfinite(self.max_seconds) or self.max_seconds < 0:
            raise UsageError(f"max_seconds must be a finite number >= 0 (0 = no cap); got {self.max_seconds}")
        if not 1 <= self.seed <= SEED_MAX:
            raise UsageError(f"seed must be in 1..{SEED_MAX} (> 0 is an MLPerf rule; numpy's seeds are 32-bit); "
                             f"got {brief(self.seed)}")
        if not 0 <= self.data_seed <= SEED_MAX:
            raise UsageError(f"data_seed must be in 0..{SEED_MAX} (numpy's seeds are 32-bit); got {brief(self.data_seed)}")
        if self.parallel.tp > 1 and registry.capability(wl, "tensor_parallel_plan") is None:
            with_plan = registry.supporting("tensor_parallel_plan")
            raise UsageError(f"parallel.tp={self.parallel.tp}: {self.workload} has no tensor-parallel plan; "
                             f"workloads with one: {', '.join(with_plan) or 'none yet'}")
        if self.parallel.tp > 1:
            problem = wl.tensor_parallel_check(wl.sizes[self.size], self.parallel.tp, self.parallel.sp)
            if problem:
                raise UsageError(problem)
        # one rank is refused by the runner (a failed record says so), not here: the runner
        # itself fills in ranks=1 for a plain launch
        problem = self.parallel.layout_problem(self.ranks) if self.ranks > 1 else None
        if not problem and self.ranks > 1:
            problem = self.parallel.batch_problem(self.batch_size or wl.sizes[self.size].batch_size, self.ranks)
        if problem:
            raise UsageError(problem)
        if self.parallel.pp > 1:
            _check_pipeline(wl, self, registry)
        if self.parallel.cp > 1:
            check = registry.capability(wl, "context_parallel_check")
            problem = (check(wl.sizes[self.size], self.parallel.cp) if check else
                       f"parallel.cp={self.parallel.cp}: {self.workload} has no sequence to split; workloads with one: "
                       f"{', '.join(registry.supporting('context_parallel_check'))}")
            if problem:
                raise UsageError(problem)
        if self.parallel.ep > 1:
            check = registry.capability(wl, "expert_parallel_check")
            problem = (check(wl.sizes[self.size], self.parallel.ep) if check else
                       f"parallel.ep={self.parallel.ep}: {self.workload} has no experts (lm's moe sizes have)")
            if problem:
                raise UsageError(problem)

    # -- derived -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """Flattened `toggles.x` keys, as logged to MLflow params and accepted by --set."""
        return schema.flatten(self.to_dict())

    def variant_hash(self) -> str:
        """Stable 10-hex id of what this run measures (labels excluded)."""
        d = {k: v for k, v in self.to_dict().items() if k not in LABEL_FIELDS}
        if self.parallel.is_default():  # runs from before the parallel section keep their ids
            d.pop("parallel")
        else:  # and runs from before its pipeline keys keep theirs
            d["parallel"] = self.parallel.hash_dict()
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        d = dict(d)
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            first = sorted(map(str, unknown))[0]
            raise UsageError(f"unknown config key(s) {brief(sorted(map(str, unknown)))}{_nearest(first)}")
        tog = d.pop("toggles", {}) or {}
        if not isinstance(tog, dict):
            raise UsageError(f"toggles must be a mapping; got {tog!r}")
        bad = set(tog) - set(TOGGLE_NAMES)
        if bad:
            raise UsageError(f"unknown toggle(s) {sorted(bad)}; valid toggles: {', '.join(TOGGLE_NAMES)}")
        par = d.pop("parallel", {}) or {}
        if not isinstance(par, dict):
            raise UsageError(f"parallel must be a mapping; got {par!r}")
        bad = set(par) - {f.name for f in fields(Parallel)}
        if bad:
            raise UsageError(f"unknown parallel key(s) {sorted(bad)}; valid keys: "
                             f"{', '.join(f.name for f in fields(Parallel))}")
        if "workload" not in d:
            raise UsageError("config needs a workload")
        return cls(**d, toggles=Toggles(**tog), parallel=Parallel(**par))

    def with_overrides(self, assignments: list[str]) -> "RunConfig":
        """Apply `--set KEY=VALUE` strings (KEY as printed by `harness list`)."""
        d = self.to_dict()
        for a in assignments:
            key, value = parse_assignment(a)
            section, _, sub = key.partition(".")
            if section in SECTIONS and sub:
                d[section][sub] = value
            else:
                d[key] = value
        return RunConfig.from_dict(d)


# -- helpers -------------------------------------------------------------------------------------
def _check_pipeline(wl, cfg: "RunConfig", registry) -> None:
    """parallel.pp > 1: the workload can be cut into stages, and the split fits its blocks."""
    if registry.capability(wl, "pipeline_check") is None:
        with_split = registry.supporting("pipeline_check")
        raise UsageError(f"parallel.pp={cfg.parallel.pp}: {cfg.workload} has no pipeline split; "
                         f"workloads with one: {', '.join(with_split) or 'none yet'}")
    problem = wl.pipeline_check(wl.sizes[cfg.size], cfg.parallel.stages,
                                cfg.parallel.split() if cfg.parallel.pp_split else None)
    if problem:
        raise UsageError(problem)


SEED_MAX = 2**32 - 1


def brief(value: Any, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters: error lines echo what they got, never megabytes."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _choice(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise UsageError(f"{name} must be one of {', '.join(valid)}; got {brief(value)}")


_FIELD_TYPES = {f.name: f.type for f in fields(RunConfig) if f.name not in SECTIONS}
_FIELD_TYPES.update({f"toggles.{f.name}": f.type for f in fields(Toggles)})
_FIELD_TYPES.update({f"parallel.{f.name}": f.type for f in fields(Parallel)})


def settable_keys() -> list[str]:
    return [k for k in _FIELD_TYPES if k != "workload"]


def has_type(value: Any, typ: str) -> bool:
    """Does a value (from YAML or JSON) have the annotated type? bools are not ints here."""
    if typ == "list[str]":
        return isinstance(value, list) and all(isinstance(x, str) for x in value)
    if typ in ("int", "float") and isinstance(value, bool):
        return False
    return isinstance(value, {"str": str, "int": int, "float": (int, float), "bool": bool}[typ])


def _check_types(cfg: RunConfig) -> None:
    for f in fields(cfg):
        if f.name in SECTIONS:
            if not isinstance(getattr(cfg, f.name), {"toggles": Toggles, "parallel": Parallel}[f.name]):
                raise UsageError(f"{f.name} must be a mapping of its keys")
            continue
        v = getattr(cfg, f.name)
        if not has_type(v, f.type):
            raise UsageError(f"{f.name} expects {f.type}; got {brief(v)}")
    if isinstance(cfg.max_seconds, int):
        object.__setattr__(cfg, "max_seconds", float(cfg.max_seconds))


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _nearest(key: str) -> str:
    """'; did you mean X, Y?' from the settable keys, and where to find them all (the whole list
    is ~60 keys: an error line that lists them gets cut before the last ones)."""
    import difflib
    close = difflib.get_close_matches(str(key), settable_keys(), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    return f"{hint} (every key: python -m harness list)"


def parse_assignment(text: str) -> tuple[str, Any]:
    """'toggles.compile=true' -> ('toggles.compile', True), typed by the target field."""
    if "=" not in text:
        raise UsageError(f"malformed --set {brief(text)}: expected KEY=VALUE, e.g. steps=20 "
                         "(every key: python -m harness list)")
    key, raw = (s.strip() for s in text.split("=", 1))
    if key not in _FIELD_TYPES or key == "workload":
        raise UsageError(f"unknown key {brief(key)} in --set{_nearest(key)}")
    return key, parse_value(key, raw)


def parse_value(key: str, raw: str) -> Any:
    typ = _FIELD_TYPES[key]
    if typ == "bool":
        low = raw.lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise UsageError(f"{key} expects a bool (true/false); got {raw!r}")
    if typ in ("int", "float"):
        try:
            return int(raw) if typ == "int" else float(raw)
        except ValueError:
            raise UsageError(f"{key} expects {typ}; got {raw!r}") from None
    return raw
