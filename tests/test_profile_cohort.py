"""`harness profile` under mpiexec: the ranks profile at once, each held to its HARNESS_RANK_CPU
share (harness/planning/cohort.py), and a held rank's figures are CPU seconds at its metered rate
(harness/measure/cells.py)."""
from __future__ import annotations

import json

import pytest

from harness.parallel.dist import mpiexec
from tests.conftest import REPO


@pytest.mark.slow
def test_ranks_profile_together_each_held_to_its_share(tmp_path):
    import os
    import subprocess
    import sys

    from harness.parallel import cpu_quota as rank_cpu
    env = {**os.environ, "HARNESS_RESULTS": str(tmp_path), "PYTHONPATH": str(REPO)}
    held = rank_cpu.unavailable() is None
    if held:
        env[rank_cpu.ENV] = "1,0.5"
    p = subprocess.run([mpiexec(), "-n", "2", sys.executable, "-m", "harness",
                        "profile", "lm", "--size", "tiny", "--microbatches", "1,2", "--repeats", "1", "--threads", "1",
                        "--cell-s", "0.2"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert ("wall seconds per CPU second" in p.stdout) == held  # the command says how it timed a held rank
    recs = sorted((tmp_path / "profiles").glob("profile-lm-tiny-*"))
    assert len(recs) == 2
    ranks = set()
    passes_held, summaries = [], []
    for r in recs:
        s = json.loads((r / "summary.json").read_text())
        rank = s["profiled_with"]["rank"]
        ranks.add(rank)
        assert s["profiled_with"]["ranks"] == 2 and f"-r{rank}-" in r.name
        assert s["profiled_with"]["ended"] == "together"
        assert s["constraint"]["cpus"] == ([1.0, 0.5][rank] if held else None)
        # held, the figures are CPU seconds at the rank's metered rate (wall per CPU second: at
        # least 1 on one thread; up to 1 / its CPUs where the quota binds, which LM tiny's cheap
        # passes between the cohort's waits need not: 1.39 at 0.5 CPU, 2026-12-06)
        assert s["timed"]["by"] == ("cpu seconds x the rank's wall per cpu second" if held else "wall seconds")
        if held:
            rate, row = s["timed"]["wall_per_cpu"], s["layers"]["block"][0]
            assert rate >= 0.9
            assert row["fwd_s"] == pytest.approx(sum(row["fwd_cpu_samples_s"]) / len(row["fwd_cpu_samples_s"]) * rate)
        # each measurement lasted at least cell_s: more passes than the repeats asked for
        assert len(s["layers"]["embedding"][0]["fwd_samples_s"]) > 1
        passes_held.append([row["held_passes"] for rows in s["layers"].values() for row in rows])
        summaries.append(s)
    assert ranks == {0, 1}
    # the rounds end when the last rank's last rule is met: that cell ran no pass past its rule,
    # while a rank done first sampled on (held passes) until its peer was
    assert any(min(held) == 0 for held in passes_held), passes_held
    assert all(s["timed"]["how"] == "rounds" for s in summaries)
