"""Time-to-train on tiny: every workload reaches its documented target on CPU, and the
targets are well above what a trivial predictor scores."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.config import registry
from harness.run import runner
from harness.config.run_config import RunConfig
from results.record import schema
from tests.conftest import tiny_dataset

@pytest.mark.slow
@pytest.mark.parametrize("name", registry.names())
def test_tiny_reaches_target(name, tmp_path, data_root, monkeypatch):
    monkeypatch.setenv("HARNESS_DATA", str(data_root))
    ref = registry.get(name).reference  # step cap well above what is needed
    cfg = RunConfig(workload=name, mode="ttt", steps=ref.ttt_step_cap, warmup_steps=0, eval_every=ref.ttt_eval_every)
    out = runner.execute(cfg, root=tmp_path)
    assert out.status == "finished", out.reason
    rec = schema.read_record(out.dir)
    s = rec["summary"]
    assert s["converged"], s
    wl = registry.get(name)
    reached = s["quality"] >= s["quality_target"] if wl.higher_is_better else s["quality"] <= s["quality_target"]
    assert reached and s["steps_done"] < ref.ttt_step_cap
    log = (out.dir / schema.MLPERF_LOG).read_text()
    assert '"status": "success"' in log
    from harness.experiments import compliance
    ok, msg = compliance.check(out.dir / schema.MLPERF_LOG, name)  # the unmodified MLPerf checker
    assert ok, msg


def test_deepcam_target_beats_predicting_background(data_root):
    wl = registry.get("deepcam")
    size = wl.sizes["tiny"]
    root = tiny_dataset(data_root, "deepcam")
    n = wl.n_samples(root, "val", size)
    sums = {"iou_sum": 0.0, "count": 0.0}
    for _, y in wl.torch_loader(root, "val", size, [list(range(n))]):
        logits = torch.zeros(len(y), 3, size.height, size.width)
        logits[:, 0] = 1.0  # everything background
        for k, v in wl.quality_sums(logits, y).items():
            sums[k] += v
    trivial = wl.quality(sums)
    assert trivial < size.quality_target - 0.05, trivial


def test_lm_target_is_above_the_entropy_bound(data_root):
    wl = registry.get("lm")
    size = wl.sizes["tiny"]
    root = tiny_dataset(data_root, "lm")
    from workloads.lm.markov import build_source, entropy_rate
    h = entropy_rate(*build_source(size.source_vocab, size.successors, RunConfig(workload="lm").data_seed))
    assert wl.quality_target(size, root) == pytest.approx(h + size.target_margin)
    assert h < np.log(size.source_vocab)  # the source is far from uniform: there is something to learn
