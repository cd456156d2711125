"""Context parallel (parallel.cp, LM): each rank of a cp group holds seq_len / cp tokens of every
sequence of its replica's batch, and attention gathers the keys and values of the whole
sequence from the group (parallel.cp_method=allgather: torchtitan's default, Llama 3's method,
arXiv 2407.21783 §3.3.2).

Causal load balance (torch's context_parallel, Llama 3): the sequence is cut into 2*cp chunks
and rank i holds chunks i and 2*cp-1-i, so every rank has as many (query, key) pairs under the
causal mask as every other. Queries stay local; K and V are all-gathered per layer (forward)
along the sequence, their gradients reduce-scattered back (backward); the mask is causal on
the tokens' true positions, and the position embedding reads the same positions.

torch.distributed.tensor.experimental.context_parallel does this on CUDA with the flash and
efficient SDPA kernels only; on CPU (and with any kernel) this module's path is used: an
all-gather whose backward is the reduce-scatter (`_GatherSeq`).

The gradients are reduced over dp x cp together (the cp ranks of a replica hold the same
parameters; torchtitan's dp_shard_cp): each rank's loss is the mean over its tokens, the
ranks hold equal token counts, so the data-parallel mean over dp x cp is the global batch's
mean gradient. Evaluation runs whole sequences, outside the context.

The only module that reads parallel.cp and cp_method (the mesh layout: harness/config/parallel_config.py).
"""
from __future__ import annotations

import contextlib

import torch
import torch.distributed as td
import torch.nn.functional as F


class _GatherSeq(torch.autograd.Function):
    """All-gather along dim 0 over `group` (the functional all_gather_tensor, waited: an op
    selective recomputation can keep, harness/parallel/recompute.py); backward: the gradient's
    reduce-scatter through c10d's synchronous reduce_scatter_tensor, each rank keeping its own
    chunk's sum.

    Why not torch's functional all_gather_single_autograd (used here before): on gloo, torch
    2.13, its backward's functional reduce-scatter corrupted memory. Measured (2026-12-04, lm
    tiny's cp2 block, 2 ranks, one held to 0.5 CPU, 3000 forward + backward passes a run): 2 of
    3 runs died of SIGSEGV, in wait_tensor or later in unrelated code (`harness profile`: 1 of
    4); with the c10d reduce-scatter 0 of 6 (3 of them with a c10d all-gather forward), the
    outputs and gradients the same bit for bit. torch.distributed.nn's _all_gather_base raises
    in backward on gloo."""

    @staticmethod
    def forward(ctx, t: torch.Tensor, group) -> torch.Tensor:
        # imported here, not at the top: the functional collectives take 25-40 ms to import
        # (measured 2026-12-04) and every run imports this module, CP or not
        from torch.distributed import _functional_collectives as funcol
        ctx.group = group
        return funcol.all_gather_tensor(t.contiguous(), 0, group).wait()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out = grad.new_empty((grad.shape[0] // td.get_world_size(ctx.group), *grad.shape[1:]))
        td.reduce_scatter_tensor(out, grad.contiguous(), group=ctx.group)
        return out, None


def chunk_positions(seq_len: int, cp: int, rank: int) -> torch.Tensor:
    """The positions rank `rank` of a cp group holds: chunks rank and 2*cp-1-rank of 2*cp."""
    c = seq_len // (2 * cp)
    return torch.cat([torch.arange(rank * c, (rank + 1) * c),
                      torch.arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c)])


class ContextParallel:
    """One rank's context: its positions, the group's (in all-gather order), the causal mask."""

    def __init__(self, model, attention: list, group, rank: int, cp: int, seq_len: int, device):
        self.model, self.attention, self.group, self.cp = model, attention, group, cp
        self.positions = chunk_positions(seq_len, cp, rank).to(device)
        keys = torch.cat([chunk_positions(seq_len, cp, r) for r in range(cp)]).to(device)
        self.allowed = self.positions[:, None] >= keys[None, :]  # (S/cp, S): True = may attend
        self._masks: dict[torch.dtype, torch.Tensor] = {}

    def shard(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's tokens of every sequence (dim 1) of a (batch, seq) input and target."""
        return x[:, self.positions], y[:, self.positions]

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """(B, H, S/cp, D) -> (B, H, S, D), in the group's order; backward: reduce-scatter.
        (The all-gather concatenates on dim 0 only: the sequence is moved there.)"""
        full = _GatherSeq.apply(t.permute(2, 0, 1, 3).contiguous(), self.group)
        return full.permute(1, 2, 0, 3)

    def mask(self, dtype: torch.dtype) -> torch.Tensor:
        """The causal mask as an additive one (0 or -inf) in the queries' dtype, made once: CPU's
        SDPA turns a boolean mask into that form on every call and keeps the copy for backward
        (S/cp x S values per layer, measured: 8.4 MB a layer on long-tiny at cp=2)."""
        if dtype not in self._masks:
            m = torch.zeros(self.allowed.shape, dtype=dtype, device=self.allowed.device)
            self._masks[dtype] = m.masked_fill_(~self.allowed, float("-inf"))
        return self._masks[dtype]

    def attend(self, q, k, v, dropout_p: float = 0.0) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, self.gather(k), self.gather(v), attn_mask=self.mask(q.dtype),
                                              dropout_p=dropout_p)

    @contextlib.contextmanager
    def active(self):
        """The model runs this rank's part of the sequences: attention through `attend`, the
        position embedding at this rank's positions."""
        self.model.position_ids = self.positions
        for m in self.attention:
            m.attend = self.attend
        try:
            yield
        finally:
            self.model.position_ids = None
            for m in self.attention:
                m.attend = None


def group(ts):
    """The cp process group of this rank: ranks of one (pp, dp, tp) coordinate, laid out
    (dp, cp, tp) row-major (harness/config/parallel_config.py). A mesh of its own, built once."""
    from torch.distributed.device_mesh import init_device_mesh
    p = ts.cfg.parallel
    mesh = init_device_mesh(ts.device.type, (ts.world // (p.cp * p.tp), p.cp, p.tp), mesh_dim_names=("dp", "cp", "tp"))
    return mesh["cp"].get_group(), mesh["cp"].get_local_rank()


# -- builder step (harness/run/build.py) -----------------------------------------------------------
def apply_context_parallel(ts) -> None:
    p = ts.cfg.parallel
    if p.cp == 1:
        return
    model, attention = ts.workload.context_parallel_modules(ts.model)
    g, rank = group(ts)
    size = ts.workload.sizes[ts.cfg.size]
    ts.context = ContextParallel(model, attention, g, rank, p.cp, size.seq_len, ts.device)


def volume(size, local_batch: int, cp: int, tp: int, act_bytes: int, recompute: str = "none") -> dict[str, int]:
    """Collective sizes S per step (nccl-tests' convention: the whole gathered array): per layer
    forward, K and V all-gathered, each b*s*(h/tp) values; backward, their gradients
    reduce-scattered, the same size. Per rank on the wire that is 2*b*s*h_kv*d*bytes*(cp-1)/cp
    each way, the issue's figure (h_kv*d = h here: no grouped-query attention). Full
    recomputation runs the forward again in backward, all-gathers included (selective keeps
    the gathered K and V: harness/parallel/recompute.py)."""
    one = local_batch * size.seq_len * (size.d_model // tp) * act_bytes
    gathers = 2 if recompute == "full" else 1
    return {"all_gather": gathers * 2 * size.n_layer * one, "reduce_scatter": 2 * size.n_layer * one}
