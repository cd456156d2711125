"""The Parallelism, Pipeline and Collectives pages say what results computes from the same store
(AppTest), and render in a real browser; a parallel sweep (one-rank baseline, ddp, zero1, fsdp,
and GPipe and 1F1B pipelines at 2 ranks under mpiexec) and a collectives benchmark on the same
2 ranks seed the store."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from results.analysis import collectives
from results.record import comm as comm_record
from results.analysis import speedups as report
from results.analysis import bubble as pipe
from tests.conftest import REPO, sweep_store
from tests.helpers import app_page, mpirun, visit

APP = str(REPO / "portal" / "app.py")


@pytest.fixture(scope="module")
def parallel_store(tmp_path_factory, data_root):
    root, p = sweep_store(tmp_path_factory.mktemp("portal-parallel"), data_root, """
        name: par
        workloads: [lm]
        repeats: 1
        matrix: [baseline]
        parallel: [{data: ddp}, {data: zero1}, {data: fsdp}, {pp: 2, microbatches: 2, pp_schedule: gpipe},
                   {pp: 2, microbatches: 2}, {recompute: full, ranks: [1]}]
        ranks: [2]
        base: {steps: 4, warmup_steps: 1, profile_steps: 0, account: true}
    """)
    assert "model state per rank = 0.500 of DDP's" in p.stdout  # the terminal summary's claim
    env = dict(os.environ, HARNESS_RESULTS=str(root), PYTHONPATH=str(REPO))
    env.pop("MLFLOW_TRACKING_URI", None)
    c = mpirun(env, 2, "-m", "harness", "comm", "-b", "64", "-e", "1M", "-f", "4",
                "-n", "3", "-w", "1")
    assert c.returncode == 0, c.stderr[-2000:]
    return root


def _ddp_prediction(root: Path, recs) -> str:
    """ddp@2's predicted communication, recomputed by hand: DDP issues all-reduces only, so
    calls x the benchmarked gloo time of one call of its size (the words the page prints)."""
    runs = report.records_frame(root / "runs")
    runs["config"] = report.label_configs(runs)
    ddp = runs[runs["config"] == "ddp@2"].iloc[0]
    rows = comm_record.table(recs[(recs["collective"] == "all_reduce") & (recs["backend"] == "gloo")]
                             ["record_dir"].iloc[0])
    calls, nbytes = ddp["comm_all_reduce_calls_per_step"], ddp["comm_all_reduce_bytes_per_step"]
    want_ms = 1e3 * calls * comm_record.time_at(rows, nbytes / calls)
    return f"ddp@2: predicted communication {want_ms:.1f} ms of a {1e3 * ddp['median_step_s']:.1f} ms step"


def _comm(root: Path):
    from results.store.tracking import default_tracking_uri
    recs = collectives.load_comm(default_tracking_uri(root))
    return recs, collectives.largest(collectives.size_frame(recs))


@pytest.mark.slow
def test_parallelism_page_shows_what_results_computes(monkeypatch, parallel_store):
    at = app_page(monkeypatch, parallel_store, "pages/parallelism.py")
    shown = at.dataframe[0].value.set_index("config")
    want = report.parallel_table(report.records_frame(parallel_store / "runs")).set_index("config")
    assert sorted(shown.index) == ["ac-full@1", "ddp@2", "fsdp@2", "pp2-1f1b-m2@2", "pp2-gpipe-m2@2", "zero1@2"]
    for config in shown.index:
        assert shown.loc[config, "bytes_match_theory"] == "yes"
        for col in ("all_reduce_mib", "all_gather_mib", "reduce_scatter_mib", "broadcast_mib",
                    "model_state_mib_per_rank", "optimizer_mib_per_rank"):
            if col in want and not want[col].isna()[config]:
                assert shown.loc[config, col] == pytest.approx(want.loc[config, col], rel=1e-6), (config, col)
    assert shown.loc["fsdp@2", "claim"].startswith("model state per rank = 0.500 of DDP's")
    assert shown.loc["zero1@2", "claim"].startswith("optimizer state per rank = 0.500 of DDP's")
    text = " ".join(str(c.value) for c in at.caption)
    assert "same global batch as the one-rank baseline" in text and "DeltaGenerator" not in text
    assert len(at.get("plotly_chart")) == 4  # collectives, memory, recomputation's trade-off, strong scaling
    # recomputation: ac-full@1 against the one-rank baseline, as results computes it
    from results.analysis import recompute_tradeoff
    runs = report.records_frame(parallel_store / "runs")
    trade = recompute_tradeoff.table(runs.assign(config=report.label_configs(runs)))
    shown_trade = at.dataframe[1].value
    assert shown_trade["config"].tolist() == ["ac-full@1"] and shown_trade["against"].tolist() == ["baseline"]
    assert shown_trade["activation_saved"].iloc[0] == pytest.approx(trade["activation_saved"].iloc[0])
    assert 0.9 < shown_trade["activation_saved"].iloc[0] < 1  # LM tiny: the block's output kept, ~94% saved
    assert at.text[1].value.splitlines() == [recompute_tradeoff.line(r) for _, r in trade.iterrows()]
    assert any("Context parallel (cpN)" in c.value for c in at.caption)
    scaled = at.dataframe[2].value.set_index("strategy")  # strong scaling: efficiency = speedup / ranks
    assert sorted(scaled.index) == ["ddp", "fsdp", "pp2-1f1b-m2", "pp2-gpipe-m2", "zero1"]
    assert (scaled["ranks"] == 2).all()
    for strategy, r in scaled.iterrows():
        assert r["speedup"] == pytest.approx(want.loc[f"{strategy}@2", "speedup"], rel=1e-9)
        assert r["efficiency"] == pytest.approx(r["speedup"] / 2) and r["eff_lo"] <= r["efficiency"] <= r["eff_hi"]
    assert any("Weak scaling: no campaign yet" in c.value for c in at.caption)
    shown_text = at.text[0].value.splitlines()
    assert shown_text == [report.verdict_line(r) for _, r in want.reset_index().iterrows()]


@pytest.mark.slow
def test_collectives_page_and_the_predicted_communication(monkeypatch, parallel_store):
    recs, top = _comm(parallel_store)
    at = app_page(monkeypatch, parallel_store, "pages/collectives.py")
    verdicts, not_measured = at.text[0].value.splitlines(), at.text[1].value
    ceilings = collectives.ceilings_by_backend(recs.iloc[0].to_dict())
    assert verdicts == collectives.verdict_lines(top, ceilings) and len(verdicts) == len(comm_record.COLLECTIVES)
    for c in comm_record.COLLECTIVES:  # each line names both backends with the recorded busbw
        rows = top[top["collective"] == c].set_index("backend")
        line = next(v for v in verdicts if v.startswith(f"{c} (float32, 1 MiB): busbw "))
        for b in ("gloo", "mpi"):
            assert f"{b} {rows.loc[b, 'busbw_gb_per_s']:.2f} GB/s" in line
        best = rows["busbw_gb_per_s"].max()
        assert line.endswith("% of the memory-copy ceiling") and f"; {100 * best / ceilings['mpi'][1]:.0f}%" in line
    assert "nccl all_reduce: unsupported: NCCL needs CUDA GPUs" in not_measured
    shown = at.dataframe[0].value
    assert len(shown) == 2 * len(comm_record.COLLECTIVES)
    assert sorted(shown["busbw_gb_per_s"]) == pytest.approx(sorted(top["busbw_gb_per_s"]))
    assert len(at.get("plotly_chart")) == 2
    text = " ".join(str(c.value) for c in at.caption)
    assert "slowest rank's mean" in text and "DeltaGenerator" not in text

    # the Parallelism page turns each run's collectives per step into a predicted time
    at.switch_page("pages/parallelism.py").run()
    assert not at.exception, [e.value for e in at.exception]
    lines = at.text[2].value.splitlines()  # after the verdicts and recomputation's lines
    line = next(x for x in lines if x.startswith("ddp@2: predicted communication"))
    assert _ddp_prediction(parallel_store, recs) in line
    assert any(x.startswith("fsdp@2: predicted communication") for x in lines)


def pipe_record(record_dir: str) -> dict:
    from results.record import schema
    return schema.read_record(Path(record_dir))["summary"]["pipeline"]


def _pipeline_table(root: Path):
    runs = report.records_frame(root / "runs")
    runs["config"] = report.label_configs(runs)
    return pipe.bubble_table(runs)


@pytest.mark.slow
def test_pipeline_page_shows_the_bubble_and_the_schedule(monkeypatch, parallel_store):
    at = app_page(monkeypatch, parallel_store, "pages/pipeline.py")
    want = _pipeline_table(parallel_store).set_index("config")
    shown = at.dataframe[0].value.set_index("config")
    assert sorted(shown.index) == ["pp2-1f1b-m2@2", "pp2-gpipe-m2@2"]
    for config in shown.index:
        for col in ("bubble_measured", "bubble_theory", "bubble_predicted", "window_ms"):
            assert shown.loc[config, col] == pytest.approx(want.loc[config, col], rel=1e-6), (config, col)
        assert shown.loc[config, "bubble_theory"] == pytest.approx(1 / 3)  # p=2, m=2
    assert at.text[0].value.splitlines() == [pipe.verdict(r) for _, r in want.reset_index().iterrows()]
    charts = at.get("plotly_chart")
    assert len(charts) == 2
    import plotly.io
    bars = {t.name: t for t in plotly.io.from_json(charts[1].proto.spec).data}
    assert set(bars) == {"idle", "forward", "backward", "loss"}
    # the chosen run's median step: every microbatch's forward and backward on both stages
    assert sorted(zip(bars["forward"].y, bars["forward"].text)) == sorted(
        (f"stage {s}", str(m)) for s in range(2) for m in range(2))
    assert len(bars["backward"].y) == 4 and list(bars["idle"].y) == ["stage 0", "stage 1"]
    assert "bubble" in at.text[1].value and "theory" in at.text[1].value


@pytest.mark.slow
@pytest.mark.skipif(not Path(shutil.which("chromium") or "/usr/bin/chromium").exists(),
                    reason="Debian chromium not installed (make system-deps)")
def test_parallelism_and_collectives_pages_in_chromium(parallel_store):
    from playwright.sync_api import sync_playwright

    from tests.helpers import CHROMIUM, CHROMIUM_ARGS, serve
    recs, top = _comm(parallel_store)
    with serve(parallel_store) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        body, legend = visit(browser, url, "parallelism", "parallelism")
        assert "Parallelism: strategies, collectives and memory" in body
        assert "same global batch as the one-rank baseline" in body
        want = report.parallel_table(report.records_frame(parallel_store / "runs"))
        for _, r in want.iterrows():  # every verdict line, numbers included, as results computes it
            assert report.verdict_line(r) in body, report.verdict_line(r)
        assert "fsdp@2:" in body and "model state per rank = 0.500 of DDP's" in body
        from results.analysis import recompute_tradeoff
        runs = report.records_frame(parallel_store / "runs")
        for _, r in recompute_tradeoff.table(runs.assign(config=report.label_configs(runs))).iterrows():
            assert recompute_tradeoff.line(r) in body, recompute_tradeoff.line(r)  # ac-full@1 vs baseline
        assert _ddp_prediction(parallel_store, recs) in body  # the predicted communication, as computed
        assert "all_reduce (measured)" in legend and "all_reduce (theory)" in legend

        body, legend = visit(browser, url, "pipeline", "pipeline")
        assert "Pipeline: schedules and their bubble" in body
        for _, r in _pipeline_table(parallel_store).iterrows():
            assert pipe.verdict(r) in body, pipe.verdict(r)
        assert "theory p=2" in legend and "gpipe measured" in legend and "1f1b measured" in legend
        first = _pipeline_table(parallel_store).iloc[0]  # the run the timeline shows first
        rec = pipe_record(first["record_dir"])
        assert (f"{len(pipe.timeline(rec))} events; window {1000 * rec['window_s']:.1f} ms (median step); bubble "
                f"{rec['bubble_measured']:.3f} measured, {rec['bubble_theory']:.3f} theory") in body

        body, legend = visit(browser, url, "collectives", "collectives")
        assert "Collectives: bandwidth and latency per backend" in body
        for line in collectives.verdict_lines(top, collectives.ceilings_by_backend(recs.iloc[0].to_dict())):
            assert line in body, line
        assert "nccl send_recv: unsupported: NCCL needs CUDA GPUs" in body
        for words in ("gloo (ip)", "mpi (oop)", "memory copy, all cores", *comm_record.COLLECTIVES):
            assert words in legend, words  # the legend and every collective's panel
        browser.close()
