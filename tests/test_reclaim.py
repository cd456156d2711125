"""harness/measure/reclaim.py: the kernel's own page reclaim (DAMON pageout schemes) and the
counters of what was read back, on sysfs and vmstat trees laid out as this project's VMs have them."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.measure import doctor, machine_state, reclaim


def _kdamond(root, n, state, action="pageout", aggr_us=5_000_000, age=12, quota=134217728, reset_ms=1000):
    ctx = root / str(n) / "contexts" / "0"
    (ctx / "monitoring_attrs" / "intervals").mkdir(parents=True)
    (ctx / "schemes" / "0" / "access_pattern" / "age").mkdir(parents=True)
    (ctx / "schemes" / "0" / "quotas").mkdir(parents=True)
    (root / str(n) / "state").write_text(state + "\n")
    (ctx / "operations").write_text("paddr\n")
    (ctx / "monitoring_attrs" / "intervals" / "aggr_us").write_text(f"{aggr_us}\n")
    (ctx / "schemes" / "0" / "action").write_text(action + "\n")
    (ctx / "schemes" / "0" / "access_pattern" / "age" / "min").write_text(f"{age}\n")
    (ctx / "schemes" / "0" / "quotas" / "bytes").write_text(f"{quota}\n")
    (ctx / "schemes" / "0" / "quotas" / "reset_interval_ms").write_text(f"{reset_ms}\n")


def test_a_running_pageout_scheme_is_found_with_how_cold_and_how_fast(tmp_path):
    _kdamond(tmp_path, 0, "on")                  # this project's VMs: 12 x 5 s, 128 MiB a second
    _kdamond(tmp_path, 1, "off")                 # not running: not reclaiming
    _kdamond(tmp_path, 2, "on", action="stat")   # monitoring only: pages nothing out
    (tmp_path / "3x").mkdir()                    # not a kdamond's directory: passed over
    found = reclaim.schemes(tmp_path)
    assert found == [{"kdamond": 0, "operations": "paddr", "cold_s": 60.0, "max_bytes_per_s": 134217728.0}]
    check = doctor._reclaim_check(found, {"workingset_refault_file": 23_187_703})
    assert check.ok is None and check.name == "proactive reclaim"  # information: the machine's, not a passing load
    assert check.found == ("kdamond 0 (paddr) pages out memory untouched for 60 s, at most 128 MiB a second; "
                           "23.2 M file pages read back since boot")
    assert "echo off >" in check.advice


def test_no_scheme_or_no_damon_at_all_is_ok(tmp_path):
    assert reclaim.schemes(tmp_path / "absent") == []
    _kdamond(tmp_path, 0, "off")
    assert reclaim.schemes(tmp_path) == []
    check = doctor._reclaim_check([], {})
    assert check.ok is True and check.found == "no DAMON pageout scheme running"


def test_counters_and_what_a_run_read_back(tmp_path):
    vm = tmp_path / "vmstat"
    vm.write_text("nr_free_pages 5000\nworkingset_refault_file 100\npgmajfault 7\npgpgin 4096\npgpgout 1\n")
    before = reclaim.counters(vm)
    assert before == {"workingset_refault_file": 100, "pgmajfault": 7, "pgpgin": 4096}
    vm.write_text("workingset_refault_file 1100\npgmajfault 9\npgpgin oops\n")
    after = reclaim.counters(vm)
    assert after == {"workingset_refault_file": 1100, "pgmajfault": 9}  # a malformed value is left out
    assert reclaim.during(before, after) == {"workingset_refault_file": 1000, "pgmajfault": 2}
    assert reclaim.counters(tmp_path / "absent") == {}


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.sampled_from("pgmajfault workingset_refault_file pgpgin 0123456789-\n x"),
                    max_size=200))
def test_counters_never_raise_on_any_vmstat_text(tmp_path_factory, text):
    vm = tmp_path_factory.mktemp("vm") / "vmstat"
    vm.write_text(text)
    got = reclaim.counters(vm)
    assert set(got) <= set(reclaim.COUNTERS) and all(isinstance(v, int) for v in got.values())


def test_a_runs_machine_figures_count_what_it_read_back():
    state = machine_state.begin()
    out = machine_state.end(state)
    assert reclaim.counters(), "no /proc/vmstat: this project's machines are Linux"
    assert set(out["reclaim"]) == set(reclaim.COUNTERS) and min(out["reclaim"].values()) >= 0
