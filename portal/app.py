"""Portal entry point: `make portal` (streamlit run portal/app.py). Read-only."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="MLPerf harness results", layout="wide")
if st.get_option("runner.magicEnabled"):  # our .streamlit/config.toml turns it off: it was not read
    st.sidebar.warning("Started outside the repository root, so the portal's .streamlit/config.toml was not "
                       f"read: listening on {st.get_option('server.address') or 'all interfaces'}, usage statistics "
                       f"{'on' if st.get_option('browser.gatherUsageStats') else 'off'}. Start it with `make portal`.")
pages = [
    st.Page("pages/overview.py", title="Overview", default=True),
    st.Page("pages/ablation.py", title="Ablation"),
    st.Page("pages/runs.py", title="Runs"),
    st.Page("pages/run_detail.py", title="Run detail"),
    st.Page("pages/compare.py", title="Compare"),
    st.Page("pages/trends.py", title="Trends"),
    st.Page("pages/parallelism.py", title="Parallelism"),
    st.Page("pages/pipeline.py", title="Pipeline"),
    st.Page("pages/planner.py", title="Planner"),
    st.Page("pages/collectives.py", title="Collectives"),
    st.Page("pages/roofline.py", title="Roofline"),
]
st.navigation(pages).run()
