"""LM: a GPT-style causal decoder on token shards from a seeded Markov source.

The source's
entropy rate is an exact lower bound on the validation loss. Torch-free at import time."""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.base import ReadSet, Reference
from workloads.lm.spec import SIZES_RAW, LMSize


def n_params_no_pos(s: LMSize) -> int:
    """N of PaLM appendix B: all parameters a token passes through, except the position
    embeddings (the tied token embedding counts once). Per layer: LN 2d, QKV d*3d+3d, proj
    d*d+d, LN 2d, MLP 8d^2+5d. A Mixture-of-Experts layer counts its router (d*E) and only the
    top_k experts a token is sent to (the active parameters, as Switch counts FLOPs)."""
    d = s.d_model
    mlp = 8 * d * d + 5 * d
    moe_layers = sum(s.is_moe_block(i) for i in range(s.n_layer))
    per_layer = 4 * d * d + 8 * d  # attention, its projection and the two LayerNorms
    return (s.vocab * d + s.n_layer * per_layer + (s.n_layer - moe_layers) * mlp
            + moe_layers * (d * s.n_experts + s.top_k * mlp) + 2 * d)


@dataclass(frozen=True)
class LM:
    name: str = "lm"
    sizes: dict = field(default_factory=lambda: SIZES_RAW)
    quality_metric: str = "val_loss"      # nats/token (log perplexity), MLPerf LLM convention
    higher_is_better: bool = False
    channels_last_dims: None = None      # no convolutions: the NHWC toggle does not apply
    unsupported_toggles: dict = field(default_factory=dict)
    mlperf_benchmark: str = "lm"
    data_format: str = "uint16 token shards (shard-N.npy), 1024 windows of seq_len+1 tokens each; source.json gives the Markov source's entropy rate"
    data_version: int = 1
    mlperf_quality_key: str = "eval_accuracy"
    mlperf_rules: str = "lm_open.yaml"  # no HPC ruleset: the project's own open rules, in the checker's language
    mlperf_required_runs: int = 10      # the stricter HPC count
    # nanoGPT's GPT-2 small with bias, vocab 50304
    reference: Reference = Reference(full_size="gpt2", full_params=124_475_904, larger_size="small",
                                     ttt_step_cap=1500, ttt_eval_every=50)
    threaded_loader: bool = False

    def quality_target(self, size: LMSize, root: Path) -> float:
        """Entropy rate of this dataset's source + the size's margin (nats/token)."""
        src = json.loads((Path(root) / "source.json").read_text())
        return src["entropy_rate_nats"] + size.target_margin

    def build_model(self, size: LMSize):
        from workloads.lm.model import GPT
        return GPT(size)

    def build_optimizer(self, model, size: LMSize, global_batch: int, steps_per_epoch: int):
        from workloads.lm.optim import build_optimizer
        return build_optimizer(model, size)

    def loss(self, output, target):
        import torch.nn.functional as F
        return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1))

    def quality_sums(self, output, target) -> dict[str, float]:
        import torch.nn.functional as F
        nll = F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1), reduction="sum")
        return {"nll": float(nll), "tokens": float(target.numel())}

    def quality(self, sums) -> float:
        return sums["nll"] / sums["tokens"]

    def flops_per_sample(self, size: LMSize) -> float:
        """Per sequence of T tokens: T * (6N + 12*L*H*Q*T), PaLM appendix B (nanoGPT
        estimate_mfu): 6N for the matmuls with weights (fwd+bwd), 12LHQT for attention's
        QK^T and AV (fwd+bwd, full T x T as PaLM counts it)."""
        q = size.d_model // size.n_head
        return size.seq_len * (6 * n_params_no_pos(size) + 12 * size.n_layer * size.n_head * q * size.seq_len)

    def write_dataset(self, root: Path, size: LMSize, seed: int) -> None:
        from workloads.lm.markov import write_dataset
        write_dataset(root, size, seed)

    def n_samples(self, root: Path, split: str, size: LMSize) -> int:
        from workloads.lm.loaders import n_windows
        return n_windows(root, split, size)

    def torch_loader(self, root, split, size, batches):
        from workloads.lm.loaders import torch_loader
        return torch_loader(root, split, size, batches)

    def dali_loader(self, root, split, size, batches, device_id):
        from workloads.lm.loaders import dali_loader
        return dali_loader(root, split, size, batches, device_id)

    def read_set(self, root, split, size, path) -> ReadSet:
        """Windows of token shards: the limit is reading the shards whole, in order (uint16 tokens)."""
        from workloads.lm.loaders import shard_files
        return ReadSet(shards=shard_files(root, split), sample_bytes=(size.seq_len + 1) * 2)

    def example_batch(self, size: LMSize, n: int):
        import torch
        return (torch.randint(0, size.vocab, (n, size.seq_len)), torch.randint(0, size.vocab, (n, size.seq_len)))

    def input_shape(self, size: LMSize) -> tuple[int, ...]:
        return (size.seq_len,)

    def target_text(self, size: LMSize) -> str:
        return f"entropy rate of the data + {size.target_margin} nats/token"

    def tensor_parallel_check(self, size: LMSize, tp: int, sp: bool) -> str | None:
        if size.n_experts:
            return (f"parallel.tp on lm {size.name}: the tensor-parallel plan splits dense MLPs; "
                    f"spread its experts with parallel.ep instead")
        from workloads.lm.parallel_plan import check
        return check(size, tp, sp)

    def expert_parallel_check(self, size: LMSize, ep: int) -> str | None:
        """Why this size's experts can't be spread over `ep` ranks, or None."""
        if not size.n_experts:
            moe = [n for n, s in self.sizes.items() if s.n_experts]
            return f"parallel.ep={ep} needs a Mixture-of-Experts size ({', '.join(moe)}); lm {size.name} is dense"
        if size.n_experts % ep:
            valid = ", ".join(str(n) for n in range(1, size.n_experts + 1) if size.n_experts % n == 0)
            return f"parallel.ep={ep} does not divide the {size.n_experts} experts of lm {size.name}; valid: {valid}"
        return None

    def context_parallel_check(self, size: LMSize, cp: int) -> str | None:
        """Why this size's sequences can't be split over `cp` ranks, or None."""
        if size.n_experts:
            return (f"parallel.cp on lm {size.name}: expert capacity is set per sequence; context parallel "
                    f"runs dense sizes")
        if size.seq_len % (2 * cp):
            return (f"parallel.cp={cp} needs seq_len divisible by 2*cp={2 * cp} (two balanced chunks per rank); "
                    f"lm {size.name} has seq_len {size.seq_len}")
        return None

    def context_parallel_modules(self, model) -> tuple:
        """(the model, its attention modules): what context parallel points at this rank's part
        of the sequence (workloads/lm/model.py: position_ids, attend)."""
        from workloads.lm.model import CausalSelfAttention
        return model, [m for m in model.modules() if isinstance(m, CausalSelfAttention)]

    def moe_layers(self, model) -> list:
        """The model's Mixture-of-Experts layers (workloads/lm/moe.py), in order."""
        from workloads.lm.moe import MoE
        return [m for m in model.modules() if isinstance(m, MoE)]

    def tensor_parallel_plan(self, model, tp: int, sp: bool) -> dict:
        """{module path: ParallelStyle}: Megatron's column -> row split of attention and MLP
        (workloads/lm/parallel_plan.py)."""
        from workloads.lm.parallel_plan import plan
        return plan(model, tp, sp)

    def tensor_parallel_shard(self, block, tp: int):
        """One tensor-parallel rank's share of a transformer block, as a module of its own
        (workloads/lm/parallel_plan.py shard_block): what `harness profile` times for tp."""
        from workloads.lm.parallel_plan import shard_block
        return shard_block(block, tp)

    def tensor_parallel_volume(self, size: LMSize, batch: int, tp: int, sp: bool, act_bytes: int,
                               recompute: str = "none") -> dict:
        from workloads.lm.parallel_plan import volume
        return volume(size, batch, tp, sp, act_bytes, recompute)

    def pipeline_check(self, size: LMSize, stages: int, split: list[int] | None) -> str | None:
        from workloads.lm.pipeline_split import check
        return check(size, stages, split)

    def pipeline_split(self, size: LMSize, stages: int) -> list[int]:
        """Blocks per stage when parallel.pp_split is not given: as even as possible."""
        from workloads.lm.pipeline_split import even_split
        return even_split(size.n_layer, stages)

    def pipeline_stages(self, model, split: list[int], owned: list[int]) -> list:
        """This rank's stage modules (embeddings first, head last: workloads/lm/pipeline_split.py)."""
        from workloads.lm.pipeline_split import stages
        return stages(model, split, owned)

    def pipeline_tied(self, stage) -> list:
        """Parameters of `stage` tied to a parameter of another stage (the embedding and head)."""
        from workloads.lm.pipeline_split import tied_parameters
        return tied_parameters(stage)

    def pipeline_activation_shape(self, size: LMSize, batch: int) -> tuple[int, ...]:
        from workloads.lm.pipeline_split import activation_shape
        return activation_shape(size, batch)

    def planner_shape(self, size: LMSize) -> dict[str, int]:
        """The planner's transformer-layer model of this size: a GELU MLP of width 4h has 8h^2
        parameters, as a SwiGLU of width 8h/3 (the planner's layer formulas are SwiGLU's)."""
        return {"n_layer": size.n_layer, "d_model": size.d_model, "n_head": size.n_head, "kv_heads": size.n_head,
                "ffn": 8 * size.d_model // 3, "vocab": size.vocab, "seq_len": size.seq_len}

    def profile_layers(self, model, size: LMSize) -> dict[str, Any]:
        """What `harness profile` times per layer kind: the pipeline's own stage modules
        (workloads/lm/pipeline_split.py), so a profile measures exactly what a stage runs."""
        import torch

        from workloads.lm.parallel_plan import plan, split_kinds
        from workloads.lm.pipeline_split import Stage
        n = size.n_layer
        tokens = lambda mb: torch.randint(0, size.vocab, (mb, size.seq_len))  # noqa: E731
        stream = lambda mb: torch.randn(mb, size.seq_len, size.d_model, requires_grad=True)  # noqa: E731
        return {"layers": {"embedding": (Stage(model, range(0, 0), first=True, last=False), tokens),
                           "block": (Stage(model, range(0, 1), first=False, last=False), stream),
                           "head": (Stage(model, range(n, n), first=False, last=True), stream)},
                "target": tokens, "n_blocks": n, "seq_len": size.seq_len, "d_model": size.d_model,
                "tied_params": model.lm_head.weight.numel(),  # the head's weight is the embedding's
                # what this workload's tensor-parallel plan splits (the rest stays replicated)
                "tp_splits": split_kinds(plan(copy.deepcopy(model), 1, False)),
                "boundary_bytes_per_sample": size.seq_len * size.d_model * 4}  # fp32 residual stream

    def fsdp_units(self, model):
        return list(model.h)  # the transformer blocks (torchtitan shards each block)

    def recompute_units(self, model):
        """What parallel.recompute re-runs in backward: each transformer block (torchtitan's unit)."""
        return list(model.h)

    def to_model_input(self, x):
        return x

    def preprocess(self, x, root):
        return x

    def mlperf_hyperparameters(self, size: LMSize, global_batch: int) -> dict[str, Any]:
        return {"global_batch_size": global_batch, "opt_name": "adamw", "opt_base_learning_rate": size.lr,
                "opt_learning_rate_warmup_steps": size.warmup_steps, "opt_learning_rate_decay_steps": size.decay_steps,
                "opt_learning_rate_decay_schedule": "cosine", "opt_adamw_beta_1": 0.9, "opt_adamw_beta_2": 0.95,
                "opt_adamw_weight_decay": size.weight_decay, "max_sequence_length": size.seq_len}


WORKLOAD = LM()
