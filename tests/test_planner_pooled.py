"""A device kind priced from several of its devices' profiles (results/planner/pooled.py): the
inventory's `profile` as a list, each figure the mean of the records', refused where the records
cannot be one kind's; and planner_seed's inventories naming both ranks of a kind."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from harness.bench import seed_inputs, seed_profiles
from harness.config.errors import UsageError
from harness.planning.plan import costs_for
from results.planner import inventory, layer_costs
from results.planner.pooled import pooled
from results.record import schema
from tests.test_planner import _linear


def _record(d: Path, block_s: float, microbatches=(1, 4), cpus: float | None = 0.5, size: str = "small") -> Path:
    """A profile record as `harness profile` writes one, LM `size`, each layer linear in the
    microbatch (a block `block_s` a sample; forward a third of it), held to `cpus` at a 10 ms period."""
    d.mkdir(parents=True)
    schema.write_json(d / schema.CONFIG, {"kind": schema.PROFILE_KIND, "run_id": d.name, "workload": "lm",
                                          "size": size})
    schema.write_json(d / schema.ENV, {})
    schema.open_record(d, 0.0)
    def row(b: int, w: float) -> dict:
        f = w * block_s * b / 3
        return {"microbatch": b, "fwd_s": f, "bwd_s": 2 * f, "saved_bytes": 100 * b,
                "fwd_samples_s": [f] * 3, "bwd_samples_s": [2 * f] * 3}
    rows = {k: [row(b, w) for b in microbatches] for k, w in (("embedding", 0.1), ("block", 1.0), ("head", 0.5))}
    schema.close_record(d, {"workload": "lm", "size": size, "params": {"embedding": 1000, "block": 1000, "head": 10},
                            "n_blocks": 2, "boundary_bytes_per_sample": 1000, "state_bytes_per_param": 16,
                            "optimizer_s_per_param": 1e-6 * block_s, "tied_params": 0, "layers": rows,
                            "constraint": {"cpus": cpus, "cfs_period_us": 10_000, "how": "cgroup v1 cpu.cfs_quota_us"}
                            if cpus else {"cpus": None, "how": "unconstrained"}}, schema.FINISHED, "", 0.0)
    return d


def test_pooled_costs_are_the_mean_of_each_figure_and_one_record_is_itself():
    a, b = _linear("k", 0.01), _linear("k", 0.03)
    got, want = pooled([a, b]), _linear("k", 0.02)
    for kind in ("embedding", "block", "head"):
        for mb in (1, 3, 8):
            assert got.fwd(kind, mb) == pytest.approx(want.fwd(kind, mb))
            assert got.bwd(kind, mb) == pytest.approx(want.bwd(kind, mb))
    assert got.sample_s(4) == pytest.approx(want.sample_s(4)) and "pooled with 1 more" in got.source
    assert (a.fwd("block", 1), b.fwd("block", 1)) == (pytest.approx(0.01 / 3), pytest.approx(0.03 / 3))  # untouched
    assert pooled([a]) is a


def test_records_that_cannot_be_one_kinds_are_refused_by_name(tmp_path):
    a = layer_costs.from_profile("k", _record(tmp_path / "a", 0.01))
    with pytest.raises(ValueError, match="same microbatches"):
        pooled([a, layer_costs.from_profile("k", _record(tmp_path / "b", 0.01, microbatches=(1, 8)))])
    with pytest.raises(ValueError, match="held alike"):
        pooled([a, layer_costs.from_profile("k", _record(tmp_path / "c", 0.01, cpus=0.25))])


def test_an_inventory_kind_takes_a_list_of_records_and_the_planner_prices_their_mean(tmp_path):
    one, two = _record(tmp_path / "r0", 0.01), _record(tmp_path / "r1", 0.03)
    path = tmp_path / "inv.yaml"
    path.write_text(f"devices:\n  - {{kind: k, count: 2, memory_gb: 4, profile: [{one}, {two}]}}\n"
                    "links: {busbw_gb_per_s: 1, latency_us: 100}\n")
    inv = inventory.load(path)
    assert inv.devices[0].profiles == (one, two)
    got = costs_for(inv, "lm", "small")["k"]
    assert got.sample_s(4) == pytest.approx(layer_costs.from_profile("k", _record(tmp_path / "m", 0.02)).sample_s(4))
    assert got.quota == (0.01, 0.5) and got.optimizer_s_per_param == pytest.approx(2e-8)
    # one of them of another model: the CLI's one line, exit 2
    path.write_text(f"devices:\n  - {{kind: k, count: 2, memory_gb: 4, profile: [{one}, "
                    f"{_record(tmp_path / 't', 0.02, size='tiny')}]}}\nlinks: {{busbw_gb_per_s: 1, latency_us: 100}}\n")
    with pytest.raises(UsageError, match="lm/tiny, not lm/small"):
        costs_for(inventory.load(path), "lm", "small")


@pytest.mark.parametrize("given, why", [("[]", "a list of 1-64"), ("[3]", "a list of 1-64"),
                                        ("[{ok}, nowhere]", "nowhere is not a profile record")])
def test_a_bad_profile_list_is_one_line_naming_it(tmp_path, given, why):
    ok = _record(tmp_path / "ok", 0.01)
    path = tmp_path / "inv.yaml"
    path.write_text(f"devices:\n  - {{kind: k, count: 2, memory_gb: 4, profile: {given.format(ok=ok)}}}\n")
    with pytest.raises(inventory.PlanError, match=why):
        inventory.load(path)


def test_planner_seed_names_both_ranks_of_a_kind_and_reads_them_together(tmp_path):
    kinds = {"cpu0.5": 0.5, "cpu0.25": 0.25}
    recs = {"cpu0.5": [_record(tmp_path / "f0", 0.01), _record(tmp_path / "f1", 0.03)],
            "cpu0.25": [_record(tmp_path / "s0", 0.04, cpus=0.25), _record(tmp_path / "s1", 0.04, cpus=0.25)]}
    for k in kinds:  # each pair's own links, as planner_seed measures them
        (tmp_path / f"comm-{k}" / "comm").mkdir(parents=True)
    inv = seed_profiles.inventory(tmp_path / "inv.yaml", kinds, recs, 2.0)
    assert [d["profile"] for d in yaml.safe_load(inv.read_text())["devices"]] == [
        [str(p) for p in recs[k]] for k in kinds]
    assert [d.profiles for d in inventory.load(inv).devices] == [tuple(recs[k]) for k in kinds]
    brief = seed_inputs.profiled(recs)
    assert brief["cpu0.5"]["record"] == "f0, f1" and brief["cpu0.5"]["sample_s_mb1_per_record"] == [
        pytest.approx(2.6 * x) for x in (0.01, 0.03)]  # 2 blocks, the embedding's 0.1 and the head's 0.5
    assert brief["cpu0.5"]["sample_s_mb1"] == pytest.approx(2.6 * 0.02)  # priced pooled
    assert json.loads(json.dumps(brief))  # kept in the bench's figures as JSON


def test_the_probes_reference_is_the_mean_of_the_kinds_records(tmp_path):
    from tests.test_probe import _profile
    two = [_profile(tmp_path / "a", [0.04, 0.06], [0.1, 0.1]), _profile(tmp_path / "b", [0.07], [0.12])]
    assert seed_profiles.block_cpu_s(two) == pytest.approx(((0.05 + 0.1) + (0.07 + 0.12)) / 2)
    assert seed_profiles.block_cpu_s(two[0]) == pytest.approx(0.15)
