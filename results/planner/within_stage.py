"""Work shared inside a stage or a replica by a group of one kind's devices in one node: tensor
parallel (Megatron, with sequence parallel) and context parallel (ring attention, all-gather of
K and V). The planner searches the group per device kind (search.py); a grouped kind is planned
as one "device" per group whose costs (below) are one member's, so data parallel and pipelines
over groups need nothing new.

One member of a group of t tensor x c context ranks, per microbatch of b samples (formulas:
../shared/reference/parallelism.md, sections 1 and 6):
- compute: a block's time x what one member's share of it takes, per dimension: measured
  where the profile timed a tpT or cpC member's block (harness profile --shards,
  harness/planning/shards.py: narrower matmuls and fewer heads may run below the whole
  block's efficiency on small layers), else 1/t and 1/c, an even split (what a what-if shape gets).
  Tensor and context parallel together: the two measured shares multiplied. The embeddings
  and the head: their time / (t c) where tensor parallel splits them (vocabulary parallel: a
  what-if's Megatron), else / c: the harness's LM plan keeps them replicated, every tensor rank
  computing them whole (workloads/lm/parallel_plan.py; Costs.tp_splits says which);
- tensor parallel with sequence parallel, per block: 2 all-gathers + 2 reduce-scatters of
  b s h activations forward and the same backward, the volume of 2 all-reduces each way [R];
  where the profile timed the real group on its ranks (harness/planning/in_step.py), what it
  added to the member's block instead, half each way: the transfer, the ranks waiting for each
  other at each collective and DTensor's own path (tp_step: 0.10, 0.09 and 0.10 s of a step, of
  which the links priced only the first); the same for context parallel's all-gather (timed
  without tp: with both, an upper bound, since tp's split halves what cp gathers);
  a vocabulary-parallel embedding one all-reduce forward, a vocabulary-parallel head one
  all-gather forward and one reduce-scatter backward (replicated ones: none);
- context parallel, per block: the all-gather of K and V forward (2 b s h_kv, over t when the
  heads are split too) and the reduce-scatter of their gradients backward; not overlapped with
  attention (torch's ring attention on the GPU overlaps part of it: an upper bound);
- memory: parameters / t of the kinds tensor parallel splits, activations / (t c) of those and
  / c of the rest;
- a pipeline boundary: each member sends its sequence shard, 1 / (t c) of the activations;
- context-parallel ranks hold the same weights: each step all-reduces a member's gradients over
  the c ranks (on the node's links) besides the data-parallel reduction.

Collectives inside a group run on the node's links: `node_busbw_gb_per_s` of the kind (an
estimate, e.g. NVLink), else the inventory's links (measured on this machine, where the ranks
of a "node" are processes on one host).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from results.planner.inventory import DeviceKind, Inventory
from results.planner.layer_costs import Costs
from results.planner.links import LinkModel
from results.planner.utilization import utilization


@dataclass(frozen=True)
class Group:
    tp: int = 1
    cp: int = 1

    @property
    def size(self) -> int:
        return self.tp * self.cp

    def suffix(self) -> str:
        return "".join(f" {n}{v}" for n, v in (("tp", self.tp), ("cp", self.cp)) if v > 1)


NONE = Group()


class NodeLinks:
    """Collectives among a group's members: a ring at the node's bus bandwidth, or the inventory's links."""

    def __init__(self, links: LinkModel, busbw_gb_per_s: float | None = None):
        self.links, self.busbw = links, None if busbw_gb_per_s is None else busbw_gb_per_s * 1e9

    def all_reduce_s(self, nbytes: float, n: int) -> float:
        if n <= 1 or nbytes <= 0:
            return 0.0
        if self.busbw is None:
            return self.links.all_reduce_s(nbytes, n)
        return self.links.latency + 2 * (n - 1) / n * nbytes / self.busbw

    def gather_s(self, nbytes: float, n: int) -> float:
        """An all-gather (or reduce-scatter) of nbytes in all: half an all-reduce's volume
        ((n-1)/n S against 2(n-1)/n S), the latency once."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        full = self.all_reduce_s(nbytes, n)
        lat = self.links.latency if self.busbw is not None else 0.0
        return lat + (full - lat) / 2


class GroupCosts(Costs):
    """One member's costs in a group (the module docstring's model), in Costs' interface."""

    def __init__(self, base: Costs, g: Group, node: NodeLinks):
        self.base, self.g, self.node = base, g, node
        self._memo: dict = {}  # (kind, microbatch, backward) -> seconds (_pass)
        t, n = g.tp, g.size
        self.name, self.n_blocks, self.model = f"{base.name}{g.suffix()}", base.n_blocks, base.model
        self.tp_splits = split = base.tp_splits  # the kinds tensor parallel splits; the rest replicated
        self.params = {k: -(-v // t) if k in split else v for k, v in base.params.items()}
        self.tied_params = -(-base.tied_params // t) if "embedding" in split else base.tied_params
        self.boundary_bytes_per_sample = base.boundary_bytes_per_sample / n
        self.recompute_per_sample = base.recompute_per_sample / n
        self.kv_bytes_per_sample, self.kv_heads = base.kv_bytes_per_sample / t, base.kv_heads
        self.state_bytes_per_param, self.grad_bytes_per_param = base.state_bytes_per_param, base.grad_bytes_per_param
        self.optimizer_s_per_param = base.optimizer_s_per_param
        self.grad_copy_s_per_byte = base.grad_copy_s_per_byte
        self.grad_accumulate_s_per_byte = base.grad_accumulate_s_per_byte
        self.measured = base.measured
        self._spread = base._spread  # a member's block runs as noisily as the whole block (not measured apart)
        self.exchange_occupancy = base.exchange_occupancy  # a member does its stage's exchanges on its own core
        self.quota = base.quota  # and is held as its kind's rank was
        dims = [(d, v) for d, v in (("tp", g.tp), ("cp", g.cp)) if v > 1]
        self.measured_shards = [f"{d}{v}" for d, v in dims if base.shard_fraction(d, v, 1, False) is not None]
        told = ", ".join(f"{d}{v} compute {'measured' if f'{d}{v}' in self.measured_shards else f'/ {v}'}"
                         for d, v in dims)
        timed = [f"{d}{v}" for d, v in dims if base.group_in_step_s(d, v, 1) is not None]
        comm = ("collectives on the node's links" if not timed else
                f"{' and '.join(timed)} collectives timed in the step"
                + (", the others on the node's links" if len(timed) < len(dims) else ""))
        kept = [k for k in ("embedding", "head") if k not in split]
        told += f", {' and '.join(kept)} replicated over tp" if g.tp > 1 and kept else ""
        self.source = base.source + (f"; {told}, {comm}" if n > 1 else "")

    def profiled_sizes(self) -> list[int] | None:
        return self.base.profiled_sizes()

    def _comm(self, kind: str, b: float, backward: bool) -> float:
        base, t, c = self.base, self.g.tp, self.g.cp
        act = base.boundary_bytes_per_sample * b / c  # a CP rank's share of the sequence
        s = 0.0
        if t > 1:
            timed = base.group_in_step_s("tp", t, b / c) if kind == "block" else None
            if timed is not None:  # the real group timed in the step: half forward, half backward
                s += timed / 2     # (the link model puts 2 all-reduces' volume each way)
            elif kind == "block":  # 2 AG + 2 RS each way, the volume of 2 all-reduces
                s += 2 * self.node.all_reduce_s(act, t)
            # vocabulary-parallel embedding and head only: a replicated one exchanges nothing
            elif kind == "embedding" and kind in self.tp_splits and not backward:
                s += self.node.all_reduce_s(act, t)
            elif kind == "head" and kind in self.tp_splits:
                s += self.node.gather_s(act, t)
        if c > 1 and kind == "block":  # the all-gather of K and V forward, the reduce-scatter of dK, dV backward
            timed = base.group_in_step_s("cp", c, b)  # the real group timed in the step (tp1): half each way
            s += timed / 2 if timed is not None else self.node.gather_s(base.kv_bytes_per_sample * b / t, c)
        return s

    def share(self, kind: str, b: float, backward: bool) -> float:
        """The part of layer `kind`'s compute one member runs: for a block, the product over tp and
        cp of the measured share (Costs.shard_fraction) or 1/degree; otherwise 1/(t c), or 1/c
        where tensor parallel leaves the kind replicated."""
        if kind != "block":
            return 1 / (self.g.size if kind in self.tp_splits else self.g.cp)
        out = 1.0
        for dim, n in (("tp", self.g.tp), ("cp", self.g.cp)):
            if n > 1:
                f = self.base.shard_fraction(dim, n, b, backward)
                out *= 1 / n if f is None else f
        return out

    def fwd(self, kind: str, b: float) -> float:
        return self._pass(kind, b, False)

    def bwd(self, kind: str, b: float) -> float:
        return self._pass(kind, b, True)

    def _pass(self, kind: str, b: float, backward: bool) -> float:
        """A member's forward or backward of layer `kind` at microbatch b: its share of the compute
        and the group's collectives, kept (the data-parallel search prices the same cells ~10^6
        times planning 10,000 devices; the base and the group do not change after __init__)."""
        key = (kind, b, backward)
        got = self._memo.get(key)
        if got is None:
            base = self.base.bwd(kind, b) if backward else self.base.fwd(kind, b)
            got = self._memo[key] = base * self.share(kind, b, backward) + self._comm(kind, b, backward)
        return got

    @property
    def recompute_measured(self) -> bool:
        return self.base.recompute_measured

    def recompute_s(self, b: float) -> float:  # one more forward of the block, its collectives included
        return self.base.recompute_s(b) * self.share("block", b, False) + self._comm("block", b, False)

    def saved(self, kind: str, b: float) -> float:
        return self.base.saved(kind, b) / (self.g.size if kind in self.tp_splits else self.g.cp)

    def group_reduce_s(self, params: float) -> float:
        """Context-parallel ranks hold the same weights (a member's tensor shard): their gradients
        are all-reduced over the cp ranks too (torchtitan reduces over dp x cp), on the node's links."""
        return self.node.all_reduce_s(params * self.grad_bytes_per_param, self.g.cp)


def options(d: DeviceKind, c: Costs, node_size: int) -> list[Group]:
    """The groups a kind can form: powers of two, tensor x context degree within a node
    (node_size devices), dividing the kind's count (every device in a group), the tensor degree
    dividing the KV heads where they are known. No grouping is always an option."""
    out = [NONE]
    t = 1
    while t <= node_size:
        cp = 1
        while t * cp <= node_size:
            g = Group(t, cp)
            if g != NONE and d.count % g.size == 0 and (c.kv_heads is None or c.kv_heads % t == 0):
                out.append(g)
            cp *= 2
        t *= 2
    return out


def grouped(inv: Inventory, costs: dict[str, Costs], links: LinkModel,
            groups: dict[str, Group]) -> tuple[Inventory, dict[str, Costs], dict[str, str]]:
    """The inventory as the planner sees it with these groups: each grouped kind one device per
    group (count / size), its costs one member's; and each planned kind's real kind."""
    devices, out, real = [], {}, {}
    for d in inv.devices:
        g = groups.get(d.kind, NONE)
        if g == NONE:
            devices.append(d)
            out[d.kind], real[d.kind] = costs[d.kind], d.kind
            continue
        name = f"{d.kind}{g.suffix()}"
        devices.append(replace(d, kind=name, count=d.count // g.size))
        out[name] = GroupCosts(costs[d.kind], g, NodeLinks(links.among([d.kind]), d.node_busbw_gb_per_s))
        real[name] = d.kind
    return replace(inv, devices=tuple(devices)), out, real


def as_devices(p: dict, groups: dict[str, Group], real: dict[str, str], inv: Inventory,
                costs: dict[str, Costs], batch: int) -> dict:
    """A plan made over groups, told in devices: each group's members in `devices`, the groups
    and what they were planned as beside it, utilization against the real devices alone."""
    if not any(g.size > 1 for g in groups.values()):
        return p
    if "planned_as" not in p:  # idempotent: called again once the uniform split is added
        p["planned_as"] = p["devices"]
        p["devices"] = [d.kind for d in inv.devices for _ in range(d.count)]
    p["groups"] = {k: {"tp": g.tp, "cp": g.cp} for k, g in groups.items() if g.size > 1}
    p["real_kind"] = real
    for f in (p["predicted"], p.get("uniform", {}).get("predicted")):
        if f is not None:
            f["utilization"] = utilization(f["samples_per_s"], p["devices"], costs, batch)
    return p
