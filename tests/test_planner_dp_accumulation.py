"""Data parallel with gradient accumulation in the planner (results/planner/data_parallel.py,
layer_costs.Accumulated): each rank's share in microbatches of its kind's fastest profiled size, the
all-reduce in the last microbatch's backward; chosen where it beats the plain split. Pinned on costs
whose per-sample time rises beyond 8 samples, as a block of LM small did at 32 (+8%, 2026-12-06)."""
from __future__ import annotations

import pytest

from harness.planning.plan import overrides
from results.analysis.schedule import Overlap, overlapped_reduce_end
from results.planner import evaluate, layer_costs
from results.planner import search as planner
from results.planner.links import LinkModel
from tests.test_planner import FREE, _inv

PER_SAMPLE = 0.01  # a block's forward + backward per sample up to 8 samples (fwd 1/3, bwd 2/3)
RISE = {1: 1.0, 8: 1.0, 16: 1.04, 32: 1.1}  # per-sample time beyond 8, over that at 8
ADD_PER_BYTE = 1e-8  # autograd's add of one microbatch's gradients into the step's: 4 B a parameter


def _curved(name: str, rise: dict[int, float] = RISE, n_blocks: int = 8) -> layer_costs.Costs:
    pts = {k: {"fwd": [(b, b * PER_SAMPLE * w * f / 3) for b, f in rise.items()],
               "bwd": [(b, 2 * b * PER_SAMPLE * w * f / 3) for b, f in rise.items()]}
           for k, w in (("embedding", 0.1), ("block", 1.0), ("head", 0.5))}
    return layer_costs.Costs(name=name, params={"embedding": 1000, "block": 1000, "head": 10}, n_blocks=n_blocks,
                             boundary_bytes_per_sample=1000, state_bytes_per_param=16, grad_bytes_per_param=4,
                             optimizer_s_per_param=0.0, times=pts, grad_accumulate_s_per_byte=ADD_PER_BYTE,
                             saved_per_sample={"embedding": 0, "block": 1e6, "head": 0}, recompute_per_sample=1000)


# one sample of the whole model: 8 blocks + embedding (0.1 of a block) + head (0.5)
SAMPLE_S = (8 + 0.1 + 0.5) * PER_SAMPLE
ADD_S = (1000 + 8 * 1000 + 10) * 4 * ADD_PER_BYTE  # one add of every gradient


def test_a_share_runs_as_microbatches_and_prices_as_they_run():
    c = layer_costs.Accumulated(_curved("a"), 8)
    assert c.chunks(24) == [8, 8, 8] and c.chunks(13) == [7, 6] and c.chunks(5) == [5]  # tensor_split's cut
    base = c.base
    for kind in ("embedding", "block", "head"):  # everything before the last backward, then the last backward
        assert c.fwd(kind, 24) == pytest.approx(3 * base.fwd(kind, 8) + 2 * base.bwd(kind, 8))
        assert c.bwd(kind, 24) == pytest.approx(base.bwd(kind, 8))
    assert c.sample_s(24) * 24 == pytest.approx(24 * SAMPLE_S + 2 * ADD_S)
    assert c.saved("block", 24) == base.saved("block", 8)  # one microbatch's activations are live
    # DDP's buckets fill in the last microbatch's backward only: a bucket costing more than that backward
    # is exposed, where one backward of the whole share would have hidden it
    one = Overlap([c.fwd("block", 24)], [c.bwd("block", 24)], [1.0], lambda b: base.bwd("block", 8))
    assert overlapped_reduce_end(one) == pytest.approx(c.fwd("block", 24) + 2 * base.bwd("block", 8))


@pytest.mark.parametrize("microbatch", [1, 3, 7, 8])
def test_a_share_is_priced_as_the_sum_over_its_microbatches(microbatch):
    """Accumulated counts its microbatches by size (a device alone prices the whole global batch): the
    same as summing them one by one, uneven shares included (r of q + 1, then m - r of q)."""
    c = layer_costs.Accumulated(_curved("a"), microbatch)
    for b in (1, 5, 13, 24, 97):
        ch = c.chunks(b)
        assert sum(ch) == b and max(ch) - min(ch) <= 1 and max(ch) <= microbatch
        for kind in ("embedding", "block", "head"):
            by_one = sum(c.base.fwd(kind, x) for x in ch) + sum(c.base.bwd(kind, x) for x in ch[:-1])
            assert c.fwd(kind, b) == pytest.approx(by_one, rel=1e-12)
            assert c.bwd(kind, b) == c.base.bwd(kind, ch[-1])


def test_the_planner_accumulates_where_a_large_microbatch_runs_slower(tmp_path):
    """Two devices, 64 samples: plain, 32 each in one microbatch at 1.1x the per-sample time; accumulating,
    4 microbatches of 8 at 1x plus 3 adds. By hand 32 x 0.086 + 3 x ADD_S against 32 x 0.086 x 1.1."""
    inv = _inv(("a", 2, 1e12))
    costs = {"a": _curved("a")}
    p = planner.plan(inv, costs, LinkModel(FREE, tmp_path), 64, "dp")
    assert planner.label(p) == "dp x2 (microbatches 4.4)" and p["microbatch_limit"] == {"a": 8}
    assert p["batch_split"] == [32, 32]
    assert p["predicted"]["step_s"] == pytest.approx(32 * SAMPLE_S + 3 * ADD_S, rel=1e-3)
    plain = next(c for c in p["candidates"] if c["plan"] == "dp x2")
    assert plain["step_s"] == pytest.approx(32 * SAMPLE_S * 1.1, rel=1e-3)
    assert overrides(p) == ["parallel.batch_split=32,32", "parallel.microbatch_split=4,4"]
    assert p["extrapolated"] == []  # microbatches of 8: inside the profiled 1-32
    # priced again with the same costs (results/planner/evaluate.py), the plan keeps its microbatches
    assert evaluate.step_s(p, inv, costs, LinkModel(FREE, tmp_path)) == pytest.approx(p["predicted"]["step_s"])
    assert evaluate.step_s(p, inv, costs, LinkModel(FREE, tmp_path), "uniform") == pytest.approx(
        p["uniform"]["predicted"]["step_s"])


def test_flat_per_sample_times_keep_one_microbatch(tmp_path):
    """Where a larger microbatch costs no more a sample, accumulating only adds the adds: not chosen,
    and not listed (a candidate is kept only where it beats the plain split or the plain one can't fit)."""
    flat = _curved("a", {1: 1.0, 8: 1.0, 16: 1.0, 32: 1.0})
    p = planner.plan(_inv(("a", 2, 1e12)), {"a": flat}, LinkModel(FREE, tmp_path), 64, "dp")
    assert planner.label(p) == "dp x2" and "microbatch_split" not in p
    assert [c["plan"] for c in p["candidates"]] == ["dp x2"]


def test_a_label_names_each_ranks_microbatches_or_their_range():
    from results.planner.labels import label
    few = {"strategy": "dp", "devices": ["a"] * 4, "microbatch_split": [4, 4, 2, 2]}
    assert label(few) == "dp x4 (microbatches 4.4.2.2)"
    many = {"strategy": "dp", "devices": ["a"] * 10_000, "microbatch_split": [1, 4] * 5_000}
    assert label(many) == "dp x10000 (microbatches 1-4 on 10000 ranks)"
