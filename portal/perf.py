"""Portal benchmark (`make perf`, run by harness/bench/driver.py as `python -m portal.perf`; torch-free).

portal_render: a store with N synthetic runs (default 10,000: 100 sweeps of 10 configurations x
  10 repeats, real record folders; results/perf.build_store), built once and cached under
  results/perf/; then first render of Overview and Runs (cold caches) and a filter change on Runs,
  timed with streamlit's AppTest (the script run, which is what the browser waits for).
  Targets: first render <= 3 s, filter <= 1 s.
"""
from __future__ import annotations

import json
import os
import sys
import time

from results.record.paths import REPO_ROOT
from results.store.benchmark import build_store


def portal_render(n_runs: int = 10_000) -> dict:
    from streamlit.testing.v1 import AppTest
    root = REPO_ROOT / "results" / "perf" / f"store-{n_runs}"
    t0 = time.perf_counter()
    build_store(n_runs, root)
    build_s = time.perf_counter() - t0
    os.environ["HARNESS_RESULTS"] = str(root)
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    app = str(REPO_ROOT / "portal" / "app.py")
    out = {"runs": n_runs, "store_build_s": build_s}

    def timed(fn) -> float:
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t

    import streamlit as st
    st.cache_data.clear()
    at = AppTest.from_file(app, default_timeout=600)
    out["overview_first_render_s"] = timed(at.run)
    assert not at.exception, [e.value for e in at.exception]
    st.cache_data.clear()
    at = AppTest.from_file(app, default_timeout=600)
    at.run()
    st.cache_data.clear()
    out["runs_first_render_s"] = timed(lambda: at.switch_page("pages/runs.py").run())
    assert not at.exception, [e.value for e in at.exception]
    status = at.multiselect(key="filter-status") if any(m.key == "filter-status" for m in at.multiselect) \
        else at.multiselect[3]
    out["runs_filter_change_s"] = timed(lambda: status.set_value(status.value[:1]).run())
    assert not at.exception, [e.value for e in at.exception]
    out["targets"] = {"first_render_s": 3.0, "filter_change_s": 1.0}
    return out


if __name__ == "__main__":  # harness/bench/driver.py runs this in a subprocess (harness never imports portal)
    json.dump(portal_render(*map(int, sys.argv[1:2])), sys.stdout)
