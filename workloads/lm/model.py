"""GPT-style decoder (nanoGPT architecture): learned positional embeddings, pre-LayerNorm
blocks, causal multi-head attention through scaled_dot_product_attention, GELU MLP (4x),
token embedding tied to the output projection. Single-device; toggles applied outside."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workloads.lm.spec import LMSize


class CausalSelfAttention(nn.Module):
    def __init__(self, s: LMSize):
        super().__init__()
        self.n_head = s.n_head
        self.head_dim = s.d_model // s.n_head
        self.c_attn = nn.Linear(s.d_model, 3 * s.d_model)
        self.c_proj = nn.Linear(s.d_model, s.d_model)
        self.dropout = s.dropout
        # context parallel (harness/parallel/context.py) sets this while a training step runs:
        # attend(q, k, v, dropout_p) over this rank's queries and the whole sequence's keys
        self.attend = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        # chunk(3) and -1 heads: the same split as nanoGPT's split(C) on one device, and the
        # local heads when c_attn is column-sharded over tensor-parallel ranks (parallel_plan.py)
        q, k, v = self.c_attn(x).chunk(3, dim=2)
        q, k, v = (t.view(B, T, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        p = self.dropout if self.training else 0.0
        y = (self.attend(q, k, v, p) if self.attend is not None
             else F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p))
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, -1))


class Block(nn.Module):
    def __init__(self, s: LMSize, moe: bool = False):
        super().__init__()
        self.ln_1 = nn.LayerNorm(s.d_model)
        self.attn = CausalSelfAttention(s)
        self.ln_2 = nn.LayerNorm(s.d_model)
        if moe:  # Switch/GShard: the MLP becomes E experts behind a top-k router
            from workloads.lm.moe import MoE
            self.mlp = MoE(s)
        else:
            self.mlp = nn.Sequential(nn.Linear(s.d_model, 4 * s.d_model), nn.GELU(),
                                     nn.Linear(4 * s.d_model, s.d_model), nn.Dropout(s.dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, s: LMSize):
        super().__init__()
        self.wte = nn.Embedding(s.vocab, s.d_model)
        self.wpe = nn.Embedding(s.seq_len, s.d_model)
        self.drop = nn.Dropout(s.dropout)
        self.h = nn.ModuleList(Block(s, moe=s.is_moe_block(i)) for i in range(s.n_layer))
        self.ln_f = nn.LayerNorm(s.d_model)
        self.lm_head = nn.Linear(s.d_model, s.vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.position_ids = None  # context parallel: the positions of this rank's tokens
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: scaled init of residual projections
            if name.endswith(("c_proj.weight", ".2.weight")):  # MLP output: dense (mlp.2) and experts
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * s.n_layer))

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        pos = self.position_ids if self.position_ids is not None else torch.arange(T, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # logits (B, T, vocab)
