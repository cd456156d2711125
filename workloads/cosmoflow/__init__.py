"""CosmoFlow: regress 4 cosmological parameters from a 4-channel 3D density volume.

Reference: MLPerf HPC v1.0+ (mlcommons/hpc cosmoflow, TF/Keras) and NVIDIA's PyTorch port.
Facts: ../shared/reference/mlperf_hpc.md §1.2. Torch-free at import time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.base import ReadSet, Reference
from workloads.cosmoflow.spec import CosmoFlowSize, SIZES


@dataclass(frozen=True)
class CosmoFlow:
    name: str = "cosmoflow"
    sizes: dict = field(default_factory=lambda: SIZES)
    quality_metric: str = "mae"
    higher_is_better: bool = False
    channels_last_dims: int = 5          # NDHWC: torch.channels_last_3d
    unsupported_toggles: dict = field(default_factory=dict)
    mlperf_benchmark: str = "cosmoflow"  # submission_benchmark for the HPC compliance checker
    data_format: str = "one .npy per sample: data-N.npy int16 (D, H, W, 4) counts + label-N.npy float32[4]; loaders apply log1p (on the device)"
    data_version: int = 2  # 2: tiny writes 1536 training samples (was 384)
    mlperf_quality_key: str = "eval_error"
    mlperf_rules: str = "hpc"
    mlperf_required_runs: int = 10  # HPC v3.0 (mlperf_logging benchmark_meta)
    reference: Reference = Reference(full_size="full", full_params=8_907_556, larger_size="small",
                                     ttt_step_cap=3000, ttt_eval_every=96)
    threaded_loader: bool = True  # its PyTorch loader fills a batch with the rank's threads

    # model ------------------------------------------------------------------------------------
    def build_model(self, size: CosmoFlowSize):
        from workloads.cosmoflow.model import CosmoFlowNet
        return CosmoFlowNet(size)

    def build_optimizer(self, model, size: CosmoFlowSize, global_batch: int, steps_per_epoch: int):
        from workloads.cosmoflow.optim import build_optimizer
        return build_optimizer(model, size, global_batch, steps_per_epoch)

    def loss(self, output, target):
        import torch.nn.functional as F
        return F.mse_loss(output, target)

    def quality_sums(self, output, target) -> dict[str, float]:
        # MAE over all 4 parameters of every sample, as Keras' mean_absolute_error
        err = (output.float() - target.float()).abs()
        return {"abs_err": float(err.sum()), "count": float(err.numel())}

    def quality(self, sums) -> float:
        return sums["abs_err"] / sums["count"]

    def flops_per_sample(self, size: CosmoFlowSize) -> float:
        from workloads.cosmoflow.flops import train_flops_per_sample
        return train_flops_per_sample(size)

    # data -------------------------------------------------------------------------------------
    def write_dataset(self, root: Path, size: CosmoFlowSize, seed: int) -> None:
        from workloads.cosmoflow.synth import write_dataset
        write_dataset(root, size, seed)

    def quality_target(self, size: CosmoFlowSize, root: Path) -> float:
        return size.quality_target

    def n_samples(self, root: Path, split: str, size: CosmoFlowSize) -> int:
        return len(self.files(root, split))

    def files(self, root: Path, split: str) -> list[Path]:
        from workloads.cosmoflow.loaders import data_files
        return data_files(root, split)

    def torch_loader(self, root, split, size, batches, threads: int | None = None):
        from workloads.cosmoflow.loaders import torch_loader
        return torch_loader(root, split, size, batches, threads=threads)

    def read_set(self, root, split, size, path) -> ReadSet:
        from workloads.cosmoflow.loaders import label_file
        return ReadSet(per_sample=[[f, label_file(f)] for f in self.files(root, split)])  # both paths alike

    def example_batch(self, size: CosmoFlowSize, n: int):
        import torch
        return torch.randint(0, 9, (n, *size.input_shape), dtype=torch.int16), torch.rand(n, 4)

    def input_shape(self, size: CosmoFlowSize) -> tuple[int, ...]:
        return size.input_shape

    def target_text(self, size: CosmoFlowSize) -> str:
        return f"{size.quality_target}"

    def dali_loader(self, root, split, size, batches, device_id):
        from workloads.cosmoflow.loaders import dali_loader
        return dali_loader(root, split, size, batches, device_id)

    def fsdp_units(self, model):
        """Each convolution with its parameters; the dense head stays with the root."""
        return [m for m in model.convs if any(True for _ in m.parameters(recurse=False))]

    def recompute_units(self, model):
        """What parallel.recompute re-runs in backward: each conv -> LeakyReLU -> MaxPool triple of
        the Sequential together (the convolution alone would keep its output for the activation)."""
        layers = list(model.convs)
        return [tuple(layers[i:i + 3]) for i in range(0, len(layers), 3)]

    def to_model_input(self, x):
        # loader layout N,D,H,W,C (as stored) -> logical N,C,D,H,W. A view: its memory is
        # already channels_last_3d, so the NDHWC toggle costs no copy here (NVIDIA's as_strided).
        return x.permute(0, 4, 1, 2, 3)

    def preprocess(self, x, root):
        # int16 counts -> log(1 + x) in float32 on the device (reference: apply_log). Pointwise,
        # so the result keeps the input's memory layout (channels_last_3d stays channels_last_3d).
        import torch
        return torch.log1p(x.float())

    def mlperf_hyperparameters(self, size: CosmoFlowSize, global_batch: int) -> dict[str, Any]:
        return {
            "global_batch_size": global_batch,
            "opt_name": "sgd",
            "opt_base_learning_rate": size.base_lr * global_batch / size.base_batch,
            "opt_learning_rate_warmup_epochs": size.warmup_epochs,
            "opt_learning_rate_warmup_factor": global_batch / size.base_batch,
            "opt_learning_rate_decay_boundary_epochs": list(size.decay_epochs),
            "opt_learning_rate_decay_factor": list(size.decay_factors),
            "dropout": size.dropout,
            "opt_weight_decay": 0.0,
        }


WORKLOAD = CosmoFlow()
