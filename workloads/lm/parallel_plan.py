"""The LM's tensor-parallel plan (Megatron-LM; torchtitan's llama parallelize): inside each
block, attention and MLP are split column -> row, so each pair costs one all-reduce of the
block's activations forward and one backward; with sequence parallel the LayerNorm regions
between them are split along the sequence instead, and each all-reduce becomes an all-gather
before the pair plus a reduce-scatter after it (same volume, activations per rank / t).

Token and position embeddings, the final LayerNorm and the (tied) head stay replicated: every
tensor-parallel rank computes them on the same full-sequence tensors. With sequence parallel
the first block takes its rank's slice of the sequence and the final LayerNorm all-gathers it.
The harness owns the mesh and applies the plan (harness/parallel/strategies.py).
"""
from __future__ import annotations

import copy

import torch


def check(size, tp: int, sp: bool) -> str | None:
    """Why this size can't be split tp ways, or None."""
    for what, n in (("n_head", size.n_head), ("4 x d_model (the MLP width)", 4 * size.d_model)):
        if n % tp:
            return f"parallel.tp={tp} does not divide {what} = {n} of lm {size.name}"
    if sp and size.seq_len % tp:
        return f"parallel.sp: tp={tp} does not divide seq_len = {size.seq_len} of lm {size.name}"
    return None


@torch.no_grad()
def group_qkv_by_rank(attn, tp: int) -> None:
    """c_attn's output rows are [q | k | v], each n_head x head_dim. Column sharding cuts them
    into tp contiguous chunks, so reorder the rows to [q_0 k_0 v_0 | q_1 k_1 v_1 | ...] (heads
    of rank r together): each rank then computes whole heads, and chunk(3) in forward gives
    its q, k, v. A permutation of the same weights: the function is unchanged."""
    c = attn.c_attn.weight.shape[0] // 3
    per = c // tp
    order = torch.cat([torch.arange(part * c + r * per, part * c + (r + 1) * per)
                       for r in range(tp) for part in range(3)])
    attn.c_attn.weight.copy_(attn.c_attn.weight[order])
    attn.c_attn.bias.copy_(attn.c_attn.bias[order])


@torch.no_grad()
def _narrow(lin: torch.nn.Linear, rows: torch.Tensor | None, cols: slice | None) -> torch.nn.Linear:
    """A copy of `lin` keeping output rows `rows` (column parallel) or input columns `cols` (row
    parallel; the bias, added once after the all-reduce, kept whole)."""
    w = lin.weight[rows] if rows is not None else lin.weight[:, cols]
    out = torch.nn.Linear(w.shape[1], w.shape[0], bias=lin.bias is not None)
    out.weight.copy_(w)
    if lin.bias is not None:
        out.bias.copy_(lin.bias[rows] if rows is not None else lin.bias)
    return out


def shard_block(block, tp: int, rank: int = 0):
    """What tensor-parallel rank `rank` of `tp` computes in `block`, as a module of its own: a
    copy whose attention keeps the rank's heads (c_attn's q, k and v rows of those heads, c_proj's
    matching input columns) and whose MLP keeps its 4h/tp slice (mlp.0's rows, mlp.2's columns):
    the matmuls and attention plan() gives the rank, on one device, without the collectives
    (`harness profile` times it: tensor parallel's compute measured, not assumed to be 1/tp).
    Summed over ranks, the shards' attention (and MLP) outputs are the block's, less tp - 1
    biases: row parallel adds its bias once (tests/test_planner_shards.py)."""
    attn = block.attn
    c = attn.c_attn.weight.shape[0] // 3
    per = c // tp
    rows = torch.cat([torch.arange(part * c + rank * per, part * c + (rank + 1) * per) for part in range(3)])
    mine = slice(rank * per, (rank + 1) * per)
    width = block.mlp[0].weight.shape[0] // tp
    out = copy.deepcopy(block)
    out.attn.c_attn = _narrow(attn.c_attn, rows, None)
    out.attn.c_proj = _narrow(attn.c_proj, None, mine)
    out.mlp[0] = _narrow(block.mlp[0], torch.arange(rank * width, (rank + 1) * width), None)
    out.mlp[2] = _narrow(block.mlp[2], None, slice(rank * width, (rank + 1) * width))
    return out


def plan(model, tp: int, sp: bool) -> dict:
    """{module path: ParallelStyle} for torch.distributed.tensor.parallel.parallelize_module."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)
    for block in model.h:
        group_qkv_by_rank(block.attn, tp)
    out = {}
    for i in range(len(model.h)):
        b = f"h.{i}"
        if sp:
            out.update({
                f"{b}.ln_1": SequenceParallel(), f"{b}.ln_2": SequenceParallel(),
                f"{b}.attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                f"{b}.mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
                f"{b}.attn.c_proj": RowwiseParallel(output_layouts=Shard(1)),
                f"{b}.mlp.2": RowwiseParallel(output_layouts=Shard(1)),
            })
        else:
            out.update({f"{b}.attn.c_proj": RowwiseParallel(), f"{b}.mlp.2": RowwiseParallel()})
        out.update({f"{b}.attn.c_attn": ColwiseParallel(), f"{b}.mlp.0": ColwiseParallel()})
    if sp:  # the residual stream between blocks is each rank's slice of the sequence
        # local tensors in and out: the residual adds inside the blocks take plain tensors
        out["h.0"] = PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Shard(1),),
                                        use_local_output=True)
        out["ln_f"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),),
                                         use_local_output=True)
    return out


def split_kinds(styles: dict) -> list[str]:
    """The planner's layer kinds (embedding, block, head: profile_layers) whose weights a plan
    from plan() splits, i.e. the kinds a tensor-parallel member computes a share of. This plan
    splits only the blocks; a vocabulary-parallel embedding or head (Megatron's, torchtitan's)
    would name its module here and the planner would price it / t with its collectives."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    kinds = set()
    for path, style in styles.items():
        if isinstance(style, (ColwiseParallel, RowwiseParallel)):
            kinds.add("block" if path.startswith("h.") else "head" if path.startswith("lm_head") else "embedding")
    return sorted(kinds)


def volume(size, batch: int, tp: int, sp: bool, act_bytes: int, recompute: str = "none") -> dict[str, int]:
    """Collective sizes S per training step of this plan (nccl-tests' S: the whole array), for
    a local batch of `batch` sequences. Each block's activation is S_a = batch x seq x d_model
    x act_bytes. Megatron TP (Korthikanti et al. 2022; ../shared/reference/parallelism.md §1):
    4 all-reduces of S_a per block (attention and MLP outputs forward, their inputs' gradients
    backward). Sequence parallel: each becomes an all-gather before the pair and a
    reduce-scatter after it, 4 of each per block, plus one all-gather into the final
    LayerNorm forward and one of the first block's input gradient backward, and one
    all-reduce of each sequence-parallel LayerNorm parameter's gradient (2 LayerNorms x
    (weight, bias) x d_model fp32 per block). Full recomputation (parallel.recompute=full) runs
    each block's forward again in backward, its collectives too, up to the last tensor backward
    needs (torch's non-reentrant checkpoint stops there): the attention's closing all-reduce
    again, not the MLP's, which feeds only the residual sum (measured: +1 all-reduce of S_a per
    block); with sequence parallel both all-gathers and the attention's reduce-scatter.
    Selective keeps their outputs (harness/parallel/recompute.py)."""
    s_a = batch * size.seq_len * size.d_model * act_bytes
    L = size.n_layer
    full = recompute == "full"
    if not sp:
        return {"all_reduce": (4 * L + (L if full else 0)) * s_a}
    return {"all_gather": (4 * L + 2 + (2 * L if full else 0)) * s_a,
            "reduce_scatter": (4 * L + (L if full else 0)) * s_a,
            "all_reduce": L * 2 * 2 * size.d_model * 4}
