"""Toy: a fourth workload that lives outside the repository's workloads/ package, used by
tests/test_extensibility.py to show that registering one touches nothing else.

Linear regression of y = 0.05 * sum(x) from 8 uniform features, one .npy per sample (9 float32:
the features then the target). Torch-free at import time, as every workload package is.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workloads.base import ReadSet, Reference

FEATURES = 8


@dataclass(frozen=True)
class ToySize:
    name: str
    batch_size: int
    n_train: int
    n_val: int
    quality_target: float = 0.05


SIZES = {"tiny": ToySize("tiny", 8, 256, 64), "small": ToySize("small", 16, 512, 64)}


def _files(root: Path, split: str) -> list[Path]:
    from workloads.manifest import split_files
    return split_files(root, split, "s-", ".npy")


@dataclass(frozen=True)
class Toy:
    name: str = "toy"
    sizes: dict = field(default_factory=lambda: SIZES)
    quality_metric: str = "mae"
    higher_is_better: bool = False
    channels_last_dims: None = None
    unsupported_toggles: dict = field(default_factory=lambda: {"dali": "the toy has no DALI pipeline"})
    data_format: str = "one .npy per sample: float32[9] (8 features, then the target)"
    data_version: int = 1
    reference: Reference = Reference(full_size="small", full_params=FEATURES + 1, larger_size="small",
                                     ttt_step_cap=400, ttt_eval_every=32)
    threaded_loader: bool = False
    mlperf_benchmark: str = "toy"
    mlperf_quality_key: str = "eval_error"
    mlperf_rules: str = ""  # no rules: its logs are not checked
    mlperf_required_runs: int = 3

    def build_model(self, size):
        import torch
        m = torch.nn.Linear(FEATURES, 1)
        torch.nn.init.zeros_(m.weight)
        torch.nn.init.zeros_(m.bias)
        return m

    def build_optimizer(self, model, size, global_batch, steps_per_epoch):
        import torch
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)

    def write_dataset(self, root: Path, size, seed: int) -> None:
        import numpy as np

        from workloads.manifest import write_manifest
        rng = np.random.default_rng(seed)
        for split, n in (("train", size.n_train), ("val", size.n_val)):
            (root / split).mkdir(parents=True)
            for i in range(n):
                x = rng.random(FEATURES, dtype=np.float32)
                np.save(root / split / f"s-{i:05d}.npy", np.append(x, np.float32(0.05 * x.sum())))
        write_manifest(root)

    def n_samples(self, root, split, size) -> int:
        return len(_files(root, split))

    def quality_target(self, size, root) -> float:
        return size.quality_target

    def torch_loader(self, root, split, size, batches):
        import numpy as np
        import torch
        files = _files(root, split)
        for idx in batches:
            a = torch.from_numpy(np.stack([np.load(files[i]) for i in idx]))
            yield a[:, :FEATURES].contiguous(), a[:, FEATURES:].contiguous()

    def dali_loader(self, root, split, size, batches, device_id):
        raise NotImplementedError("the toy has no DALI pipeline")

    def read_set(self, root, split, size, path) -> ReadSet:
        return ReadSet(per_sample=[[f] for f in _files(root, split)])

    def example_batch(self, size, n):
        import torch
        x = torch.rand(n, FEATURES)
        return x, 0.05 * x.sum(dim=1, keepdim=True)

    def input_shape(self, size) -> tuple[int, ...]:
        return (FEATURES,)

    def target_text(self, size) -> str:
        return f"MAE {size.quality_target}"

    def fsdp_units(self, model):
        return []  # one linear layer: the root is the only unit

    def to_model_input(self, x):
        return x

    def preprocess(self, x, root):
        return x

    def loss(self, output, target):
        import torch.nn.functional as F
        return F.mse_loss(output, target)

    def quality_sums(self, output, target) -> dict[str, float]:
        err = (output.float() - target.float()).abs()
        return {"abs_err": float(err.sum()), "count": float(err.numel())}

    def quality(self, sums) -> float:
        return sums["abs_err"] / sums["count"]

    def flops_per_sample(self, size) -> float:
        """One Linear(8, 1): forward 2*8 multiply-adds as FLOPs, backward the weight gradient 2*8
        (the input needs no gradient); the bias adds are not counted (torch's flop counter)."""
        return 4.0 * FEATURES

    def mlperf_hyperparameters(self, size, global_batch: int) -> dict:
        return {"global_batch_size": global_batch, "opt_name": "sgd", "opt_base_learning_rate": 0.05}


WORKLOAD = Toy()
