"""The LM cut into pipeline stages (torchtitan's pipeline_llama: the whole model is built on
every rank from the same seed, then each stage keeps its own modules): the token and position
embeddings on the first stage, a run of consecutive transformer blocks on every stage, the
final LayerNorm and the head on the last (the loss is computed on its output by the schedule).

The head's weight is tied to the token embedding. Split over ranks, the two become copies on
the first and last stage, equal at init (same seed); harness/parallel/pipeline.py sums their gradients
over those two ranks every step (Megatron's embedding group), so both take the same update and
the pipeline trains the same function as one device.
"""
from __future__ import annotations

import torch
from torch import nn


def even_split(n_blocks: int, stages: int) -> list[int]:
    """Blocks per stage, as even as possible, the earlier stages taking the remainder."""
    q, r = divmod(n_blocks, stages)
    return [q + (1 if i < r else 0) for i in range(stages)]


def check(size, stages: int, split: list[int] | None) -> str | None:
    """Why this size can't be cut into `stages` stages (with this split), or None."""
    if stages > size.n_layer:
        return (f"parallel.pp x pp_virtual = {stages} stages but lm {size.name} has {size.n_layer} blocks; "
                f"every stage needs >= 1")
    if split is not None and sum(split) != size.n_layer:
        return (f"parallel.pp_split {','.join(map(str, split))} sums to {sum(split)}; lm {size.name} has "
                f"{size.n_layer} blocks")
    return None


class Stage(nn.Module):
    """Blocks [first_block, first_block + n) of a GPT, with the embeddings if it is the first
    stage and the final LayerNorm and head if it is the last. Input: token ids (first stage) or
    the residual stream (batch, seq, d_model); output: the residual stream or the logits."""

    def __init__(self, model, blocks: range, first: bool, last: bool):
        super().__init__()
        self.block_ids = list(blocks)
        self.wte = model.wte if first else None
        self.wpe = model.wpe if first else None
        self.drop = model.drop if first else None
        self.h = nn.ModuleList(model.h[i] for i in blocks)
        self.ln_f = model.ln_f if last else None
        self.lm_head = model.lm_head if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.wte is not None:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.drop(self.wte(x) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        if self.lm_head is not None:
            x = self.lm_head(self.ln_f(x))
        return x


def stages(model, split: list[int], owned: list[int]) -> list[Stage]:
    """The stages with indices `owned` of the GPT `model` cut by `split` (blocks per stage)."""
    starts = [sum(split[:i]) for i in range(len(split))]
    return [Stage(model, range(starts[s], starts[s] + split[s]), first=s == 0, last=s == len(split) - 1)
            for s in owned]


def tied_parameters(stage: Stage) -> list[torch.nn.Parameter]:
    """The stage's copy of the tied token-embedding / head weight (first and last stage)."""
    return [m.weight for m in (stage.wte, stage.lm_head) if m is not None]


def activation_shape(size, batch: int) -> tuple[int, int, int]:
    """What crosses a stage boundary for `batch` sequences: the residual stream, fp32 (the
    embeddings are fp32 and autocast's bf16 block outputs are added onto it in fp32)."""
    return (batch, size.seq_len, size.d_model)
