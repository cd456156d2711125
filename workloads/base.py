"""The Workload protocol: what a workload supplies. No behaviour lives here; the harness owns
the loop and applies every toggle outside the (single-device) model code.

A workload package's `__init__.py` exposes `WORKLOAD` and must not import torch at import
time; model and data code are imported inside the methods.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol, Sequence

if TYPE_CHECKING:
    import torch
    from torch import nn


class Size(Protocol):
    """Per-size facts every workload size carries (workloads add their own fields)."""

    name: str
    batch_size: int          # default global batch size (samples)
    n_train: int             # synthetic training samples written to disk
    n_val: int               # synthetic validation samples


@dataclass(frozen=True)
class Reference:
    """Facts about the workload's reference, which the contract tests pin down."""

    full_size: str         # the size that is the reference model (e.g. "full", "gpt2")
    full_params: int       # its parameter count (counted on the meta device by the tests)
    larger_size: str       # a size past tiny, for the FLOPs formula check
    ttt_step_cap: int      # tiny time-to-train: step cap, well above what reaching the target needs
    ttt_eval_every: int    # tiny time-to-train: steps between evaluations


@dataclass(frozen=True)
class ReadSet:
    """What one loader path reads from disk, for the loader benchmark's raw-read baseline:
    either whole files per sample (index = sample index), or shards read whole in order once
    per epoch with `sample_bytes` of them per sample."""

    per_sample: Sequence[Sequence[Path]] = ()
    shards: Sequence[Path] = ()
    sample_bytes: int = 0


# Optional capabilities: methods a workload defines only where it can. Generic code never tests a
# workload's name: it asks harness.config.registry.capability(wl, NAME) (the method, or None) and
# refuses a layout that needs a missing one with one line naming the workloads that have it.
CAPABILITIES = {
    "tensor_parallel_plan": "(model, tp, sp) -> {module path: ParallelStyle}: its Megatron column/row splits",
    "tensor_parallel_check": "(size, tp, sp) -> why this size cannot be split tp ways, or None",
    "tensor_parallel_shard": "(block, tp) -> one tensor-parallel rank's share of a block as a module (profiled)",
    "tensor_parallel_volume": "(size, batch, tp, sp, act_bytes, recompute) -> analytic bytes per collective per step",
    "expert_parallel_check": "(size, ep) -> why this size's experts cannot be spread over ep ranks, or None",
    "moe_layers": "(model) -> its Mixture-of-Experts layers, in order",
    "context_parallel_check": "(size, cp) -> why this size's sequences cannot be split over cp ranks, or None",
    "context_parallel_modules": "(model) -> (the module with position_ids, its attention modules with attend)",
    "pipeline_check": "(size, stages, split | None) -> why the model cannot be cut so, or None",
    "pipeline_split": "(size, stages) -> blocks per stage when no split is given",
    "pipeline_stages": "(model, split, owned) -> this rank's stage modules",
    "pipeline_tied": "(stage) -> parameters tied to another stage's",
    "pipeline_activation_shape": "(size, batch) -> the activation a stage sends",
    "planner_shape": "(size) -> {n_layer, d_model, n_head, kv_heads, ffn, vocab, seq_len}: the planner's "
                     "transformer-layer model of this size",
    "profile_layers": "(model, size) -> {kind: (module, input maker)} for embedding, block and head, plus "
                      "tied_params, boundary_bytes_per_sample, n_blocks, tp_splits (the kinds its tensor-parallel "
                      "plan splits) and a target maker: `harness profile`",
}


class Workload(Protocol):
    name: str
    sizes: Mapping[str, Size]
    quality_metric: str            # e.g. "mae"; the key `quality()` returns
    higher_is_better: bool         # False for MAE / loss, True for IoU
    channels_last_dims: int | None  # 4 (NHWC), 5 (NDHWC) or None when channels_last doesn't apply
    unsupported_toggles: Mapping[str, str]  # toggle -> reason this workload can't do it
    data_format: str               # one line: the on-disk format the generator writes
    data_version: int              # bumped when the generator changes: datasets are cached by it
    reference: Reference           # reference facts the tests pin (parameter count, ttt step cap)
    threaded_loader: bool          # torch_loader(..., threads=N) reads a batch with N threads
    mlperf_benchmark: str          # MLLOG submission_benchmark (the compliance checker's benchmark name)
    mlperf_quality_key: str        # MLLOG key of the eval quality event (e.g. eval_accuracy, eval_error)
    mlperf_rules: str              # "hpc" (the checker's HPC 3.0.0 ruleset), a rules file in harness/rules/, or "" (none)
    mlperf_required_runs: int      # time-to-train runs a scored result needs (HPC 3.0: cosmoflow 10, deepcam 5)

    def build_model(self, size: Size) -> "nn.Module": ...

    def build_optimizer(self, model: "nn.Module", size: Size, global_batch: int,
                        steps_per_epoch: int) -> tuple[Any, Any]:
        """(optimizer, per-step LR scheduler) as the reference recipe."""

    def write_dataset(self, root: Path, size: Size, seed: int) -> None:
        """Write learnable synthetic data in the real on-disk format under root/{train,val}."""

    def n_samples(self, root: Path, split: str, size: Size) -> int:
        """Samples in a split: the index space of the harness's sample order."""

    def quality_target(self, size: Size, root: Path) -> float:
        """The target for this size and dataset (e.g. an LM's entropy rate + margin)."""

    def torch_loader(self, root: Path, split: str, size: Size,
                     batches: Iterable[Sequence[int]]) -> Iterable[tuple["torch.Tensor", "torch.Tensor"]]:
        """Yield (inputs, targets) CPU batches for the given index batches, in order."""

    def dali_loader(self, root: Path, split: str, size: Size, batches: Sequence[Sequence[int]],
                    device_id: int | None) -> Iterable[tuple["torch.Tensor", "torch.Tensor"]]:
        """Same samples as torch_loader, read by a DALI pipeline (CPU-only when device_id is None)."""

    def to_model_input(self, x: "torch.Tensor") -> "torch.Tensor":
        """A zero-copy view from the loader's layout to the model's logical layout (e.g. NDHWC -> NCDHW)."""

    def preprocess(self, x: "torch.Tensor", root: Path | None) -> "torch.Tensor":
        """Per-batch input transform on the device, after the host-to-device copy and
        to_model_input (e.g. log1p; DeepCAM's per-channel min-max with the statistics of the
        dataset under `root`). root None: an example_batch, whose values need no dataset statistics."""

    def read_set(self, root: Path, split: str, size: Size, path: str) -> ReadSet:
        """The files loader path `path` ("torch" or "dali") reads for `split`."""

    def example_batch(self, size: Size, n: int) -> tuple["torch.Tensor", "torch.Tensor"]:
        """A random (inputs, targets) CPU batch of n samples in the loader's layout and dtypes
        (TorchBench's example inputs): for tests and FLOP counts without a dataset."""

    def input_shape(self, size: Size) -> tuple[int, ...]:
        """One sample's input shape as the loader yields it."""

    def target_text(self, size: Size) -> str:
        """The quality target in words, for `harness info` (e.g. "0.124")."""

    def fsdp_units(self, model: "nn.Module") -> list["nn.Module"]:
        """Submodules sharded as FSDP units of their own (transformer blocks, encoder blocks):
        each is all-gathered just before it runs and freed after; the rest belongs to the root."""

    def recompute_units(self, model: "nn.Module") -> list:
        """The blocks parallel.recompute re-runs in backward: modules, or tuples of consecutive
        modules of one nn.Sequential recomputed together (harness/parallel/recompute.py)."""

    def loss(self, output: "torch.Tensor", target: "torch.Tensor") -> "torch.Tensor": ...

    def quality_sums(self, output: "torch.Tensor", target: "torch.Tensor") -> dict[str, float]:
        """Additive statistics of one eval batch (e.g. {'abs_err': .., 'count': ..})."""

    def quality(self, sums: Mapping[str, float]) -> float:
        """The quality metric from summed (and, multi-rank, all-reduced) statistics."""

    def flops_per_sample(self, size: Size) -> float:
        """Training FLOPs (forward + backward) per sample; formula documented and tested."""

    def mlperf_hyperparameters(self, size: Size, global_batch: int) -> dict[str, Any]:
        """MLLOG hyperparameter keys -> values (mlperf_hpc.md §2.3)."""
