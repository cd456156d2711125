"""planner_seed's four ranks as inventories, and an interleaved check's plans priced again from a
profile taken just before it (harness/bench/seed_profiles.py). The profile itself is `harness
profile` on four ranks under CPU quotas (minutes: `make perf`); here it is stood in for by record
paths, so what is checked is which inventory prices which job."""
from __future__ import annotations

from pathlib import Path

import yaml

from harness.bench import seed_profiles
from results.planner.inventory import PlanError

KINDS = {"cpu0.5": 0.5, "cpu0.25": 0.25}


def test_two_ranks_of_each_kind_are_held_kind_by_kind():
    assert seed_profiles.held({"X": "1"}, KINDS) == {"X": "1", "HARNESS_RANK_CPU": "0.5,0.5,0.25,0.25"}


def test_an_inventory_has_two_devices_of_each_kind_or_of_one_and_each_pairs_own_links(tmp_path):
    profiles = {"cpu0.5": tmp_path / "p-fast", "cpu0.25": tmp_path / "p-slow"}
    both = yaml.safe_load(seed_profiles.inventory(tmp_path / "inv.yaml", KINDS, profiles, 1.25).read_text())
    assert both["devices"] == [{"kind": "cpu0.5", "count": 2, "memory_gb": 1.25, "profile": str(tmp_path / "p-fast")},
                               {"kind": "cpu0.25", "count": 2, "memory_gb": 1.25, "profile": str(tmp_path / "p-slow")}]
    assert both["links"] == {"collectives": "measured", "backend": "gloo",
                             "kinds": {k: str(tmp_path / f"comm-{k}") for k in KINDS}}
    one = seed_profiles.inventory(tmp_path / "one.yaml", KINDS, profiles, 1.25, only="cpu0.25")
    one = yaml.safe_load(one.read_text())
    assert [d["kind"] for d in one["devices"]] == ["cpu0.25"] and list(one["links"]["kinds"]) == ["cpu0.25"]


def test_each_job_is_priced_on_its_own_devices_from_the_profile_just_taken(tmp_path, monkeypatch):
    profiled_into = []
    monkeypatch.setattr(seed_profiles, "profile", lambda env, tmp, kinds, tag: profiled_into.append(
        (env["HARNESS_RANK_CPU"], tmp / f"round{tag}")) or {k: tmp / f"p-{k}" for k in kinds})
    monkeypatch.setattr(seed_profiles, "profiled", lambda profiles: {k: p.name for k, p in profiles.items()})

    def predict(plan: dict, inv: Path, links_root: Path) -> float:
        if plan["strategy"] == "kinds":
            raise PlanError("cannot predict a 'kinds' plan again")
        devices = yaml.safe_load(inv.read_text())["devices"]
        return 1.0 + sum(d["count"] for d in devices) / 10 + (0.01 if devices[0]["profile"].endswith("cpu0.25") else 0)

    monkeypatch.setattr(seed_profiles, "predict", predict)
    jobs = {"mixed": ({"strategy": "dp"}, 24), "cpu0.5": ({"strategy": "dp"}, 12), "cpu0.25": ({"strategy": "dp"}, 12)}
    got = seed_profiles.priced_now({}, tmp_path, KINDS, jobs, 2.0, "-now-dp-24")
    assert profiled_into == [("0.5,0.5,0.25,0.25", tmp_path / "round-now-dp-24")]
    # the mixed job on all four devices, each kind's own on its two (a profile path per kind)
    # plans that do not say their microbatches (these) have no spread for the profile's sampling
    assert got == {"steps_priced_now_s": {"mixed": 1.4, "cpu0.5": 1.2, "cpu0.25": 1.21},
                   "steps_priced_now_spread": {"mixed": None, "cpu0.5": None, "cpu0.25": None},
                   "profiled_now": {"cpu0.5": "p-cpu0.5", "cpu0.25": "p-cpu0.25"}}
    assert sorted(p.name for p in tmp_path.glob("inv-now-dp-24-*.yaml")) == [
        "inv-now-dp-24-cpu0.25.yaml", "inv-now-dp-24-cpu0.5.yaml", "inv-now-dp-24-mixed.yaml"]
    kinds = seed_profiles.priced_now({}, tmp_path, KINDS, {**jobs, "mixed": ({"strategy": "kinds"}, 24)}, 2.0, "-k")
    assert kinds["steps_priced_now_s"]["mixed"] is None and kinds["steps_priced_now_s"]["cpu0.5"] == 1.2
