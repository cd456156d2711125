"""Mixture-of-Experts MLP (Switch Transformer, Fedus et al. 2021; GShard, Lepikhin et al. 2020):
a linear router, softmax over E experts, each token sent to its top-k (k=1: Switch; k=2: the
two gates renormalised, GShard), each expert the dense block's GELU MLP (d -> 4d -> d).

Capacity: each expert takes at most C = ceil(capacity_factor x T x k / E) tokens of a sequence
(GShard's group = one sequence); first choices are queued before second choices, then by
position, and what overflows is dropped (its MoE output is 0; the residual carries the token
on). Because the group is a sequence, which tokens are dropped does not depend on how the
batch is sharded over ranks, so expert parallel trains exactly the function one rank does.

Load-balancing loss (Switch eq. 4, per group): aux = coef x E x sum_e f_e P_e, f_e the share
of the group's tokens whose first choice is e, P_e the mean router probability of e; averaged
over groups. Its gradient joins backward through AuxLossScaler (as Megatron-LM's
MoEAuxLossAutoScaler): the model's output and the reported loss stay the cross-entropy.

Expert parallel: the harness gives the layer an `ep` group (harness/parallel/expert.py); the
layer then holds only its E/N experts, and tokens go to their experts' ranks and back with
two all_to_all_single calls of variable splits (autograd-aware), after one all_to_all of the
per-expert counts.
"""
from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn


class AuxLossScaler(torch.autograd.Function):
    """Identity on `x`; in backward, the auxiliary loss gets gradient 1 (it is already scaled
    by its coefficient), so minimising the main loss also minimises it."""

    @staticmethod
    def forward(ctx, x, aux):
        ctx.save_for_backward(aux)
        return x

    @staticmethod
    def backward(ctx, grad):
        (aux,) = ctx.saved_tensors
        return grad, torch.ones_like(aux)


def expert_mlp(d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))


class MoE(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.n_experts, self.k = s.n_experts, s.top_k
        self.capacity_factor, self.aux_coef = s.capacity_factor, s.aux_loss_coef
        self.router = nn.Linear(s.d_model, s.n_experts, bias=False)
        self.experts = nn.ModuleList(expert_mlp(s.d_model) for _ in range(s.n_experts))
        self.ep_group, self.ep_rank, self.ep_size = None, 0, 1  # expert parallel (set by the harness)
        self.reset_stats()

    # -- statistics of the forwards since the last reset (per step: the harness reads and resets)
    def reset_stats(self) -> None:
        self.stats = {"tokens_per_expert": torch.zeros(self.n_experts, dtype=torch.float64), "dropped": 0.0,
                      "routed": 0.0, "a2a_s": 0.0, "expert_s": 0.0, "a2a_bytes_expected": 0.0}

    def shard_experts(self, group, rank: int, size: int) -> None:
        """Expert parallel: keep experts [rank x E/size, (rank+1) x E/size) of the E built
        (every rank built all E from the same seed, so the shards are one rank's experts)."""
        per = self.n_experts // size
        self.ep_group, self.ep_rank, self.ep_size = group, rank, size
        self.experts = nn.ModuleList(list(self.experts)[rank * per:(rank + 1) * per])

    def capacity(self, seq_len: int) -> int:
        return math.ceil(self.capacity_factor * seq_len * self.k / self.n_experts)

    def _route(self, x: torch.Tensor):
        """(expert, token, gate) of every kept (token, choice), and the auxiliary loss."""
        B, T, _ = x.shape
        E, k = self.n_experts, self.k
        probs = F.softmax(self.router(x).float(), dim=-1)           # (B, T, E), fp32 as Switch
        top_p, top_i = probs.topk(k, dim=-1)                         # (B, T, k)
        gates = top_p / top_p.sum(-1, keepdim=True) if k > 1 else top_p
        # queue per sequence and expert: all first choices (in token order), then second ones
        onehot = F.one_hot(top_i, E).permute(0, 2, 1, 3).reshape(B, k * T, E)  # (B, k*T, E)
        pos = (onehot.cumsum(1) - 1) * onehot
        kept = ((pos < self.capacity(T)) & (onehot > 0)).any(-1).view(B, k, T).transpose(1, 2)  # (B, T, k)
        f = F.one_hot(top_i[..., 0], E).float().mean(1)             # (B, E): first-choice share
        aux = self.aux_coef * E * (f * probs.mean(1)).sum(-1).mean()
        tokens = torch.arange(B * T, device=x.device).repeat_interleave(k)
        keep = kept.reshape(-1)
        st = self.stats
        st["tokens_per_expert"] += torch.bincount(top_i.reshape(-1)[keep], minlength=E).double().cpu()
        st["routed"] += float(B * T * k)
        st["dropped"] += float(B * T * k - int(keep.sum()))
        return top_i.reshape(-1)[keep], tokens[keep], gates.reshape(-1)[keep], aux

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        expert, token, gate, aux = self._route(x)
        order = torch.argsort(expert, stable=True)                   # grouped by expert
        expert, token, gate = expert[order], token[order], gate[order]
        counts = torch.bincount(expert, minlength=self.n_experts)
        inp = x.reshape(B * T, d)[token]
        out = self._experts_local(inp, counts) if self.ep_group is None else self._experts_ep(inp, counts)
        y = torch.zeros(B * T, d, dtype=x.dtype, device=x.device)
        y = y.index_add(0, token, (out.float() * gate[:, None]).to(x.dtype))
        if self.training and aux.requires_grad:
            y = AuxLossScaler.apply(y, aux)
        return y.view(B, T, d)

    def _run(self, inp: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        """Each expert this rank holds on its consecutive chunk of `inp` (every expert runs, on
        an empty chunk too: its parameters are in the graph every step, as DDP needs)."""
        t0 = time.perf_counter()
        out = torch.cat([expert(chunk) for expert, chunk in zip(self.experts, torch.split(inp, sizes))])
        self.stats["expert_s"] += time.perf_counter() - t0
        return out

    def _experts_local(self, inp: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        return self._run(inp, counts.tolist())

    def _experts_ep(self, inp: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """Tokens to their experts' ranks and back (all_to_all_single, variable splits)."""
        import torch.distributed as td
        import torch.distributed.nn.functional as dnn
        n, per = self.ep_size, self.n_experts // self.ep_size
        t0 = time.perf_counter()
        got = torch.empty(n * per, dtype=counts.dtype, device=counts.device)
        td.all_to_all_single(got, counts, group=self.ep_group)       # from each rank: its count per my expert
        got = got.view(n, per)
        send = counts.view(n, per).sum(1).tolist()
        recv = got.sum(1).tolist()
        buf = torch.empty(sum(recv), inp.shape[1], dtype=inp.dtype, device=inp.device)
        tokens_in = dnn.all_to_all_single(buf, inp, output_split_sizes=recv, input_split_sizes=send,
                                          group=self.ep_group)
        self.stats["a2a_s"] += time.perf_counter() - t0
        # received: by source rank, then by expert; run each local expert on its tokens
        src_expert = torch.arange(per, device=inp.device).repeat(n).repeat_interleave(got.reshape(-1))
        by_expert = torch.argsort(src_expert, stable=True)
        out = self._run(tokens_in[by_expert], got.sum(0).tolist())
        back = torch.empty_like(out).index_copy(0, by_expert, out)   # source order again
        t0 = time.perf_counter()
        res = torch.empty(inp.shape[0], out.shape[1], dtype=out.dtype, device=out.device)
        res = dnn.all_to_all_single(res, back, output_split_sizes=send, input_split_sizes=recv, group=self.ep_group)
        self.stats["a2a_s"] += time.perf_counter() - t0
        # expected all-to-all bytes (nccl-tests' S: what this rank sends) from the routing: the
        # kept tokens x d_model x element size, dispatched and combined forward, their gradients
        # the same way back, plus the per-expert counts (int64) once
        self.stats["a2a_bytes_expected"] += (2 * inp.numel() * inp.element_size() + 2 * back.numel() * back.element_size()
                                             + counts.numel() * counts.element_size())
        return res
