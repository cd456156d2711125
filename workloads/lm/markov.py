"""A seeded first-order Markov source over `source_vocab` tokens, each state with a few
successors whose probabilities are drawn from a sparse Dirichlet. Its entropy rate
H = -sum_i pi_i sum_j P_ij ln P_ij (pi stationary) is the exact minimum expected validation
loss in nats/token for a model that sees the previous token, so the quality target is H + a
documented margin, and no model can do better than H.

Tokens are written as chains that start in the stationary distribution, cut into non-overlapping
windows of seq_len + 1 tokens (one training sample each), in .npy shards of uint16.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SHARD_WINDOWS = 1024   # samples per shard file
ALPHA = 0.5            # Dirichlet concentration: lower = more peaked transitions


def build_source(vocab: int, successors: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(succ[V, k] successor ids, prob[V, k]); successor i+1 is always present (irreducible)."""
    rng = np.random.default_rng([seed, 7])
    succ = np.empty((vocab, successors), np.int64)
    for i in range(vocab):
        others = rng.choice(np.delete(np.arange(vocab), (i + 1) % vocab), successors - 1, replace=False)
        succ[i] = np.concatenate([[(i + 1) % vocab], others])
    prob = rng.dirichlet(np.full(successors, ALPHA), size=vocab)
    return succ, prob


def stationary(succ: np.ndarray, prob: np.ndarray, iters: int = 5000) -> np.ndarray:
    pi = np.full(succ.shape[0], 1.0 / succ.shape[0])
    for _ in range(iters):
        nxt = np.bincount(succ.ravel(), weights=(pi[:, None] * prob).ravel(), minlength=len(pi))
        if np.abs(nxt - pi).max() < 1e-13:
            return nxt
        pi = 0.5 * (pi + nxt)  # lazy averaging converges for periodic chains too
    return pi


def entropy_rate(succ: np.ndarray, prob: np.ndarray) -> float:
    """nats/token."""
    pi = stationary(succ, prob)
    h_rows = -(prob * np.log(np.where(prob > 0, prob, 1.0))).sum(axis=1)
    return float((pi * h_rows).sum())


def sample_windows(succ, prob, n_windows: int, window: int, rng: np.random.Generator) -> np.ndarray:
    """n_windows independent chains of `window` tokens, each started from pi (vectorised over chains)."""
    pi = stationary(succ, prob)
    cdf = np.cumsum(prob, axis=1)
    out = np.empty((n_windows, window), np.uint16)
    state = rng.choice(len(pi), size=n_windows, p=pi / pi.sum())
    for t in range(window):
        out[:, t] = state
        idx = np.minimum((cdf[state] < rng.random(n_windows)[:, None]).sum(axis=1), succ.shape[1] - 1)
        state = succ[state, idx]
    return out


def write_dataset(root: Path, size, seed: int) -> None:
    from workloads.manifest import write_manifest

    succ, prob = build_source(size.source_vocab, size.successors, seed)
    h = entropy_rate(succ, prob)
    window = size.seq_len + 1
    for split, n, offset in (("train", size.n_train, 0), ("val", size.n_val, 1)):
        d = root / split
        d.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([seed, offset])
        for s, start in enumerate(range(0, n, SHARD_WINDOWS)):
            count = min(SHARD_WINDOWS, n - start)
            np.save(d / f"shard-{s:05d}.npy", sample_windows(succ, prob, count, window, rng).reshape(-1))
    (root / "source.json").write_text(json.dumps({
        "kind": "markov-1", "vocab": size.source_vocab, "successors": size.successors, "alpha": ALPHA,
        "seed": seed, "entropy_rate_nats": h, "window": window, "shard_windows": SHARD_WINDOWS}, indent=1))
    write_manifest(root)
