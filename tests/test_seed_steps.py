"""Each plan's step inside planner_seed's interleaved checks against its price
(results/planner/seed_steps.py): the mixed plan's price recovered from the predicted utilization,
the rows and the verdict, and malformed checks passed over one by one."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
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


@settings(max_examples=300, deadline=None)
@given(replaced=st.dictionaries(st.sampled_from(sorted(AT_96)), _json, max_size=3))
def test_any_check_gives_rows_of_finite_positive_steps_or_none(replaced):
    """A real check with up to three of its fields replaced by any JSON value: rows of finite steps
    > 0, or none; the real one's three rows where nothing was replaced."""
    rows = seed_steps.steps({"global_batch": 24, "seed_interleaved": {**AT_96, **replaced}})
    assert all(math.isfinite(r["error"]) and r["predicted_s"] > 0 and r["measured_s"] > 0 for r in rows)
    assert len(rows) in (0, 3) and (replaced or len(rows) == 3)
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
