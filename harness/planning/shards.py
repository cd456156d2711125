"""What one member of a tensor- or context-parallel group computes in a transformer block, as a
module `harness profile` can time on one device (`--shards tp2,cp2`), so the planner prices a
group's compute from a measurement instead of assuming the block's time / (t c)
(results/planner/within_stage.py). On small layers the split need not be free: narrower matmuls
and fewer heads may run below the full block's efficiency (on LM small at batch 8 on this CPU it
was nearly free: a member's share 0.49-0.53).

- `tpT`: the workload's own shard of the block (capability tensor_parallel_shard: for the LM,
  its heads and its 4h/T slice of the MLP, workloads/lm/parallel_plan.py), on the whole sequence
  as Megatron's matmuls see it after sequence parallel's all-gather. The collectives are not in
  it: the planner prices them on the links. (Sequence parallel's LayerNorms run on s/T tokens;
  here on s: LayerNorm is a small part of a block.)
- `cpC`: the block on one rank's share of the sequence (s/C tokens), its attention over the
  whole sequence's keys with the causal mask of load-balanced chunks that context parallel uses
  (harness/parallel/context.py). The all-gather of K and V is stood in for by a local copy of
  this rank's (the same bytes, on one device); its transfer is priced on the links.
"""
from __future__ import annotations

import copy
import re
import statistics

import torch

from harness.config import registry
from harness.config.errors import UsageError
from harness.parallel.context import ContextParallel

_SPEC = re.compile(r"^(tp|cp)([2-9]|[1-9][0-9]+)$")


def parse(text: str) -> list[str]:
    """`--shards` (e.g. "tp2,cp2"; "none" for no shard figures) as a list of names."""
    if text.strip() in ("", "none"):
        return []
    names = [t.strip() for t in text.split(",")]
    bad = [n for n in names if not _SPEC.match(n)]
    if bad:
        raise UsageError(f"--shards: {', '.join(map(repr, bad))} not understood; valid: tpN or cpN with N >= 2, "
                         f"comma-separated (e.g. tp2,cp2), or none")
    return list(dict.fromkeys(names))


def why_not(wl, size, name: str) -> str | None:
    """Why this workload and size have no `name` shard to time, or None."""
    kind, n = name[:2], int(name[2:])
    if kind == "tp":
        if registry.capability(wl, "tensor_parallel_shard") is None:
            return f"{wl.name} has no tensor-parallel shard"
        return wl.tensor_parallel_check(size, n, True)
    if registry.capability(wl, "context_parallel_modules") is None:
        return f"{wl.name} has no context-parallel attention"
    return wl.context_parallel_check(size, n)


def layer(wl, size, block, name: str, stream):
    """(module, input maker) for shard `name` of `block`: `stream(mb, tokens)` makes the residual
    stream input. The block itself is left as it was (the shard is a copy)."""
    kind, n = name[:2], int(name[2:])
    if kind == "tp":
        return wl.tensor_parallel_shard(block, n), lambda mb: stream(mb, size.seq_len)
    part = copy.deepcopy(block)
    _, attention = wl.context_parallel_modules(part)
    ctx = ContextParallel(part, attention, None, 0, n, size.seq_len, "cpu")
    # context parallel's own attention and mask; its all-gather stood in for by a local copy of
    # this rank's K and V to the group's size (the same bytes, on one device)
    ctx.gather = lambda t: t.repeat(1, 1, n, 1)
    for m in attention:
        m.attend = ctx.attend
    return part, lambda mb: stream(mb, size.seq_len // n)


def layers(wl, size, block, names: list[str], stream) -> tuple[dict[str, tuple], dict[str, str]]:
    """({"block_<name>": (module, input maker)} for the shards this size has, {name: why not} for
    the rest."""
    got, skipped = {}, {}
    for name in names:
        reason = why_not(wl, size, name)
        if reason:
            skipped[name] = reason
        else:
            got[f"block_{name}"] = layer(wl, size, block, name, stream)
    return got, skipped


def stream(d_model: int):
    """The residual stream a block takes: (mb, tokens, d_model), requiring grad as a stage's input does."""
    return lambda mb, tokens: torch.randn(mb, tokens, d_model, requires_grad=True)


def efficiency(summary: dict, name: str) -> list[tuple[int, float]]:
    """[(microbatch, efficiency)] of a measured shard: 1 / (N x the member's share of the block's
    forward + backward), the share the median of the interleaved pairs' ratios (1.0: the split is
    free, as the planner's model without it assumes)."""
    n = int(name[2:])
    return [(r["microbatch"], 1 / (n * statistics.median(r["share_samples"])))
            for r in summary["layers"].get(f"block_{name}", [])]


def efficiency_lines(summary: dict) -> list[str]:
    """One line per shard the profile was asked for: its efficiency per microbatch, or why not timed."""
    out = []
    for name, state in summary.get("shards", {}).items():
        if state != "measured":
            out.append(f"{name}: not timed ({state})")
            continue
        eff = efficiency(summary, name)
        out.append(f"{name}: one member's compute at " + ", ".join(f"mb{mb} {e:.2f}" for mb, e in eff)
                   + f" of a free 1/{name[2:]} split (1 / ({name[2:]} x its share of the block, timed interleaved))")
    for name, rows in summary.get("in_step", {}).items():
        out.append(f"{name} group in the step: " + (
            f"not timed ({rows})" if isinstance(rows, str) else
            ", ".join(f"mb{r['microbatch']} +{1e3 * r['in_step_s']:.1f} ms a block over its member's "
                      f"{1e3 * r['member_s']:.1f}{_rounds(r)}" for r in rows)
            + " (its collectives, waiting and DTensor, forward + backward)"))
    return out


def _rounds(row: dict) -> str:
    """" (N rounds, +-x% of the group's pass)" for a row sampled to a precision (older profiles: "")."""
    if "ended_by" not in row:
        return ""
    hw = row.get("half_width")
    return f" ({row['rounds']} rounds, " + ("no interval" if hw is None else f"+-{100 * hw:.1f}%") + ")"
