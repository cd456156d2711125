"""Each plan's step inside planner_seed's interleaved checks against its price
(results/planner/seed_steps.py): the mixed plan's price recovered from the predicted utilization,
the rows and the verdict, and malformed checks passed over one by one."""
from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from results.planner import seed_steps

# the 2026-12-06 15:36 planner_seed run's data-parallel checks (Xeon), the fields the rows read
AT_24 = {"mixed": "dp x4 [8, 8, 4, 4]", "jobs": ["dp x2 [6, 6]", "dp x2 [6, 6]"], "predicted": 0.9128,
         "mixed_step_s": [2.7697, 2.7166], "kind_steps_s": {"cpu0.5": 1.8607, "cpu0.25": 3.8305},
         "kind_steps_predicted_s": {"cpu0.5": 1.751, "cpu0.25": 3.6735}}
AT_96 = {"global_batch": 96, "mixed": "dp x4 [33, 33, 15, 15]", "jobs": ["dp x2 [24, 24]", "dp x2 [24, 24]"],
         "predicted": 0.9718, "mixed_step_s": [10.1038, 10.5703],
         "kind_steps_s": {"cpu0.5": 7.1859, "cpu0.25": 15.0835},
         "kind_steps_predicted_s": {"cpu0.5": 6.5779, "cpu0.25": 13.6677}}


def test_the_mixed_price_is_what_the_predicted_utilization_was_computed_from():
    """planner_seed: U = (B / mixed) / sum_k (B // 2 / own_k). Kinds priced 2 s and 4 s at half of
    batch 24 do 6 + 3 = 9 samples/s between them; a mixed job priced 2.5 s does 9.6: U = 1.0667."""
    si = {"predicted": (24 / 2.5) / (12 / 2 + 12 / 4), "kind_steps_predicted_s": {"a": 2.0, "b": 4.0}}
    assert seed_steps.mixed_price_s(si, 24) == pytest.approx(2.5, rel=1e-12)
    # kept to 4 digits in the file, as planner_seed writes it: the price to 5e-5
    assert seed_steps.mixed_price_s({**si, "predicted": round(si["predicted"], 4)}, 24) == pytest.approx(2.5, rel=5e-5)


def test_one_row_per_job_of_each_check_that_ran_in_the_bench_order():
    check = {"global_batch": 24, "seed_interleaved_amortized": AT_96, "seed_interleaved": AT_24,
             "seed_interleaved_pp": {"skipped": "the plans are not all data parallel"}}
    rows = seed_steps.steps(check)
    assert [(r["check"], r["job"]) for r in rows] == [
        ("seed_interleaved", "mixed"), ("seed_interleaved", "cpu0.5"), ("seed_interleaved", "cpu0.25"),
        ("seed_interleaved_amortized", "mixed"), ("seed_interleaved_amortized", "cpu0.5"),
        ("seed_interleaved_amortized", "cpu0.25")]
    assert [r["name"] for r in rows] == ["data parallel, at batch 24"] * 3 + ["data parallel, at batch 96"] * 3
    assert [r["plan"] for r in rows][:3] == ["dp x4 [8, 8, 4, 4]", "dp x2 [6, 6]", "dp x2 [6, 6]"]
    # each kind's own: its price over its step as run; the mixed job: the median of its processes
    assert rows[1]["error"] == pytest.approx(1.751 / 1.8607 - 1)
    assert rows[5]["error"] == pytest.approx(13.6677 / 15.0835 - 1)
    assert rows[3]["measured_s"] == pytest.approx((10.1038 + 10.5703) / 2)
    assert rows[3]["predicted_s"] == pytest.approx(96 / (0.9718 * (48 / 6.5779 + 48 / 13.6677)))
    assert seed_steps.verdict(rows) == (
        "Each plan's step inside the interleaved checks, against its price: 1 of 6 within 5%; the furthest the "
        "mixed job in data parallel, at batch 96, -11.6% (9.14 s priced, 10.34 s measured).")
    assert seed_steps.verdict([]) == ""


@pytest.mark.parametrize("broken", [
    {**AT_24, "mixed_step_s": []}, {**AT_24, "kind_steps_s": {"cpu0.5": 1.8}}, {**AT_24, "predicted": 0},
    {**AT_24, "kind_steps_predicted_s": {"cpu0.5": -1.0, "cpu0.25": 3.6}}, {**AT_24, "mixed_step_s": ["x"]},
    {**AT_24, "predicted": float("nan")}, [], "text", None])
def test_a_malformed_check_has_no_rows_and_the_others_keep_theirs(broken):
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved": broken, "seed_interleaved_amortized": AT_96})
    assert [r["check"] for r in rows] == ["seed_interleaved_amortized"] * 3


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                     max_leaves=12)


# AT_96 with every field a check may have: its steps, its prices again and its probe (made up)
FULL_96 = {**AT_96, "steps_steady_s": {"mixed": [10.0, 10.5] * 5, "cpu0.5": [7.0, 7.3] * 5, "cpu0.25": [15.0] * 6},
           "steps_priced_now_s": {"mixed": 10.0, "cpu0.5": 7.0, "cpu0.25": 15.5},
           "steps_priced_in_check_s": {"mixed": 10.2, "cpu0.5": 7.2, "cpu0.25": 15.1},
           "steps_priced_now_spread": {"mixed": 0.08, "cpu0.5": 0.07, "cpu0.25": None},
           "steps_priced_in_check_spread": {"mixed": 0.0, "cpu0.5": 0.03, "cpu0.25": 0.02},
           "probe": {"factors": {"cpu0.5": 1.02, "cpu0.25": 0.99}, "ci95": {"cpu0.5": [0.9, 1.15], "cpu0.25": [0.9, 1.1]},
                     "ci95_visits": {"cpu0.5": [0.99, 1.05], "cpu0.25": [0.97, 1.01]}}}


@settings(max_examples=400, deadline=None)
@given(replaced=st.dictionaries(st.sampled_from(sorted(FULL_96)), _json, max_size=3))
@example(replaced={"mixed_step_s": [1.192092896e-07]})  # an error of 8e7: exp(log(x)) an ulp below it (CI, 2026-12-07)
def test_any_check_gives_rows_of_finite_positive_steps_or_none(replaced):
    """A real check with up to three of its fields replaced by any JSON value: rows of finite steps
    > 0, or none, each interval finite and ordered around its error; the real one's three rows
    where nothing was replaced."""
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved": {**FULL_96, **replaced}})
    assert all(math.isfinite(r["error"]) and r["predicted_s"] > 0 and r["measured_s"] > 0 for r in rows)
    assert len(rows) in (0, 3) and (replaced or len(rows) == 3)
    for r in rows:
        for f in ("error", "error_now", "error_in_check"):
            if f"{f}_ci" in r:
                lo, hi = r[f"{f}_ci"]
                assert math.isfinite(lo) and math.isfinite(hi) and lo <= r[f] + 1e-12 and r[f] <= hi + 1e-12
            assert seed_steps.standing(r, f) in ((None,) if f not in r else ("within", "beyond", "unresolved",
                                                                              "no interval"))
    assert seed_steps.verdict(rows).startswith("Each plan's step") == bool(rows)


def test_a_price_from_the_profile_just_before_the_check_is_its_own_column_and_sentence():
    """harness/bench/seed_profiles.priced_now: each job's plan priced again from a profile taken
    just before the check; a plan it cannot price again (None: a "kinds" plan) has no such figure."""
    now = {**AT_96, "steps_priced_now_s": {"mixed": None, "cpu0.5": 7.0, "cpu0.25": 15.5}}
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved": AT_24, "seed_interleaved_amortized": now})
    assert ["error_now" in r for r in rows] == [False] * 4 + [True, True]
    assert rows[4]["priced_now_s"] == 7.0 and rows[4]["error_now"] == pytest.approx(7.0 / 7.1859 - 1)
    assert rows[5]["error_now"] == pytest.approx(15.5 / 15.0835 - 1)
    assert seed_steps.verdict(rows).endswith(
        " Priced from a profile just before each check: 2 of 2 within 5%; the furthest the cpu0.25 job in data "
        "parallel, at batch 96, +2.8%.")
    assert (seed_steps.within(rows), seed_steps.within(rows, "error_now")) == (False, True)
    assert seed_steps.within(rows[:4], "error_now") is None  # no check priced again: not a pass
    for bad in ("7", True, float("inf"), -7.0, 0):  # not a price: no figure, the row stays
        si = {**AT_24, "steps_priced_now_s": {"cpu0.5": bad}}
        got = seed_steps.steps({"global_batch": 24, "seed_interleaved": si})
        assert len(got) == 3 and not any("error_now" in r for r in got)


def test_a_price_for_the_speed_during_the_check_is_a_third_column_and_sentence():
    """harness/bench/seed_profiles.priced_in_check: the profile just before scaled by each kind's
    probe in the check; its own column beside the other two, its own sentence after theirs."""
    si = {**AT_96, "steps_priced_now_s": {"mixed": None, "cpu0.5": 7.0, "cpu0.25": 15.5},
          "steps_priced_in_check_s": {"mixed": None, "cpu0.5": 7.5, "cpu0.25": 16.2}}
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved_amortized": si})
    assert ["error_in_check" in r for r in rows] == [False, True, True]
    assert rows[1]["priced_in_check_s"] == 7.5 and rows[1]["error_in_check"] == pytest.approx(7.5 / 7.1859 - 1)
    assert rows[1]["error_now"] == pytest.approx(7.0 / 7.1859 - 1)  # the other price is left as it was
    assert seed_steps.verdict(rows).endswith(
        "+2.8%. That profile scaled by each kind's speed during the check: 1 of 2 within 5%; the furthest the "
        "cpu0.25 job in data parallel, at batch 96, +7.4%.")  # the 0.5-CPU job's +4.4% within
    assert seed_steps.within(rows, "error_in_check") is False and seed_steps.within(rows[:2], "error_in_check")


# each job's steady steps in the check (ten a job: the order-statistics interval is the 2nd and 9th)
FAST_STEPS = [6.9, 7.0, 7.1, 7.15, 7.18, 7.19, 7.2, 7.3, 7.4, 7.5]  # [7.0, 7.4] about the 7.1859 measured
SLOW_STEPS = [13.0, 13.5, 14.0, 14.5, 15.0, 15.1, 15.5, 16.0, 16.5, 17.0]  # [13.5, 16.5] about 15.0835


def test_each_error_has_the_measured_steps_interval_and_a_miss_is_told_from_one_the_steps_cannot_resolve():
    """The 0.5-CPU job priced 6.5779 s: -8.5%, its interval [6.5779 / 7.4 - 1, 6.5779 / 7.0 - 1] =
    [-11.1%, -6.0%] wholly beyond 5%: a miss. The 0.25-CPU job priced 13.6677 s: -9.4%, but its
    steps put it anywhere in [-17.2%, +1.2%]: not resolved. The mixed job kept no steps: no interval."""
    si = {**AT_96, "steps_steady_s": {"cpu0.5": FAST_STEPS, "cpu0.25": SLOW_STEPS}}
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved_amortized": si})
    assert "measured_ci_s" not in rows[0] and rows[1]["measured_ci_s"] == (7.0, 7.4)
    assert rows[1]["error_ci"] == pytest.approx((6.5779 / 7.4 - 1, 6.5779 / 7.0 - 1))
    assert rows[2]["error_ci"] == pytest.approx((13.6677 / 16.5 - 1, 13.6677 / 13.5 - 1))
    assert [seed_steps.standing(r) for r in rows] == ["no interval", "beyond", "unresolved"]
    assert seed_steps.standing(rows[1], "error_now") is None  # not priced again: no standing
    assert seed_steps.verdict(rows) == (
        "Each plan's step inside the interleaved checks, against its price: 0 of 3 within 5% (1 beyond it at 95% "
        "confidence, 1 not resolved at this sample size, 1 without an interval); the furthest the mixed job in "
        "data parallel, at batch 96, -11.6% (9.14 s priced, 10.34 s measured).")
    # a job within 5% is within whatever its interval: the estimate is what the target names
    near = {**si, "kind_steps_predicted_s": {"cpu0.5": 7.0, "cpu0.25": 13.6677}}
    assert seed_steps.standing(seed_steps.steps({"global_batch": 24, "seed_interleaved": near})[1]) == "within"


def test_the_price_scaled_by_the_probe_carries_the_probes_interval_too():
    """log(price / measured) -+ the measured step's and the factor's log half-widths in quadrature:
    a slow measured step or a low factor lowers the error. The mixed job takes its kinds' widest."""
    probe = {"factors": {"cpu0.5": 1.0, "cpu0.25": 1.1}, "ci95": {"cpu0.5": [0.98, 1.02], "cpu0.25": [1.0, 1.2]}}
    si = {**AT_96, "steps_steady_s": {"mixed": [10.2, 10.3] * 5, "cpu0.5": FAST_STEPS, "cpu0.25": SLOW_STEPS},
          "steps_priced_in_check_s": {"mixed": 10.0, "cpu0.5": 7.5, "cpu0.25": 16.2}, "probe": probe}
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved_amortized": si})
    centre, meas = math.log(16.2 / 15.0835), 15.0835
    lo = math.exp(centre - math.hypot(math.log(16.5 / meas), math.log(1.1 / 1.0))) - 1
    hi = math.exp(centre + math.hypot(math.log(meas / 13.5), math.log(1.2 / 1.1))) - 1
    assert rows[2]["error_in_check_ci"] == pytest.approx((lo, hi))
    assert rows[2]["error_ci"] == pytest.approx((13.6677 / 16.5 - 1, 13.6677 / 13.5 - 1))  # no probe in it
    # the mixed job's steps [10.2, 10.3] about its 10.3370 median of processes; the 0.25-CPU kind's factor
    # interval is the wider one below and above
    meas = (10.1038 + 10.5703) / 2
    assert rows[0]["error_in_check_ci"][1] == pytest.approx(
        math.exp(math.log(10.0 / meas) + math.hypot(math.log(meas / 10.2), math.log(1.2 / 1.1))) - 1)
    assert [seed_steps.standing(r, "error_in_check") for r in rows] == ["within", "within", "unresolved"]
    assert (seed_steps.beyond(rows, "error_in_check"), seed_steps.beyond(rows), seed_steps.beyond(rows, "error_now")) \
        == (0, 2, None)  # the first price: the mixed job's -11.6% [-11.6%, -10.4%] and the 0.5-CPU job's
    # -8.5% [-11.1%, -6.0%]; no price from just before
    # a factor without an interval (a file from before 2026-12-07 afternoon): no interval for that price only
    old = seed_steps.steps({"global_batch": 24, "seed_interleaved_amortized": {**si, "probe": {"factors": {}}}})
    assert "error_in_check_ci" not in old[2] and old[2]["error_ci"] == rows[2]["error_ci"]


def test_the_prices_from_the_profile_just_before_carry_its_own_sampling_too():
    """steps_priced_now_spread (harness/bench/price_spread.py): the price's log half-width for the
    profile's sampling, in quadrature with the measured step's; with the probe, the spread of the
    price's cells relative to the probe's (steps_priced_in_check_spread) and the factor's interval
    over the check's visits alone (ci95_visits, where kept). The plans' own price, from another
    profile, is left as it was. The 0.5-CPU job priced 6.6 s from just before: -8.2%, [-10.8%, -5.7%]
    by its steps alone, a miss; with the profile's 8% in it the interval reaches within 5%."""
    probe = {"factors": {"cpu0.5": 1.0, "cpu0.25": 1.1}, "ci95": {"cpu0.5": [0.9, 1.1], "cpu0.25": [0.9, 1.3]},
             "ci95_visits": {"cpu0.5": [0.98, 1.02], "cpu0.25": [1.0, 1.2]}}
    si = {**AT_96, "steps_steady_s": {"cpu0.5": FAST_STEPS, "cpu0.25": SLOW_STEPS},
          "steps_priced_now_s": {"cpu0.5": 6.6, "cpu0.25": 16.2}, "steps_priced_in_check_s": {"cpu0.5": 6.6},
          "probe": probe}
    plain = seed_steps.steps({"global_batch": 24, "seed_interleaved_amortized": si})
    spread, relative = math.log(1.08), math.log(1.03)  # the 0.5-CPU price: 8% for its cells, 3% over the probe's
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved_amortized": {
        **si, "steps_priced_now_spread": {"mixed": None, "cpu0.5": spread, "cpu0.25": "x"},
        "steps_priced_in_check_spread": {"cpu0.5": relative}}})
    centre, meas = math.log(6.6 / 7.1859), 7.1859
    assert rows[1]["error_now_ci"] == pytest.approx((
        math.exp(centre - math.hypot(math.log(7.4 / meas), spread)) - 1,
        math.exp(centre + math.hypot(math.log(meas / 7.0), spread)) - 1))
    assert rows[1]["error_in_check_ci"] == pytest.approx((
        math.exp(centre - math.hypot(math.log(7.4 / meas), math.log(1.0 / 0.98), relative)) - 1,
        math.exp(centre + math.hypot(math.log(meas / 7.0), math.log(1.02 / 1.0), relative)) - 1))
    assert plain[1]["error_in_check_ci"] == pytest.approx((  # no spread kept: the visits' interval alone
        math.exp(centre - math.hypot(math.log(7.4 / meas), math.log(1.0 / 0.98))) - 1,
        math.exp(centre + math.hypot(math.log(meas / 7.0), math.log(1.02 / 1.0))) - 1))
    assert [seed_steps.standing(r, "error_now") for r in (plain[1], rows[1])] == ["beyond", "unresolved"]
    assert rows[1]["error_ci"] == plain[1]["error_ci"]  # the first round's profile: no spread kept for it
    assert rows[2]["error_now_ci"] == plain[2]["error_now_ci"]  # a spread that is not a number counts none


@pytest.mark.parametrize("steps", [None, [], [7.0] * 5, ["x"] * 10, [7.0, -1.0] * 5, {"a": 1}, "7,7,7",
                                   [float("nan")] * 10])
def test_steps_that_cannot_give_an_interval_leave_the_row_without_one(steps):
    si = {**AT_96, "steps_steady_s": {"cpu0.5": steps, "cpu0.25": SLOW_STEPS}}
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved_amortized": si})
    assert len(rows) == 3 and "measured_ci_s" not in rows[1] and "measured_ci_s" in rows[2]
