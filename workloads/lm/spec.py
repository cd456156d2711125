"""LM sizes: a nanoGPT-style decoder from `tiny` (trains in seconds on CPU) to GPT-2 small."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LMSize:
    name: str
    n_layer: int
    n_head: int
    d_model: int
    seq_len: int              # context T
    vocab: int                # model vocabulary (GPT-2: 50257 padded to 50304)
    source_vocab: int         # states of the Markov source that writes the data (<= vocab)
    successors: int           # non-zero transitions per state
    batch_size: int
    train_tokens: int
    val_tokens: int
    lr: float
    warmup_steps: int
    decay_steps: int          # cosine horizon
    target_margin: float      # quality target = entropy rate + margin (nats/token)
    dropout: float = 0.0
    weight_decay: float = 0.1
    n_experts: int = 0        # > 0: every moe_every-th MLP is a Mixture of Experts (workloads/lm/moe.py)
    top_k: int = 1            # experts per token (1: Switch, 2: GShard)
    capacity_factor: float = 1.25  # expert capacity per sequence = ceil(cf x seq_len x top_k / n_experts)
    aux_loss_coef: float = 0.01    # Switch's load-balancing loss coefficient (alpha)
    moe_every: int = 2        # blocks 1, 3, 5 ... (every other MLP, as Switch)

    def is_moe_block(self, i: int) -> bool:
        return self.n_experts > 0 and i % self.moe_every == self.moe_every - 1

    @property
    def n_train(self) -> int:
        return self.train_tokens // (self.seq_len + 1)

    @property
    def n_val(self) -> int:
        return self.val_tokens // (self.seq_len + 1)


_TINY = dict(n_layer=2, n_head=2, d_model=64, seq_len=64, vocab=64, source_vocab=64, successors=4,
             batch_size=16, train_tokens=1 << 20, val_tokens=1 << 15, lr=3e-3, warmup_steps=20,
             decay_steps=2000, target_margin=0.05)
_SMALL = dict(n_layer=6, n_head=6, d_model=384, seq_len=256, vocab=512, source_vocab=512,
              successors=8, batch_size=32, train_tokens=1 << 22, val_tokens=1 << 17, lr=1e-3,
              warmup_steps=100, decay_steps=5000, target_margin=0.05, dropout=0.0)
SIZES_RAW = {
    "tiny": LMSize("tiny", n_layer=2, n_head=2, d_model=64, seq_len=64, vocab=64, source_vocab=64, successors=4,
                   batch_size=16, train_tokens=1 << 20, val_tokens=1 << 15, lr=3e-3, warmup_steps=20,
                   decay_steps=2000, target_margin=0.05),
    # tiny's width, 8 blocks: FSDP's unshard window (~2 blocks at a time) is a small part of the
    # model, so sharding's saving shows in the peak at tiny cost (with 2 blocks the window is
    # the whole model; tests/test_parallel.py)
    "deep-tiny": LMSize("deep-tiny", **{**_TINY, "n_layer": 8}),
    # tiny's width at seq_len 2048 (32x tiny's): attention's share of the work and of the
    # activations grows with s, which is where context parallel (parallel.cp) pays
    "long-tiny": LMSize("long-tiny", **{**_TINY, "seq_len": 2048, "batch_size": 4, "train_tokens": 1 << 21,
                                        "val_tokens": 1 << 16}),
    "small": LMSize("small", n_layer=6, n_head=6, d_model=384, seq_len=256, vocab=512, source_vocab=512,
                    successors=8, batch_size=32, train_tokens=1 << 22, val_tokens=1 << 17, lr=1e-3,
                    warmup_steps=100, decay_steps=5000, target_margin=0.05, dropout=0.0),
    # Mixture of Experts: the dense sizes with every other MLP replaced by experts
    "moe-tiny": LMSize("moe-tiny", **_TINY, n_experts=4, top_k=1),
    "moe-small": LMSize("moe-small", **_SMALL, n_experts=8, top_k=2),
    "gpt2": LMSize("gpt2", n_layer=12, n_head=12, d_model=768, seq_len=1024, vocab=50304, source_vocab=4096,
                   successors=16, batch_size=8, train_tokens=1 << 23, val_tokens=1 << 19, lr=6e-4,
                   warmup_steps=200, decay_steps=20000, target_margin=0.05),
}
