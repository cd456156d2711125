"""Each device kind's own collectives (inventory links.kinds): a group of one kind's devices is
priced from the records measured on that kind's ranks, a group of mixed kinds from the
inventory's; what the inventory may say there, checked."""
from __future__ import annotations

import pytest

from harness.comm.record import CommRecord
from results.planner import inventory
from results.planner import search as planner
from results.planner.inventory import PlanError
from results.planner.links import LinkModel
from results.record import comm as comm_record
from tests.test_planner import _linear

MB = 1 << 20


def _record(root, collective: str, ranks: int, us_per_mb: float) -> None:
    """A finished gloo record of `collective` on `ranks` ranks, its time linear in size."""
    rec = CommRecord(root, {"collective": collective, "backend": "gloo", "dtype": "float32", "ranks": ranks,
                            "via": "direct"}, {}, {})
    for size in (MB, 16 * MB, 64 * MB):
        t = us_per_mb * size / MB
        rec.log_size({"bytes": size, "time_us_ip": t, "time_us_oop": t, "algbw_gb_per_s_ip": size / t / 1e3,
                      "busbw_gb_per_s_ip": size / t / 1e3})
    rec.finish("finished")


@pytest.fixture
def roots(tmp_path):
    """The four ranks' records (the inventory's) and the slow kind's own pair's, 3x slower."""
    mixed, slow = tmp_path / "mixed", tmp_path / "slow"
    for root, ranks, us in ((mixed, 4, 1000.0), (slow, 2, 3000.0)):
        _record(root, "all_reduce", ranks, us)
        _record(root, "send_recv", 2, us / 4)
    return mixed, slow


def _inv(slow_root, devices=(("fast", 2), ("slow", 2)), **links):
    return inventory.parse({"devices": [{"kind": k, "count": n, "memory_gb": 1000, "peak_tflops": 1, "efficiency": 0.5}
                                        for k, n in devices],
                            "links": {"collectives": "measured", "backend": "gloo",
                                      "kinds": {"slow": str(slow_root)}, **links}}, "inv.yaml")


def test_a_group_of_one_kind_is_priced_from_its_own_records_and_a_mixed_group_from_the_inventorys(roots):
    mixed, slow = roots
    inv = _inv(slow)
    assert inv.links.kinds == (("slow", slow),)
    lm = LinkModel(inv.links, mixed)
    own = comm_record.table(next((slow / comm_record.SUBDIR).glob("comm-all_reduce-*")))
    assert lm.among(["slow", "slow"]).all_reduce_s(16 * MB, 2) == pytest.approx(comm_record.time_at(own, 16 * MB))
    assert lm.among(["slow", "slow"]).all_reduce_s(16 * MB, 2) == pytest.approx(3000e-6 * 16)
    # mixed kinds, and a kind with no records of its own: the four ranks' record (a ring at 2 ranks)
    for group in (["fast", "slow"], ["fast", "fast"]):
        assert lm.among(group) is lm
    assert lm.among(["slow"]).send_s(MB) == pytest.approx(750e-6)
    assert lm.send_s(MB) == pytest.approx(250e-6)
    assert "slow alone: gloo all_reduce at 2 ranks" in lm.source


def test_a_kinds_own_data_parallel_job_pays_its_own_all_reduce(roots):
    """The planner's bound for the seed's utilization is each kind's own job: its all-reduce is
    the one measured on its ranks, the mixed job's the four ranks'."""
    mixed, slow = roots
    costs = {"fast": _linear("fast", 0.01), "slow": _linear("slow", 0.02)}
    grads = costs["slow"].total_params * costs["slow"].grad_bytes_per_param
    alone = _inv(slow, devices=(("slow", 2),))
    lm = LinkModel(alone.links, mixed)
    p = planner.plan(alone, costs, lm, 8, "dp")
    assert p["predicted"]["reduce_s"] == pytest.approx(lm.among(["slow"]).all_reduce_s(grads, 2))
    assert p["predicted"]["reduce_s"] > 2 * LinkModel(inventory.Links(measured=True), mixed).all_reduce_s(grads, 2)
    both = _inv(slow)
    q = planner.plan(both, costs, LinkModel(both.links, mixed), 12, "dp")
    assert q["predicted"]["reduce_s"] == pytest.approx(LinkModel(both.links, mixed).all_reduce_s(grads, 4))


@pytest.mark.parametrize("links,why", [
    ({"kinds": {"gpu": "x"}}, "'gpu' is not a device kind here; kinds: fast, slow"),
    ({"kinds": {"slow": "/nonexistent/results"}}, "has no comm/ folder"),
    ({"kinds": ["slow"]}, "must map device kinds to results folders"),
    ({"kinds": {"slow": 3}}, "slow's folder must be a path"),
    ({"collectives": None, "busbw_gb_per_s": 1, "latency_us": 1, "kinds": {"slow": "x"}},
     "these links are an estimate"),
])
def test_a_bad_kinds_entry_is_one_line_naming_it(roots, links, why):
    mixed, slow = roots
    d = {"devices": [{"kind": k, "count": 2, "memory_gb": 1, "peak_tflops": 1, "efficiency": 0.5}
                     for k in ("fast", "slow")],
         "links": {"collectives": "measured", **links}}
    if d["links"].get("collectives") is None:
        del d["links"]["collectives"]
    with pytest.raises(PlanError, match="links.kinds") as e:
        inventory.parse(d, "inv.yaml")
    assert why in str(e.value) and "\n" not in str(e.value)
