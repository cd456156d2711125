"""Compare and Ablation read as a user reads them: the default comparison is two sweep cells
(all repeats), meaningless pairs are called out, an unsupported run shows its status and
reason, and Ablation lists the baseline first and says why a toggle has no bar."""
from __future__ import annotations

from results.analysis import speedups as report
from tests.conftest import XSS
from tests.helpers import app_page as _page


def test_compare_defaults_to_two_sweep_cells_with_run_to_run_variation(monkeypatch, seeded):
    root, _ = seeded
    at = _page(monkeypatch, root, "compare")
    assert at.radio[0].value == "cells"
    assert [s.value for s in at.selectbox][1:] == ["cosmoflow/tiny baseline", "cosmoflow/tiny +channels_last"]
    frame = report.records_frame(root / "runs")
    frame = frame[(frame["sweep"] == at.selectbox[0].value) & (frame["status"] == "finished")]
    frame = frame.assign(config=report.label_configs(frame))
    from portal.data import compare_samples, samples
    cell = lambda c: [samples(d) for d in frame[frame["config"] == c]["record_dir"]]  # noqa: E731
    want = compare_samples(cell("baseline"), cell("+channels_last"))  # every repeat of each cell
    (row,) = at.dataframe[0].value.to_dict("records")
    assert row["metric"] == "step time (B speedup over A)"
    assert row["delta [95% CI]"] == f"{want['speedup']:.3f}x [{want['ci_lo']:.3f}, {want['ci_hi']:.3f}]"
    assert at.caption[0].value.startswith("2 run(s) of A, 2 of B: the CI resamples runs")


def test_compare_warns_on_a_run_against_itself_and_shows_an_unsupported_runs_reason(monkeypatch, seeded):
    root, crafted = seeded
    frame = report.records_frame(root / "runs")
    unsupported = frame[frame["status"] == "unsupported"].iloc[0]["run_id"]
    at = _page(monkeypatch, root, "compare", query={"view": "runs", "a": unsupported, "b": unsupported})
    assert [w.value for w in at.warning] == ["A and B are the same run.", "Run A is unsupported; its reason:",
                                             "Run B is unsupported; its reason:"]
    assert "CUDA" in at.code[0].value
    at = _page(monkeypatch, root, "compare", query={"view": "runs", "a": unsupported, "b": crafted})
    assert f"RuntimeError: {XSS}" in [c.value for c in at.code]  # verbatim, in a code block
    assert all(XSS not in w.value for w in at.warning)


def test_ablation_lists_the_baseline_first_and_says_why_a_toggle_has_no_bar(monkeypatch, seeded):
    root, _ = seeded
    at = _page(monkeypatch, root, "ablation")
    table = at.dataframe[0].value
    assert table["config"].iloc[0] == "baseline"
    assert "mfu_vendor_pct" not in table  # no vendor peak for a CPU: neither the column nor its description
    captions = [c.value for c in at.caption]
    assert not any("mfu_vendor_pct" in c for c in captions)
    # the measured peak's rule is said where MFU is shown: a dtype's ceiling is at least fp32's
    assert any("mfu_measured_pct against this machine's measured matmul peak at the run's dtype (fp32's where "
               "that is faster)" in c for c in captions), captions
    assert any(c.startswith("+cuda_graphs: no bar, unsupported: ") and "CUDA" in c for c in captions)
