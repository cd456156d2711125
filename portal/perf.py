"""Portal benchmark (`make perf`, run by harness/bench/driver.py as `python -m portal.perf`; torch-free).

portal_render: a store with N synthetic runs (default 10,000: 100 sweeps of 10 configurations x
  10 repeats, real record folders; results/perf.build_store), built once and cached under
  results/perf/; then first render of Overview and Runs (cold caches) and a filter change on Runs,
  timed with streamlit's AppTest (the script run, which is what the browser waits for).
  Targets: first render <= 3 s, filter <= 1 s.
store_reads URI RESULTS: one fresh process's cold reads of a (large) store, for
  harness/bench/store_scale.py: the sweep table, load_runs() of one sweep, load_runs() of all, and
  Overview's first render (AppTest), each timed.
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


def store_reads(uri: str, results_dir: str) -> dict:
    """Cold reads of the store at `uri` (its run index under `results_dir`), in this order:
    import, the sweep table, one sweep's runs (the newest), every run, Overview's first render."""
    os.environ["MLFLOW_TRACKING_URI"], os.environ["HARNESS_RESULTS"] = uri, results_dir
    out = {}
    t = time.perf_counter()
    import results
    table = results.sweep_table(uri)  # the first call also pays for the client (mlflow import) on a server
    out["sweep_table_s"] = time.perf_counter() - t
    out["sweeps"] = int((table["sweep"] != "").sum())
    t = time.perf_counter()
    one = results.load_runs(uri, sweeps=[table["sweep"].iloc[0]])
    out["load_one_sweep_s"], out["one_sweep_runs"] = time.perf_counter() - t, len(one)
    t = time.perf_counter()
    every = results.load_runs(uri)
    out["load_all_s"], out["all_runs"] = time.perf_counter() - t, len(every)
    del every
    from streamlit.testing.v1 import AppTest
    import streamlit as st
    st.cache_data.clear()
    at = AppTest.from_file(str(REPO_ROOT / "portal" / "app.py"), default_timeout=600)
    t = time.perf_counter()
    at.run()
    out["overview_first_render_s"] = time.perf_counter() - t
    assert not at.exception, [e.value for e in at.exception]
    out["overview_sweep_shown"] = at.selectbox[0].value
    st.cache_data.clear()  # Runs lists every run (filters, then a page of rows): it reads the whole index
    t = time.perf_counter()
    at.switch_page("pages/runs.py").run()
    out["runs_page_first_render_s"] = time.perf_counter() - t
    assert not at.exception, [e.value for e in at.exception]
    return out


if __name__ == "__main__":  # harness/bench/driver.py runs this in a subprocess (harness never imports portal)
    if sys.argv[1:2] == ["store_reads"]:
        json.dump(store_reads(sys.argv[2], sys.argv[3]), sys.stdout)
        sys.exit(0)
    json.dump(portal_render(*map(int, sys.argv[1:2])), sys.stdout)
